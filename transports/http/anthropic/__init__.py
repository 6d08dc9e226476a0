"""Anthropic's Messages API on the http transport (``/v1/messages``, ``count_tokens``,
Anthropic's model list), for Claude Code and the ``anthropic`` SDKs. See docs/anthropic.md."""
