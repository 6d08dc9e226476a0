"""Built-in tools: clock and workspace files (memory tools live in ``memory``)."""
