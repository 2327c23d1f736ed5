"""`kcoder mcp`: kcoder's tools for other coding agents over the Model Context Protocol.

confine.py (which paths a client may name), actions.py (what the tools do, blocking),
jobs.py (optimize runs as child processes), reports.py (run reports as resources),
server.py (the MCP server: tools, resources, transports). Nothing is imported here: the
SDK loads only when `kcoder mcp` runs.
"""
