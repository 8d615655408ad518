"""Long-running tool calls on Cloud Tasks (DESIGN §6)."""
