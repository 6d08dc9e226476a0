"""Tests for the LLM provider plugins."""
