"""Chat REPL tests (a package, so their module names never collide with other test folders)."""
