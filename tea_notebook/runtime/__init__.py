"""The agent runtime: events, the agent loop, prompts, todo and memory."""
