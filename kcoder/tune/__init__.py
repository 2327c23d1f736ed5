"""Parameter search over a candidate's declared space (`kcoder tune`, the agent's tune tool).

A candidate declares module-level literals: TUNE (name -> list of values), CONFIG (the current
choice) and optionally TUNE_CONSTRAINTS (expressions over the names). Tuning evaluates
rewritten copies of the file with the judge and keeps the fastest verified one; only the
CONFIG literal ever changes, so the tuned file is as plain as the original.

space.py parse/rewrite/constraints, strategies.py what to try next, engine.py the search loop,
cache.py results per kernel and device, resources.py ptxas per point (cuda), report.py table
and plot, command.py the CLI body.
"""
