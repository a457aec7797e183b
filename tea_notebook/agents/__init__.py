"""Agents built on the runtime: the planner now; researcher, analyzer, browser use, tool manager later."""
