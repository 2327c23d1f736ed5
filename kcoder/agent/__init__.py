"""The agent: model access (llm), profiles, tools (toolbox), skills, the loop, `optimize`.

Nothing is imported here eagerly: litellm and torch load only when a run starts.
"""
