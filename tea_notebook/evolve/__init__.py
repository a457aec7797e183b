"""Self-evolution (Mem²Evolve, AgentOrchestra's tool manager): the tool maker, the agent bank, experience
memory and the co-evolution loop. Submodules load on first use; importing this package does nothing else."""
