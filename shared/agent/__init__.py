"""The agent: runs, the model loop, streamed events and their persistence."""
