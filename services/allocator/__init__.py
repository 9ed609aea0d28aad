"""The allocator: the single fenced writer that decides intents and appends events to the log."""
