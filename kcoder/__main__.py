from kcoder.cli import main

main()
