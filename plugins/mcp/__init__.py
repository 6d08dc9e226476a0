"""MCP servers as tool sources: their tools offered to the model as ``SERVER__TOOL``.

``config`` (names and per-server decisions, from ``[[tools.mcp]]`` or an editor's
``mcpServers``), ``client`` (the ``mcp`` SDK's client: connecting over stdio or
streamable HTTP, listing tools, following ``listChanged``), ``results`` (an MCP tool
result as the text the model reads, or a tool failure) and ``source`` (one server as a
kernel tool source that restarts on use, and a group of them started together). The
SDK is imported by ``client``, ``results`` and ``source`` only: a gateway without MCP
servers never loads it. docs/mcp.md is the user's guide.
"""
