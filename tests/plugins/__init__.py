"""Tests for the built-in plugins."""
