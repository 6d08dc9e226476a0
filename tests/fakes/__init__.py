"""Reusable fakes for tests and benchmarks (a fake OpenAI-compatible server)."""
