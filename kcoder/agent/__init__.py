"""The agent: model access (llm), profiles, tools (toolbox), skills, prompts, the loop, its
events on screen (events), the one place an agent is built (assemble), reports, `optimize`.

Nothing is imported here eagerly: litellm and torch load only when a run starts.
"""
