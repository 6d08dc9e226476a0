"""The A2A (Agent2Agent) transport: the gateway's agents as A2A servers (docs/a2a.md)."""
