"""Built-in slash commands."""
