"""``run_command``: the model runs a command in the editor's terminal (ACP ``terminal/*``).

When the editor advertises ``terminal``, each of its sessions gets an
:class:`EditorTerminal` as a kernel tool source (``ConfigureSession(tool_sources=...)``):
one tool, ``run_command``, that always asks for approval. A call creates a terminal
in the editor (``terminal/create``), which the tool call then shows live; waits for
the command to exit (``terminal/wait_for_exit``), reads what it printed
(``terminal/output``) and releases the terminal (``terminal/release``). When the
call does not end normally — the run was interrupted, the tool timed out, the
editor failed — the command is killed (``terminal/kill``) before the release, so
nothing keeps running behind the user's back.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
import msgspec

from kernel import Tool, ToolContext, ToolFailure

from .files import Requester, ask_editor, confined
from .wire import CreateTerminalParams, CreateTerminalResult, TerminalExitStatus, TerminalOutputResult, TerminalParams

RUN_COMMAND = "run_command"

T = TypeVar("T")

#: Shows a terminal in a tool call: (call id, terminal id).
ShowTerminal = Callable[[str, str], Awaitable[None]]

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "the program to run, e.g. pytest (use sh with -c for a shell line)"},
        "args": {"type": "array", "items": {"type": "string"}, "description": "its arguments"},
        "cwd": {"type": "string", "description": "directory to run in, relative to the project (default: the project root)"},
    },
    "required": ["command"],
}


def command_arguments(args: dict[str, Any]) -> tuple[str, tuple[str, ...], str]:
    """(command, its arguments, working directory relative to the project) from the model's call."""
    command, argv, cwd = args.get("command"), args.get("args", []), args.get("cwd", ".")
    if not isinstance(command, str) or not command.strip():
        raise ToolFailure("argument 'command' is required and must be a non-empty string")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ToolFailure("argument 'args' must be a list of strings")
    if not isinstance(cwd, str):
        raise ToolFailure("argument 'cwd' must be a string")
    return command, tuple(argv), cwd or "."


def command_result(output: TerminalOutputResult, status: TerminalExitStatus) -> str:
    """What the model reads: the output; a command that did not exit 0 is a failed call."""
    text = output.output
    if output.truncated:
        text = "[earlier output was cut]\n" + text
    if status.exit_code == 0:
        return text or "(no output)"
    if status.signal:
        ending = f"killed by signal {status.signal}"
    elif status.exit_code is not None:
        ending = f"exit code {status.exit_code}"
    else:
        ending = "ended without an exit code"
    raise ToolFailure(f"{ending}\n{text}" if text else ending)


class EditorTerminal:
    """The ``run_command`` tool of one editor session (a kernel tool source)."""

    def __init__(
        self,
        requester: Requester,
        session_id: str,
        cwd: str,
        *,
        show: ShowTerminal,
        output_bytes: int,
        request_timeout_s: float,
    ) -> None:
        self.requester = requester
        self.session_id = session_id
        self.cwd = cwd
        self.show = show
        self.output_bytes = output_bytes
        self.request_timeout_s = request_timeout_s
        self.tool = Tool(
            name=RUN_COMMAND,
            description=(
                "Run a command in the user's project, in a terminal of their editor (they approve each "
                "command and see its output). Returns what the command printed; a non-zero exit fails."
            ),
            parameters=_PARAMETERS,
            handler=self.run,
            category="terminal",
            access="update",
            requires_approval=True,
        )

    def tools(self) -> Sequence[Tool]:
        return (self.tool,)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        command, argv, cwd = command_arguments(args)
        create = CreateTerminalParams(
            session_id=self.session_id,
            command=command,
            args=argv,
            cwd=confined(cwd, self.cwd),
            output_byte_limit=self.output_bytes,
        )
        created = await self._ask("terminal/create", create, self.request_timeout_s)
        terminal = TerminalParams(session_id=self.session_id, terminal_id=_convert(created, CreateTerminalResult).terminal_id)
        exited = False
        try:
            if ctx.call_id is not None:
                await self.show(ctx.call_id, terminal.terminal_id)
            # No bound of its own: the kernel's tool timeout (or an interrupt) ends the wait.
            status = _convert(await self._ask("terminal/wait_for_exit", terminal, math.inf), TerminalExitStatus)
            exited = True
            output = _convert(await self._ask("terminal/output", terminal, self.request_timeout_s), TerminalOutputResult)
        finally:
            with anyio.CancelScope(shield=True):
                if not exited:
                    await self._settle("terminal/kill", terminal)
                await self._settle("terminal/release", terminal)
        return command_result(output, status)

    async def _ask(self, method: str, params: Any, timeout_s: float) -> Any:
        return await ask_editor(self.requester, method, params, timeout_s=timeout_s)

    async def _settle(self, method: str, terminal: TerminalParams) -> None:
        """Kill or release, bounded; a failure is no reason to hide the call's own outcome."""
        with anyio.move_on_after(self.request_timeout_s):
            try:
                await self._ask(method, terminal, self.request_timeout_s)
            except ToolFailure:
                pass


def _convert(result: Any, kind: type[T]) -> T:
    try:
        return msgspec.convert(result, kind)
    except msgspec.ValidationError as exc:
        raise ToolFailure(f"the editor's terminal answer was not understood: {exc}") from None
