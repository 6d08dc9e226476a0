"""LLM provider plugins: ``openai`` (any OpenAI-compatible API) and the offline ``echo``."""
