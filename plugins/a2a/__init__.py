"""Remote A2A agents as tool sources (``[[tools.a2a]]``, docs/a2a.md)."""
