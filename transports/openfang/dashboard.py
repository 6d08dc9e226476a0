"""The REST endpoints OpenFang's dashboard calls beside the chat, and its page itself.

The dashboard asks for these on load and as its pages open (``static/js/app.js``,
``pages/*.js``); a 404 breaks a panel or a toast. Each answer has the shape of
``routes.rs`` (built in ``dashboard_codec.py``) and comes from kernel commands: the
model list from ``ListModels``, tools from ``ListTools``, usage and pending approvals
from the sessions' ``SessionInfo``. What OpenFang configures per agent at run time —
its model — is set here on the agent's active session (``ConfigureSession``), as the
gateway's ``/model`` command does: the gateway's agents are configuration shared by
every transport. Providers and tool lists are read-only here: they are configured in
``gateway.toml``.

With ``dashboard_dir`` set, ``GET /`` serves that directory's ``index.html`` and
``GET /{name}`` its other files, without a token (like OpenFang's page, it holds no
secret and asks for the key itself), so a dashboard page can be opened from the
gateway's own origin and talk to it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kernel import Kernel
from kernel import model as m
from transports.shared import (
    HttpError,
    Request,
    Response,
    Router,
    extract_token,
    json_response,
    resolve_principal,
    resolve_token,
    static_response,
)

from .config import OpenFangConfig
from .dashboard_codec import (
    NOTHING_TO_SHOW,
    TEMPLATES_JSON,
    ModelBody,
    ProviderFacts,
    agent_model_json,
    agent_tools_json,
    approval_id,
    approvals_json,
    auth_check_json,
    config_json,
    decision_json,
    mcp_servers_json,
    models_json,
    pending_approvals,
    provider_facts,
    providers_json,
    split_model,
    tools_json,
    usage_by_model_json,
    usage_json,
    usage_summary_json,
)
from .dashboard_pages import DashboardPages
from .rest import guarded
from .sessionids import canonical_uuid
from .state import ActiveSessions, Agents

log = logging.getLogger("gateway.openfang")

#: What the model is told when a tool call is rejected from the dashboard's approvals page.
DASHBOARD_REJECTION = "rejected from the dashboard's approvals page"


class OpenFangDashboard:
    """The routes of this module; :meth:`register` puts them on a router."""

    def __init__(self, kernel: Kernel, config: OpenFangConfig, *, agents: Agents, sessions: ActiveSessions) -> None:
        self.kernel = kernel
        self.config = config
        self.agents = agents
        self.sessions = sessions
        self.token = resolve_token(config)

    def register(self, router: Router) -> None:
        router.get("/api/models")(self.models)
        router.get("/api/providers")(self.providers)
        router.get("/api/agents/{id}/model")(self.get_model)
        router.put("/api/agents/{id}/model")(self.set_model)
        router.get("/api/agents/{id}/tools")(self.agent_tools)
        router.get("/api/tools")(self.tools)
        router.get("/api/usage")(self.usage)
        router.get("/api/usage/summary")(self.usage_summary)
        router.get("/api/usage/by-model")(self.usage_by_model)
        router.get("/api/mcp/servers")(self.mcp_servers)
        router.get("/api/approvals")(self.approvals)
        router.post("/api/approvals/{aid}/approve")(self.approve)
        router.post("/api/approvals/{aid}/reject")(self.reject)
        router.get("/api/config")(self.config_summary)
        router.get("/api/templates")(self.templates)
        router.get("/api/auth/check", auth=False)(self.auth_check)
        for path, body in NOTHING_TO_SHOW.items():
            router.get(path)(_answer(body))
        DashboardPages(self.kernel).register(router)
        if self.config.dashboard_dir:
            DashboardFiles(self.config.dashboard_dir).register(router)

    async def _sessions(self, caller: m.Caller) -> tuple[m.SessionInfo, ...]:
        """The caller's sessions (the admin's: everyone's)."""
        listing = await guarded(self.kernel.execute(m.ListSessions(), caller))
        return listing.sessions

    # ---------------------------------------------------------- models and providers

    async def _catalog(self, caller: m.Caller) -> tuple[list[m.ModelInfo], dict[str, ProviderFacts]]:
        """Every agent's model and what its provider offers (asked once per provider)."""
        settings = self.kernel.settings_view()
        facts: dict[str, ProviderFacts] = {}
        found: dict[tuple[str, str], m.ModelInfo] = {}
        for agent in self.kernel.settings.agents:
            info = self.kernel.agent_info(agent)
            if info.provider not in facts:
                facts[info.provider] = provider_facts(info.provider, settings)
                try:
                    listing = await self.kernel.execute(m.ListModels(agent_id=info.id), caller)
                except m.KernelError as exc:  # an upstream without a model list, or unreachable
                    log.warning("models of provider %s: %s", info.provider, exc.message)
                else:
                    found.update(((model.provider, model.id), model) for model in listing.models)
            found.setdefault((info.provider, info.model), m.ModelInfo(id=info.model, provider=info.provider))
        return list(found.values()), facts

    async def models(self, request: Request) -> Response:
        models, facts = await self._catalog(request.caller)
        available = request.query.get("available", "") in ("true", "1")
        body = models_json(models, facts, self.config.context_window_tokens, provider=request.query.get("provider"), available_only=available)
        return json_response(200, body)

    async def providers(self, request: Request) -> Response:
        models, facts = await self._catalog(request.caller)
        counts = {name: sum(1 for model in models if model.provider == name) for name in facts}
        return json_response(200, providers_json([(entry, counts[name]) for name, entry in facts.items()]))

    async def get_model(self, request: Request) -> Response:
        agent_id = self.agents.resolve(request.path_params["id"])
        session = await guarded(self.sessions.open_active(agent_id, request.caller))
        return json_response(200, agent_model_json(session, self.kernel.provider_name(self.kernel.agent(agent_id))))

    async def set_model(self, request: Request) -> Response:
        """The model of the agent's active session; the dashboard's ``provider/model`` is understood."""
        agent_id = self.agents.resolve(request.path_params["id"])
        body = await request.json(ModelBody)
        if not body.model.strip():
            raise HttpError(400, "Missing 'model' field", code="invalid_request")
        provider = self.kernel.provider_name(self.kernel.agent(agent_id))
        model = split_model(body.model.strip(), provider)
        # Another provider, named in the body or as the dashboard's provider switch spells it
        # ("other/model"); a prefix that names no provider is part of the model's id.
        known = {self.kernel.provider_name(agent).lower() for agent in self.kernel.settings.agents}
        prefix, slash, _ = model.partition("/")
        wanted = body.provider or (prefix if slash and prefix.lower() in known else provider)
        if wanted.lower() != provider.lower():
            raise HttpError(400, f"This agent's provider is {provider}; providers are configured in gateway.toml", code="invalid_request")
        session = await guarded(self.sessions.open_active(agent_id, request.caller))
        reply = await guarded(self.kernel.execute(m.ConfigureSession(session_id=session.session_id, model=model), request.caller))
        return json_response(200, agent_model_json(reply.session, provider))

    # ---------------------------------------------------------- tools, usage, config

    async def agent_tools(self, request: Request) -> Response:
        agent = self.kernel.agent(self.agents.resolve(request.path_params["id"]))
        return json_response(200, agent_tools_json(agent.tools, self.kernel.agent_info(agent).tools))

    async def tools(self, request: Request) -> Response:
        listing = await guarded(self.kernel.execute(m.ListTools(), request.caller))
        return json_response(200, tools_json(listing.tools))

    async def usage(self, request: Request) -> Response:
        return json_response(200, usage_json(self.agents.infos(), await self._sessions(request.caller)))

    async def usage_summary(self, request: Request) -> Response:
        return json_response(200, usage_summary_json(await self._sessions(request.caller)))

    async def usage_by_model(self, request: Request) -> Response:
        return json_response(200, usage_by_model_json(await self._sessions(request.caller)))

    async def mcp_servers(self, request: Request) -> Response:
        listing = await guarded(self.kernel.execute(m.ListTools(), request.caller))
        # The servers' configuration is the settings': the admin's to read (secrets masked).
        configured = (await guarded(self.kernel.execute(m.GetSettings(), request.caller))).settings.get("tools", {}).get("mcp", [])
        return json_response(200, mcp_servers_json(configured, listing.tools))

    async def config_summary(self, request: Request) -> Response:
        default = self.kernel.agent_info(self.kernel.agent(None))
        settings = (await guarded(self.kernel.execute(m.GetSettings(), request.caller))).settings  # the admin's to read
        return json_response(200, config_json(settings, default, token_set=self.token is not None))

    async def templates(self, request: Request) -> Response:
        return json_response(200, TEMPLATES_JSON)

    async def auth_check(self, request: Request) -> Response:
        authenticated = await resolve_principal(extract_token(request.headers, request.query), self.token, self.kernel) is not None
        return json_response(200, auth_check_json(authenticated))

    # ---------------------------------------------------------- approvals

    async def approvals(self, request: Request) -> Response:
        names = {info.id: info.name for info in self.agents.infos()}
        timeout = self.kernel.settings.session.approval_timeout_s
        return json_response(200, approvals_json(pending_approvals(await self._sessions(request.caller)), names, timeout))

    async def approve(self, request: Request) -> Response:
        return await self._decide(request, approved=True)

    async def reject(self, request: Request) -> Response:
        return await self._decide(request, approved=False)

    async def _decide(self, request: Request, *, approved: bool) -> Response:
        wanted = canonical_uuid(request.path_params["aid"])
        if wanted is None:
            raise HttpError(400, "Invalid approval ID", code="invalid_request")
        for info in pending_approvals(await self._sessions(request.caller)):
            assert info.pending_call_id is not None
            if approval_id(info.session_id, info.pending_call_id) != wanted:
                continue
            reason = None if approved else DASHBOARD_REJECTION
            command = m.ResolveToolApproval(session_id=info.session_id, call_id=info.pending_call_id, approved=approved, reason=reason)
            try:
                await self.kernel.execute(command, request.caller)
            except m.KernelError as exc:  # answered (or timed out) meanwhile
                raise HttpError(404, exc.message, code="not_found") from None
            return json_response(200, decision_json(wanted, approved, time.time()))
        raise HttpError(404, f"No pending approval {wanted}", code="not_found")


def _answer(body: dict[str, Any]) -> Callable[[Request], Awaitable[Response]]:
    """A route that always answers ``body`` (one of ``NOTHING_TO_SHOW``)."""

    async def answer(request: Request) -> Response:
        return json_response(200, body)

    return answer


class DashboardFiles:
    """``dashboard_dir`` on the web: ``/`` is its ``index.html``, ``/{name}`` a file directly in it
    (``transports.shared.static_response``: nothing outside the directory can be named)."""

    def __init__(self, directory: str) -> None:
        self.root = Path(directory).expanduser().resolve()

    def register(self, router: Router) -> None:
        router.get("/", auth=False)(self.index)
        router.get("/{name}", auth=False)(self.file)

    async def index(self, request: Request) -> Response:
        return await static_response(self.root, "index.html")

    async def file(self, request: Request) -> Response:
        return await static_response(self.root, request.path_params["name"])
