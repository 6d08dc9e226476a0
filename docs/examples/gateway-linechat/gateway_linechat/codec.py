"""Sans-IO codec of the linechat dialect: bytes in, kernel commands out; events in, text out.

Nothing here touches a socket, so every rule of the dialect is tested on plain
values. The codec keeps just the state the wire needs: whether the output is in
the middle of a line, and which question (tool approval or turn limit) is open.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from kernel import model as m

# ---------------------------------------------------------------- framing


class TooLong(msgspec.Struct, frozen=True):
    """An input line over the limit; its bytes were dropped up to the newline."""

    size: int
    limit: int


class LineSplitter:
    """Cuts a byte stream into lines, never holding more than ``max_line_bytes``."""

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._dropped = 0  # bytes dropped so far of an over-long line

    def feed(self, data: bytes) -> list[bytes | TooLong]:
        lines: list[bytes | TooLong] = []
        start = 0
        while True:
            newline = data.find(b"\n", start)
            piece = data[start:] if newline < 0 else data[start:newline]
            if self._dropped:
                self._dropped += len(piece)
            elif len(self._buffer) + len(piece) > self.max_line_bytes:
                self._dropped = len(self._buffer) + len(piece)
                self._buffer.clear()
            else:
                self._buffer += piece
            if newline < 0:
                return lines
            lines.append(self._take())
            start = newline + 1

    def end(self) -> list[bytes | TooLong]:
        """At end of input: the last line, if it had no newline."""
        return [self._take()] if self._buffer or self._dropped else []

    def _take(self) -> bytes | TooLong:
        if self._dropped:
            line: bytes | TooLong = TooLong(self._dropped, self.max_line_bytes)
            self._dropped = 0
        else:
            line = bytes(self._buffer).rstrip(b"\r")
            self._buffer.clear()
        return line


# ---------------------------------------------------------------- what the wire carries


class Authenticate(msgspec.Struct, frozen=True):
    """``/token SECRET``: the first line when the server requires a token."""

    token: str


class Invalid(msgspec.Struct, frozen=True):
    """A line that is not a prompt or a command (too long, not UTF-8, a bare ``/``)."""

    message: str


class Greeting(msgspec.Struct, frozen=True):
    """The first response on a connection: who the client is talking to."""

    session_id: str
    agent: str
    model: str


class Failure(msgspec.Struct, frozen=True):
    """``! message``; ``ends_response`` adds the blank line a waiting client reads up to."""

    message: str
    ends_response: bool = True


Input = m.Prompt | m.Interrupt | m.ResolveToolApproval | m.ResolveTurnLimit | m.RunCommand | Authenticate | Invalid
Output = m.Event | m.Reply | Greeting | Failure

# Lines that steer a run answer nothing when they work: the run's own output shows it.
_CONTROLS = (m.Interrupt, m.ResolveToolApproval, m.ResolveTurnLimit, Authenticate)


def one_line(text: str, limit: int = 200) -> str:
    """Tool arguments and results squeezed onto one line of at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class LinechatCodec:
    """One per connection: turns its input lines into commands and its output into text."""

    def __init__(self, session_id: str | None = None) -> None:
        self.session_id = session_id  # set once the connection has a session
        self.pending: Literal["tool", "turn"] | None = None  # what /approve and /deny answer
        self._line_start = True

    # ------------------------------------------------------------ input

    def decode(self, line: bytes | TooLong) -> Input | None:
        """One input line; ``None`` for a blank line, which means nothing."""
        if isinstance(line, TooLong):
            return Invalid(f"line of {line.size} bytes is over the {line.limit}-byte limit; ignored")
        try:
            text = line.decode("utf-8").strip()
        except UnicodeDecodeError:
            return Invalid("lines must be UTF-8 text")
        sid = self.session_id
        if not text:
            return None
        if text.startswith("//"):  # escape: a prompt that itself starts with "/"
            return m.Prompt(session_id=sid, text=text[1:])
        if not text.startswith("/"):
            return m.Prompt(session_id=sid, text=text)
        name, _, args = text[1:].partition(" ")
        args = args.strip()
        if not name:
            return Invalid("a command needs a name, e.g. /help")
        if name == "stop":
            return m.Interrupt(session_id=sid)
        if name == "token":
            return Authenticate(args)
        if name in ("approve", "deny"):
            yes, reason = name == "approve", args or None
            if self.pending == "turn":
                return m.ResolveTurnLimit(session_id=sid, confirmed=yes, reason=reason)
            return m.ResolveToolApproval(session_id=sid, approved=yes, reason=reason)
        return m.RunCommand(session_id=sid, name=name, args=args)

    def failure(self, command: Input | None, message: str) -> Failure:
        """How a failed line is answered: one ``!`` line, ending the response a client awaits."""
        return Failure(message, ends_response=not isinstance(command, _CONTROLS))

    # ------------------------------------------------------------ output

    def render(self, message: Output) -> str:
        """The text to write for one event, reply or local message ("" for nothing)."""
        match message:
            case m.TextDelta():
                return self._text(message.text)
            case m.ToolCallStarted():
                return self._line(f"[tool {message.name}({one_line(message.arguments)})]")
            case m.ToolApprovalRequested():
                self.pending = "tool"
                return self._line(f"[approve {message.name}({one_line(message.arguments)})? /approve or /deny]")
            case m.TurnLimitReached():
                self.pending = "turn"
                return self._line(f"[turn limit {message.current_turns}/{message.max_turns}: /approve to go on, /deny to stop]")
            case m.ToolResult():
                self.pending = None
                how = " denied" if message.rejected else " failed" if message.is_error else ""
                return self._line(f"[result {message.name}{how}: {one_line(message.result)}]")
            case m.RunFinished():
                self.pending = None
                stopped = "" if message.stop_reason == "end_turn" else self._line(f"[stopped: {message.stop_reason}]")
                return stopped + self._end()
            case m.RunFailed():
                self.pending = None
                return self._line(f"! {message.error.message}") + self._end()
            case m.CommandOutput():
                return self._block(message.output)
            case Failure():
                return self._line(f"! {one_line(message.message, 1000)}") + (self._end() if message.ends_response else "")
            case Greeting():
                return self._block(
                    f"linechat: session {message.session_id}, agent {message.agent} ({message.model}).\n"
                    "Type a prompt. /help lists commands; /stop interrupts; /approve or /deny answer a question."
                )
        return ""  # run_started, turn_started, reasoning, accepted, ...: nothing to show

    def _text(self, text: str) -> str:
        """Model text as it streams. An empty line in it is sent as one space, so that
        a truly empty line always means "end of response"."""
        out: list[str] = []
        for i, piece in enumerate(text.replace("\r", "").split("\n")):
            if i:
                out.append(" \n" if self._line_start else "\n")
                self._line_start = True
            if piece:
                out.append(piece)
                self._line_start = False
        return "".join(out)

    def _line(self, line: str) -> str:
        """A line of its own, starting a new line if text was streaming."""
        out = ("" if self._line_start else "\n") + line + "\n"
        self._line_start = True
        return out

    def _end(self) -> str:
        """The blank line that ends a response."""
        out = ("" if self._line_start else "\n") + "\n"
        self._line_start = True
        return out

    def _block(self, text: str) -> str:
        return self._text(("" if self._line_start else "\n") + text.rstrip("\n")) + self._end()
