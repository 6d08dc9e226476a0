"""The sessions an editor works with: setting them up, listing, configuring, closing.

``session/new``, ``session/load`` (replay, then attach), ``session/resume`` (attach
only), ``session/close``, ``session/delete``, ``session/list``, and the session's
settings (``session/set_mode``, ``session/set_model``, ``session/set_config_option``).
Attaching a session follows its kernel events (the connection's forwarder, started
through ``follow``) and gives it what the editor offers: its file buffers
(``ConfigureSession(files=...)``), its terminal as the ``run_command`` tool and the
tools of the MCP servers it gave (``mcpServers``, started then, in a task of the
connection: ``ConfigureSession(tool_sources=...)``). Releasing it undoes all that —
the MCP servers are stopped — and unloads the kernel session when nobody else follows it.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio

from kernel import Follower, Kernel, KernelError, McpServerSettings, ProviderError
from kernel import model as m

from . import codec, session_meta
from .config import AcpConfig
from .files import EditorFiles
from .jsonrpc import INVALID_PARAMS, RESOURCE_NOT_FOUND, Request, RpcFailure, decode_params
from .state import Answer, EditorRequests, OpenPrompt, SessionState, update_line
from .terminal import EditorTerminal
from .wire import (
    ClientCapabilities,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    HttpMcpServer,
    ListSessionsParams,
    LoadSessionParams,
    McpServer,
    NewSessionParams,
    SelectOption,
    SessionParams,
    SetConfigOptionParams,
    SetModelParams,
    SetModeParams,
)

if TYPE_CHECKING:
    from plugins.mcp.source import McpServers

log = logging.getLogger("gateway.acp")

#: Runs a task in the connection's task group until it says it started (``TaskGroup.start``).
StartTask = Callable[[Callable[..., Coroutine[Any, Any, None]]], Awaitable[Any]]

#: How long closing a session waits for its runs to end and its forwarder to stop.
SETTLE_S = 5.0


class EditorSessions:
    """The sessions this editor opened, by id, and the methods that manage them."""

    def __init__(
        self,
        kernel: Kernel,
        config: AcpConfig,
        editor: EditorRequests,
        write: Callable[[list[bytes]], Awaitable[None]],
        follow: Callable[[SessionState, Follower], None],
        start: StartTask,
        *,
        caller: m.Caller = m.LOCAL_CALLER,
    ) -> None:
        self.kernel = kernel
        self.caller = caller
        self.config = config
        self.editor = editor
        self.write = write
        self.follow = follow
        self.start = start
        self.capabilities = ClientCapabilities()
        self.open: dict[str, SessionState] = {}
        self._models: dict[str, tuple[str, ...]] = {}  # by agent id, once listed

    def get(self, session_id: str) -> SessionState:
        state = self.open.get(session_id)
        if state is None:
            raise RpcFailure(
                RESOURCE_NOT_FOUND,
                f"Session not found: {session_id} (open it first with session/new, session/load or session/resume)",
                {"sessionId": session_id},
            )
        return state

    # -------------------------------------------------------------- setting up

    async def new(self, request: Request) -> Answer:
        params = decode_params(request.params, NewSessionParams)
        _check_cwd(params.cwd)
        servers = codec.mcp_servers(params.mcp_servers)
        opened = await self.kernel.execute(m.OpenSession(agent_id=self.config.agent), self.caller)
        state = await self.attach(opened.session.session_id, params.cwd, servers)
        return Answer({"sessionId": state.id, **self.setup(state)}, [await self.commands_update(state)])

    async def load(self, request: Request) -> Answer:
        """Replay the stored conversation, then attach."""
        params = decode_params(request.params, LoadSessionParams)
        servers = codec.mcp_servers(params.mcp_servers)
        await self.require_stored(params)
        history = await self.kernel.execute(m.GetHistory(session_id=params.session_id), self.caller)
        await self.write([update_line(history.session_id, u) for u in codec.history_updates(history.messages, params.cwd)])
        state = await self.attach(history.session_id, params.cwd, servers)
        return Answer(self.setup(state), [await self.commands_update(state)])

    async def resume(self, request: Request) -> Answer:
        """Attach without replaying anything: the editor still shows the conversation."""
        params = decode_params(request.params, LoadSessionParams)
        servers = codec.mcp_servers(params.mcp_servers)
        await self.require_stored(params)
        state = await self.attach(params.session_id, params.cwd, servers)
        return Answer(self.setup(state), [await self.commands_update(state)])

    async def require_stored(self, params: LoadSessionParams) -> None:
        """The session to load or resume exists (in memory or in the store): else ``-32002``."""
        _check_cwd(params.cwd)
        try:
            await self.kernel.execute(m.GetSession(session_id=params.session_id), self.caller)
        except KernelError as exc:
            raise RpcFailure(RESOURCE_NOT_FOUND, f"Session not found: {params.session_id}", {"code": exc.code}) from None

    def setup(self, state: SessionState) -> dict[str, Any]:
        return {"modes": session_meta.mode_state(state.mode), "configOptions": state.options}

    async def attach(self, session_id: str, cwd: str, servers: tuple[McpServer, ...] = ()) -> SessionState:
        """Follow a session's events and give it what the editor offers (files, terminal,
        MCP servers: those given now replace the ones of an earlier attach)."""
        state = self.open.get(session_id)
        if state is not None:
            state.cwd = state.stream.cwd = cwd
        else:
            follower = await Follower.open(self.kernel, session_id, client="acp", caller=self.caller)
            state = self.open[session_id] = SessionState(session_id, cwd, self.config.default_mode, self.config.context_window_tokens)
            self.follow(state, follower)
        had_tools = bool(state.tool_sources())
        replaced, state.mcp = state.mcp, await self.start_mcp(servers, cwd) if servers else None
        configure: dict[str, Any] = {}
        fs = self.capabilities.fs
        if fs.read_text_file or fs.write_text_file:
            state.files = configure["files"] = EditorFiles(
                self.editor,
                session_id,
                cwd,
                can_read=fs.read_text_file,
                can_write=fs.write_text_file,
                fallback=self.kernel.workspace_files(),
                timeout_s=self.config.fs_timeout_s,
            )
        if self.capabilities.terminal and self.config.terminal:
            state.terminal = EditorTerminal(
                self.editor,
                session_id,
                cwd,
                show=functools.partial(self.show_terminal, state),
                output_bytes=self.config.terminal_output_bytes,
                request_timeout_s=self.config.fs_timeout_s,
            )
        if had_tools or state.tool_sources():
            configure["tool_sources"] = state.tool_sources()
        try:
            reply = await self.kernel.execute(m.ConfigureSession(session_id=session_id, **configure), self.caller)
        finally:
            if replaced is not None:  # stopped once the session no longer offers its tools
                replaced.close()
        state.title = reply.session.title
        state.options = await self.config_options(state, reply.session)
        return state

    async def start_mcp(self, servers: tuple[McpServer, ...], cwd: str) -> McpServers:
        """Start the session's MCP servers (the SDK is loaded only for an editor that gives
        some); one that cannot start is logged by name, and the session has the others."""
        from plugins.mcp.source import McpServers

        group = McpServers([editor_mcp_server(server) for server in servers], cwd=cwd)
        await self.start(group.run)
        return group

    async def show_terminal(self, state: SessionState, call_id: str, terminal_id: str) -> None:
        await self.write([update_line(state.id, state.stream.show_terminal(call_id, terminal_id))])

    async def commands_update(self, state: SessionState) -> bytes:
        reply = await self.kernel.execute(m.ListCommands(session_id=state.id), self.caller)
        commands = reply.commands if isinstance(reply, m.CommandList) else ()
        return update_line(state.id, codec.available_commands(commands))

    # -------------------------------------------------------------- leaving

    async def close(self, request: Request) -> Any:
        """``session/close``: like ``session/cancel``, then let the session go."""
        params = decode_params(request.params, SessionParams)
        await self.release(self.get(params.session_id))
        return {}

    async def delete(self, request: Request) -> Any:
        """``session/delete``: gone from the store and from ``session/list``; an unknown id is
        no error (the protocol asks deleting a deleted session to succeed)."""
        params = decode_params(request.params, SessionParams)
        state = self.open.get(params.session_id)
        if state is not None:
            await self.release(state)
        try:
            await self.kernel.execute(m.DeleteSession(session_id=params.session_id), self.caller)
        except KernelError as exc:
            if exc.code != "not_found":
                raise
        return {}

    async def release(self, state: SessionState) -> None:
        """End this editor's part in a session: its prompts (answered ``cancelled``), its
        forwarder, its files, terminal and MCP servers; unload it unless another client follows it.
        Done whole (shielded, each wait bounded): half a release would leave a session
        that this editor neither follows nor has let go."""
        with anyio.CancelScope(shield=True):
            prompts = list(state.prompts.values())
            await self.cancel(state, prompts)
            with anyio.move_on_after(SETTLE_S):
                for prompt in prompts:
                    await prompt.done.wait()
            state.following.cancel()
            with anyio.move_on_after(SETTLE_S):
                await state.unfollowed.wait()
            self.open.pop(state.id, None)
            reset: dict[str, Any] = {}
            if state.files is not None:
                state.files, reset["files"] = None, None
            if state.tool_sources():
                state.terminal, reset["tool_sources"] = None, ()
            try:
                if reset:
                    await self.kernel.execute(m.ConfigureSession(session_id=state.id, **reset), self.caller)
                await self.kernel.execute(m.CloseSession(session_id=state.id, if_unwatched=True), self.caller)
            except KernelError as exc:
                log.debug("acp: releasing session %s: %s", state.id, exc.message)
            if state.mcp is not None:
                state.mcp.close()
                state.mcp = None

    async def cancel(self, state: SessionState, prompts: list[OpenPrompt]) -> None:
        """Cancel prompts: their questions to the editor are dropped, their runs interrupted
        (active or still queued), and each answers ``cancelled``."""
        for prompt in prompts:
            prompt.cancelled = True
        self.editor.abandon({rid for prompt in prompts for rid in prompt.questions}, "the prompt was cancelled")
        for prompt in prompts:
            if prompt.done.is_set():
                continue
            try:
                await self.kernel.execute(m.Interrupt(session_id=state.id, target_request_id=prompt.request_id), self.caller)
            except KernelError as exc:
                log.debug("acp: interrupt %s: %s", prompt.request_id, exc.message)

    # -------------------------------------------------------------- listing

    async def listing(self, request: Request) -> Any:
        params = decode_params(request.params, ListSessionsParams)
        if params.cwd is not None:
            _check_cwd(params.cwd)
        reply = await self.kernel.execute(m.ListSessions(), self.caller)
        return session_meta.session_page(
            reply.sessions,
            cwd=params.cwd,
            cursor=params.cursor,
            known_cwds={state.id: state.cwd for state in self.open.values()},
            default_cwd=str(self.kernel.workspace_files().root),
            page_size=self.config.list_page_size,
        )

    async def title_update(self, state: SessionState) -> list[bytes]:
        """A ``session_info_update`` when the session got its title (its first prompt)."""
        if self.open.get(state.id) is not state:
            return []  # released meanwhile: asking would load it again
        try:
            reply = await self.kernel.execute(m.GetSession(session_id=state.id), self.caller)
        except KernelError:  # deleted through another client
            return []
        if reply.session.title is None or reply.session.title == state.title:
            return []
        state.title = reply.session.title
        return [update_line(state.id, session_meta.session_info_update(reply.session))]

    # -------------------------------------------------------------- settings

    async def set_mode(self, request: Request) -> Answer:
        params = decode_params(request.params, SetModeParams)
        state = self.get(params.session_id)
        state.mode = session_meta.check_mode(params.mode_id)
        return Answer({}, [update_line(state.id, CurrentModeUpdate(current_mode_id=state.mode)), *await self.options_update(state)])

    async def set_model(self, request: Request) -> Answer:
        params = decode_params(request.params, SetModelParams)
        state = self.get(params.session_id)
        await self.kernel.execute(m.ConfigureSession(session_id=state.id, model=params.model_id), self.caller)
        return Answer({}, await self.options_update(state))

    async def set_config_option(self, request: Request) -> Answer:
        params = decode_params(request.params, SetConfigOptionParams)
        state = self.get(params.session_id)
        option, value = session_meta.config_choice(params, await self.config_options(state))
        after: list[bytes] = []
        if option == session_meta.MODE_OPTION:
            state.mode = value
            after.append(update_line(state.id, CurrentModeUpdate(current_mode_id=value)))
        elif option == session_meta.MODEL_OPTION:
            await self.kernel.execute(m.ConfigureSession(session_id=state.id, model=value), self.caller)
        else:
            await self.kernel.execute(m.ConfigureSession(session_id=state.id, max_turns=int(value)), self.caller)
        state.options = await self.config_options(state)
        return Answer({"configOptions": state.options}, after)

    async def options_update(self, state: SessionState) -> list[bytes]:
        """A ``config_option_update`` when the options changed another way (a mode, ``/model``)."""
        options = await self.config_options(state)
        if options == state.options:
            return []
        state.options = options
        return [update_line(state.id, ConfigOptionUpdate(config_options=options))]

    async def config_options(self, state: SessionState, info: m.SessionInfo | None = None) -> tuple[SelectOption, ...]:
        if info is None:
            reply = await self.kernel.execute(m.GetSession(session_id=state.id), self.caller)
            info = reply.session
        settings = session_meta.SessionSettings(mode=state.mode, model=info.model, models=await self.models(info.agent_id), max_turns=info.max_turns)
        return session_meta.config_options(settings)

    async def models(self, agent_id: str) -> tuple[str, ...]:
        """The agent's provider's models (listed once per connection); none when the list
        cannot be had in time — the select then offers the session's own model."""
        if agent_id not in self._models:
            with anyio.move_on_after(self.config.model_list_timeout_s) as waited:
                try:
                    reply = await self.kernel.execute(m.ListModels(agent_id=agent_id), self.caller)
                except (KernelError, ProviderError) as exc:
                    log.warning("acp: the models of agent %s cannot be listed: %s", agent_id, exc)
                    return ()
            if waited.cancelled_caught:
                log.warning("acp: listing the models of agent %s took over %gs", agent_id, self.config.model_list_timeout_s)
                return ()
            self._models[agent_id] = tuple(model.id for model in reply.models)
        return self._models[agent_id]


def editor_mcp_server(server: McpServer) -> McpServerSettings:
    """An editor's MCP server as the gateway's settings of one: its tools need approval."""
    if isinstance(server, HttpMcpServer):
        return McpServerSettings(name=server.name, url=server.url, headers={h.name: h.value for h in server.headers})
    return McpServerSettings(name=server.name, command=server.command, args=list(server.args), env={e.name: e.value for e in server.env})


def _check_cwd(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise RpcFailure(INVALID_PARAMS, f"Invalid params: cwd must be an absolute path, got {cwd!r}")
