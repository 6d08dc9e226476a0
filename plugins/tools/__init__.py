"""Built-in tools: clock, workspace files and the plan (memory tools live in ``memory``)."""
