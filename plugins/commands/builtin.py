"""Built-in slash commands: help, clear, history, tools, model, config, status."""

from __future__ import annotations

import msgspec

from kernel import CommandContext, SlashCommand
from kernel import model as m


async def _help(ctx: CommandContext, args: str) -> str:
    lines = [f"/{c.name} — {c.description}" for c in ctx.kernel.commands.values()]
    return "Available commands:\n" + "\n".join(lines)


async def _clear(ctx: CommandContext, args: str) -> str:
    reply = await ctx.kernel.execute(m.ClearContext(session_id=ctx.session_id, request_id=ctx.request_id), ctx.caller)
    return "Context cleared." if isinstance(reply, m.Done) else "Context will be cleared after the current run."


async def _history(ctx: CommandContext, args: str) -> str:
    count = int(args) if args.strip().isdigit() else 10
    reply = await ctx.kernel.execute(m.GetHistory(session_id=ctx.session_id), ctx.caller)
    recent = [msg for msg in reply.messages if msg.role in ("user", "assistant") and (msg.content or msg.parts)][-count:]
    if not recent:
        return "No messages yet."
    return "\n".join(f"{msg.role}: {msg.content or m.parts_text(msg.parts)}" for msg in recent)


async def _tools(ctx: CommandContext, args: str) -> str:
    tools = ctx.kernel.tools.values()
    if not tools:
        return "No tools installed."
    return "\n".join(f"{t.name} [{t.category}/{t.access}{', asks first' if t.requires_approval else ''}] — {t.description}" for t in tools)


async def _model(ctx: CommandContext, args: str) -> str:
    if args.strip():
        reply = await ctx.kernel.execute(m.ConfigureSession(session_id=ctx.session_id, model=args.strip()), ctx.caller)
    else:
        reply = await ctx.kernel.execute(m.GetSession(session_id=ctx.session_id), ctx.caller)
    info = reply.session
    provider = ctx.kernel.agent_info(ctx.kernel.agent(info.agent_id)).provider
    if args.strip():
        return f"Model for this session set to {info.model} (provider {provider})."
    return f"Model: {info.model} (provider {provider})."


async def _config(ctx: CommandContext, args: str) -> str:
    view = await ctx.kernel.execute(m.GetSettings(), ctx.caller)  # the settings are the admin's to read
    return msgspec.json.format(msgspec.json.encode(view.settings), indent=2).decode()


async def _status(ctx: CommandContext, args: str) -> str:
    report = await ctx.kernel.execute(m.GetStatus(), ctx.caller)
    return (
        f"gateway {report.version}: provider {report.provider} ({report.model}), "
        f"{report.sessions} sessions, {report.active_runs} running, up {report.uptime_s:.0f}s"
    )


BUILTIN_COMMANDS = (
    SlashCommand(name="help", description="List the available commands", handler=_help),
    SlashCommand(name="clear", description="Clear the conversation context", handler=_clear),
    SlashCommand(name="history", description="Show recent messages (/history N)", handler=_history, usage="[N]"),
    SlashCommand(name="tools", description="List the tools the agent can use", handler=_tools),
    SlashCommand(name="model", description="Show or set this session's model (/model NAME)", handler=_model, usage="[NAME]"),
    SlashCommand(name="config", description="Show the effective configuration (secrets masked)", handler=_config),
    SlashCommand(name="status", description="Show the gateway's status", handler=_status),
)
