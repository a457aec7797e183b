"""The infrastructure layer's model side: embedders now, LLM clients in the runtime issue."""
