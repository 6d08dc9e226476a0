"""Sans-IO codec of the linechat dialect: lines in, kernel commands out; events in, text out.

Nothing here touches a socket, so every rule of the dialect is tested on plain
values. The codec keeps just the state the wire needs: whether the output is in
the middle of a line, which question (tool approval or turn limit) is open, and
the approval policy its prompts carry.
"""

import msgspec

from kernel import model as m

# ---------------------------------------------------------------- what the wire carries


class Authenticate(msgspec.Struct, frozen=True):
    """``/token SECRET``: the first line when the server requires a token."""

    token: str


class Greeting(msgspec.Struct, frozen=True):
    """The first response on a connection: who the client is talking to."""

    session_id: str
    agent: str
    model: str


class Failure(msgspec.Struct, frozen=True):
    """``! message``; ``ends_response`` adds the blank line a waiting client reads up to."""

    message: str
    ends_response: bool = True


class Invalid(Failure, frozen=True):
    """A line that is not a prompt or a command (too long, not UTF-8, a bare ``/``): it is
    answered as it is, a failure that ends the response the client awaits."""


Input = m.Prompt | m.Interrupt | m.ResolveToolApproval | m.ResolveTurnLimit | m.RunCommand | Authenticate | Invalid
Output = m.Event | m.Reply | Greeting | Failure

# Lines that steer a run answer nothing when they work: the run's own output shows it.
_CONTROLS = (m.Interrupt, m.ResolveToolApproval, m.ResolveTurnLimit, Authenticate)
# The greeting's second line: what a newcomer can type.
HELP = "Type a prompt. /help lists commands; /stop interrupts; /approve or /deny answer a question."


def one_line(text: str, limit: int = 200) -> str:
    """Tool arguments and results squeezed onto one line of at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def presented_token(line: bytes) -> str | None:
    """The token a connection's first line presents, when it is ``/token SECRET``."""
    return given.token if isinstance(given := LinechatCodec().decode(line), Authenticate) else None


class LinechatCodec:
    """One per connection: turns its input lines into commands and its output into text."""

    def __init__(self, session_id: str | None = None, approval: m.ApprovalPolicy | None = None) -> None:
        self.session_id = session_id  # set once the connection has a session
        self.options = m.PromptOptions(approval=approval)  # who answers a prompt's questions
        self.pending: m.ToolApprovalRequested | m.TurnLimitReached | None = None  # what /approve and /deny answer
        self._line_start = True

    # ------------------------------------------------------------ input

    def decode(self, line: bytes) -> Input | None:
        """One input line; ``None`` for a blank line, which means nothing."""
        try:
            text = line.decode("utf-8").strip()
        except UnicodeDecodeError:
            return Invalid("lines must be UTF-8 text")
        if not text.startswith("/") or text.startswith("//"):  # "//text" escapes a prompt that starts with "/"
            return m.Prompt(session_id=self.session_id, text=text.removeprefix("/"), options=self.options) if text else None
        name, _, args = text[1:].partition(" ")
        args = args.strip()
        if not name:
            return Invalid("a command needs a name, e.g. /help")
        if name == "stop":
            return m.Interrupt(session_id=self.session_id)
        if name == "token":
            return Authenticate(args)
        if name in ("approve", "deny"):
            yes, reason = name == "approve", args or None
            if isinstance(self.pending, m.TurnLimitReached):
                return m.ResolveTurnLimit(session_id=self.session_id, confirmed=yes, reason=reason)
            return m.ResolveToolApproval(session_id=self.session_id, call_id=self.pending.call_id if self.pending else None, approved=yes, reason=reason)
        return m.RunCommand(session_id=self.session_id, name=name, args=args)

    def too_long(self, size: int, limit: int) -> Invalid:
        """A line over the size limit (the server dropped its bytes)."""
        return Invalid(f"line of {size} bytes is over the {limit}-byte limit; ignored")

    def failure(self, command: Input, message: str) -> Failure:
        """How a failed line is answered: one ``!`` line, ending the response a client awaits."""
        return Failure(message, ends_response=not isinstance(command, _CONTROLS))

    # ------------------------------------------------------------ output

    def render(self, message: Output) -> str:
        """The text to write for one event, reply or local message ("" for nothing)."""
        if isinstance(message, m.RunEvent):  # a run waits while its question is open: its next event means it was answered
            self.pending = message if isinstance(message, (m.ToolApprovalRequested, m.TurnLimitReached)) else None
        match message:
            case m.TextDelta():
                return self._text(message.text)
            case m.ToolCallStarted():
                return self._line(f"[tool {message.name}({one_line(message.arguments)})]")
            case m.ToolApprovalRequested():
                return self._line(f"[approve {message.name}({one_line(message.arguments)})? /approve or /deny]")
            case m.TurnLimitReached():
                return self._line(f"[turn limit {message.current_turns}/{message.max_turns}: /approve to go on, /deny to stop]")
            case m.ToolResult():
                how = " denied" if message.rejected else " failed" if message.is_error else ""
                return self._line(f"[result {message.name}{how}: {one_line(message.result)}]")
            case m.RunFinished():
                return ("" if message.stop_reason == "end_turn" else self._line(f"[stopped: {message.stop_reason}]")) + self._line("")
            case m.RunFailed():
                return self.render(Failure(message.error.message))
            case m.CommandOutput():
                return self._block(message.output)
            case Failure():
                return self._line(f"! {one_line(message.message, 1000)}") + (self._line("") if message.ends_response else "")
            case Greeting():
                return self._block(f"linechat: session {message.session_id}, agent {message.agent} ({message.model}).\n{HELP}")
        return ""  # run_started, turn_started, reasoning, accepted, ...: nothing to show

    def _text(self, text: str) -> str:
        """Model text as it streams. An empty line in it is sent as one space, so that a truly
        empty line always means "end of response" (a newline that ends the line the output is
        in stays a newline)."""
        *lines, rest = text.replace("\r", "").split("\n")
        out = "".join((line or (" " if i or self._line_start else "")) + "\n" for i, line in enumerate(lines)) + rest
        self._line_start = not rest and (bool(lines) or self._line_start)
        return out

    def _line(self, line: str) -> str:
        """A line of its own, starting a new line if text was streaming. ``_line("")`` is the
        blank line that ends a response."""
        out = ("" if self._line_start else "\n") + line + "\n"
        self._line_start = True
        return out

    def _block(self, text: str) -> str:
        """Text of the gateway's own (a greeting, a command's output) as one whole response."""
        return self._text(("" if self._line_start else "\n") + text.rstrip("\n")) + self._line("")
