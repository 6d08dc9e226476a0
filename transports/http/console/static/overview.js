// The gateway at a glance: the status bar, and every agent's sessions across every
// transport, kept live by the session list stream (GET /v1/sessions as SSE).

import { api, LIST_EVENTS, stream } from "./api.js";
import { fill, h, icon } from "./dom.js";
import { ago, duration, plural, shortId, stateBadge, transportChip, waiting } from "./format.js";

export class Overview {
  constructor({ bar, sidebar, onCreate, onSessions }) {
    this.bar = bar;
    this.sidebar = sidebar;
    this.onCreate = onCreate;
    this.onSessions = onSessions;
    this.sessions = new Map();
    this.agents = [];
    this.status = null;
    this.statusAt = 0;
    this.selected = null;
    this.filter = "";
    this.connection = "connecting";
    this.search = h("input.search", { type: "search", placeholder: "Filter sessions", "aria-label": "Filter sessions" });
    this.search.addEventListener("input", () => {
      this.filter = this.search.value.trim().toLowerCase();
      this.renderSessions();
    });
    this.list = h("div.agents");
    fill(this.sidebar, h("div.sidebar-head", this.search), this.list);
  }

  async start() {
    this.agents = (await api.agents()).agents;
    this.source = stream("/v1/sessions", LIST_EVENTS, (name, data) => this.receive(name, data), (state) => this.connected(state));
    setInterval(() => this.tick(), 1000);
  }

  receive(name, data) {
    if (name === "sessions") {
      this.sessions = new Map(data.sessions.map((info) => [info.session_id, info]));
    } else if (name === "session") {
      this.sessions.set(data.session.session_id, data.session);
      if (!this.agents.some((agent) => agent.id === data.session.agent_id)) this.refreshAgents();
    } else if (name === "session_removed") {
      this.sessions.delete(data.session_id);
    } else if (name === "status") {
      this.status = data;
      this.statusAt = Date.now() / 1000;
      this.renderBar();
      return;
    } else if (name === "list_error") {
      this.connected("failing", data.error.message);
      return;
    }
    this.connected("open");
    this.renderSessions();
    this.renderBar();
    this.onSessions(name === "session" ? data.session : null, name === "session_removed" ? data.session_id : null);
  }

  async refreshAgents() {
    this.agents = (await api.agents()).agents;
    this.renderSessions();
  }

  connected(state, why = "") {
    this.connection = state;
    this.why = why;
    this.renderBar();
  }

  select(id) {
    this.selected = id;
    for (const row of this.list.querySelectorAll(".session-row")) {
      if (row.dataset.session === id) row.setAttribute("aria-current", "page");
      else row.removeAttribute("aria-current");
    }
  }

  /** The sessions waiting for someone (a tool approval or the turn limit), oldest first. */
  waitingSessions() {
    return [...this.sessions.values()].filter((info) => waiting(info.state)).sort((a, b) => a.updated_at - b.updated_at);
  }

  tick() {
    for (const el of this.list.querySelectorAll("time[data-at]")) el.textContent = ago(Number(el.dataset.at));
    const uptime = this.bar.querySelector("[data-uptime]");
    if (uptime && this.status) uptime.textContent = duration(this.status.uptime_s + Date.now() / 1000 - this.statusAt);
  }

