// The gateway console: the status bar and session list (overview.js), and the session
// open in the main pane (pane.js), chosen by the address's #/s/<session id>.

import { api } from "./api.js";
import { fill, h, icon } from "./dom.js";
import { LogsPane } from "./logs.js";
import { Overview } from "./overview.js";
import { SessionPane } from "./pane.js";

const main = document.getElementById("pane");
const toasts = h("div.toasts", { role: "status", "aria-live": "polite" });
document.body.append(toasts);

function toast(message) {
  const el = h("div.toast", icon("alert"), h("span", message));
  toasts.append(el);
  setTimeout(() => el.remove(), 6000);
}

let pane = null;
let settings = { retention: 4096, commands: new Set() };

const overview = new Overview({
  bar: document.getElementById("bar"),
  sidebar: document.getElementById("sidebar"),
  onCreate: (agentId) => create(agentId),
  onSessions: (changed, removed) => {
    if (!pane) {
      if (!window.location.hash) welcome();
      return;
    }
    if (changed && changed.session_id === pane.id) pane.updateInfo(changed);
    if (removed && removed === pane.id) gone(removed);
  },
});

async function create(agentId) {
  try {
    const reply = await api.create(agentId);
    overview.receive("session", reply); // at once, not at the list's next poll
    window.location.hash = `#/s/${encodeURIComponent(reply.session.session_id)}`;
  } catch (error) {
    toast(error.message);
  }
}

function welcome() {
  const agent = overview.agents[0];
  const asking = overview.waitingSessions();
  fill(
    main,
    h(
      "div.welcome",
      h("h1", "Every session, every transport"),
      h(
        "p",
        "Sessions started over OpenFang, Agent-CLI, ACP, stdio, AG-UI or this API all show up on the left as they happen. ",
        "Open one to follow its runs live, answer the tool calls waiting for approval, interrupt, regenerate or clear it.",
      ),
      asking.length
        ? h("a.button.primary", { href: `#/s/${encodeURIComponent(asking[0].session_id)}` }, icon("alert"), `${asking.length} waiting for an answer`)
        : agent
          ? h("button.button.primary", { type: "button", onclick: () => create(agent.id) }, icon("plus"), `New session with ${agent.name}`)
          : null,
    ),
  );
}

function gone(id) {
  if (pane && pane.id === id) {
    pane.close();
    pane = null;
  }
  fill(main, h("div.welcome", h("h1", "This session is gone"), h("p", "It was deleted (perhaps from another client)."), h("a.button", { href: "#" }, "Back")));
}

function route() {
  const match = window.location.hash.match(/^#\/s\/(.+)$/);
  const id = match ? decodeURIComponent(match[1]) : null;
  if (pane && pane.id === id) return;
  if (pane) pane.close();
  pane = null;
  overview.select(id);
  if (window.location.hash === "#/logs") {
    pane = new LogsPane(main);
    pane.open();
    return;
  }
  if (!id) {
    welcome();
    return;
  }
  pane = new SessionPane(main, id, { overview, retention: settings.retention, commands: settings.commands, toast, onGone: gone });
  pane.open();
}

async function boot() {
  // The settings are the admin's to read: signed in with another key, the defaults serve.
  const [me, commands] = await Promise.all([api.me(), api.commands()]);
  const view = me.scopes.includes("admin") ? await api.settings() : null;
  settings = {
    retention: view?.settings.session?.event_retention ?? 4096,
    commands: new Set(commands.commands.map((command) => command.name)),
  };
  await overview.start();
  window.addEventListener("hashchange", route);
  route();
}

boot().catch((error) => toast(`The console could not start: ${error.message}`));
