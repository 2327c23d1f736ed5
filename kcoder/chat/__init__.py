"""`kcoder chat`: an interactive REPL over the agent, with slash commands and git commits.

Entry point: `kcoder.chat.repl.run_chat(problem, settings)`. Modules: io (the one
object owning input and the console), session (run directory, agent, one turn per message),
commands (slash commands by reflection), accepted (what /commit may commit), repl (the loop).
"""