  renderBar() {
    const status = this.status;
    const live = {
      connecting: ["connecting…", "pending"],
      open: ["live", "ok"],
      retrying: ["reconnecting…", "pending"],
      closed: ["disconnected", "bad"],
      failing: [`list unavailable: ${this.why}`, "bad"],
    }[this.connection] || [this.connection, "pending"];
    const items = [];
    if (status) {
      items.push(
        h("div.stat", h("span.stat-label", "model"), h("span.stat-value", status.model), status.provider !== status.model ? h("span.muted", `via ${status.provider}`) : null),
        h("div.stat", h("span.stat-label", "uptime"), h("span.stat-value", { "data-uptime": "" }, duration(status.uptime_s))),
        h("div.stat", h("span.stat-label", "runs"), h("span.stat-value", { "data-active-runs": "" }, String(status.active_runs)), h("span.muted", "active")),
        h("div.stat", h("span.stat-label", "sessions"), h("span.stat-value", String(status.sessions)), h("span.muted", `live of ${this.sessions.size}`)),
        h(
          "div.stat.clients",
          h("span.stat-label", "connections"),
          Object.keys(status.clients || {}).length
            ? Object.entries(status.clients).sort().map(([name, count]) => transportChip(name, count))
            : h("span.muted", "none"),
        ),
      );
    }
    const asking = this.waitingSessions();
    if (asking.length) {
      items.push(h("a.stat.attention", { href: `#/s/${encodeURIComponent(asking[0].session_id)}` }, icon("alert"), `${asking.length} waiting for an answer`));
    }
    fill(
      this.bar,
      h("div.brand", h("img", { src: "/console/favicon.svg", alt: "" }), h("span", "gateway"), status ? h("span.version", status.version) : null),
      h("div.stats", items),
      h("a.stat.logs-link", { href: "#/logs" }, "Logs"),
      h(`div.live.${live[1]}`, { title: "the session list stream" }, h("span.dot"), live[0]),
    );
  }

  renderSessions() {
    const groups = this.agents.map((agent) => ({ agent, sessions: [] }));
    const byId = new Map(groups.map((group) => [group.agent.id, group]));
    for (const info of this.sessions.values()) {
      let group = byId.get(info.agent_id);
      if (!group) {
        group = { agent: { id: info.agent_id, name: `agent ${shortId(info.agent_id)}`, model: "", provider: "" }, sessions: [] };
        byId.set(info.agent_id, group);
        groups.push(group);
      }
      if (this.matches(info)) group.sessions.push(info);
    }
    fill(this.list, groups.map((group) => this.agentSection(group)));
    this.select(this.selected);
  }

  matches(info) {
    if (!this.filter) return true;
    return [info.title, info.label, info.session_id, info.owner, ...(info.clients || [])].some((value) => value && value.toLowerCase().includes(this.filter));
  }

  agentSection({ agent, sessions }) {
    sessions.sort((a, b) => activity(b) - activity(a));
    const create = h("button.icon-button", { type: "button", title: `New session with ${agent.name}`, "aria-label": `New session with ${agent.name}`, onclick: () => this.onCreate(agent.id) }, icon("plus"));
    return h(
      "section.agent",
      { dataset: { agent: agent.id } },
      h("header.agent-head", h("div", h("div.agent-name", agent.name), h("div.agent-model", [...new Set([agent.model, agent.provider].filter(Boolean))].join(" via "))), create),
      sessions.length
        ? h("ul.sessions", sessions.map((info) => h("li", this.row(info))))
        : h("p.empty", this.filter ? "No session matches." : "No sessions yet."),
    );
  }

  row(info) {
    const title = info.title || info.label || "Untitled session";
    const when = info.state === "idle" || info.state === "closed" ? h("time", { "data-at": String(info.updated_at) }, ago(info.updated_at)) : stateBadge(info.state);
    return h(
      `a.session-row.state-${info.state}`,
      { href: `#/s/${encodeURIComponent(info.session_id)}`, dataset: { session: info.session_id, state: info.state } },
      h(`span.state-dot`, { title: info.state }),
      h(
        "div.row-main",
        h("div.row-top", h("span.row-title", title), when),
        h(
          "div.row-meta",
          h("code", shortId(info.session_id)),
          h("span", plural(info.message_count, "message")),
          // Whose it is (the key that created it): the admin sees everyone's sessions.
          info.owner && info.owner !== "admin" ? h("span.session-owner", { title: "owner (API key)" }, info.owner) : null,
          (info.clients || []).map((name) => transportChip(name, 1)),
        ),
      ),
    );
  }
}

/** When a session last did something: now while it works, else its last stored change. */
function activity(info) {
  return info.state === "idle" || info.state === "closed" ? info.updated_at : Number.MAX_SAFE_INTEGER;
}
