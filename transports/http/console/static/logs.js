// The Logs pane (#/logs): the gateway's own log lines, live — the same records its stderr
// carries (log_format = "json" has the same fields), from GET /v1/logs as SSE.

import { fill, h } from "./dom.js";

const KEEP = 1000; // lines kept on the page (the gateway keeps its own last 1000)

export class LogsPane {
  constructor(main) {
    this.main = main;
    this.level = "";
    this.list = h("ol.log-lines", { "aria-live": "off" });
    this.state = h("span.muted", "connecting…");
    const levels = h(
      "select",
      { "aria-label": "Lowest level shown" },
      ["", "INFO", "WARNING", "ERROR"].map((level) => h("option", { value: level }, level ? `${level.toLowerCase()} and up` : "every level")),
    );
    levels.addEventListener("change", () => {
      this.level = levels.value;
      this.applyFilter();
    });
    fill(main, h("section.logs", h("header.logs-head", h("h1", "Logs"), levels, this.state), this.list));
  }

  open() {
    this.source = new EventSource("/v1/logs", { withCredentials: true });
    this.source.addEventListener("open", () => (this.state.textContent = "live"));
    this.source.addEventListener("error", () => (this.state.textContent = "reconnecting…"));
    this.source.addEventListener("message", (message) => this.add(JSON.parse(message.data)));
  }

  close() {
    if (this.source) this.source.close();
  }

  add(entry) {
    if (this.list.querySelector(`[data-seq="${entry.seq}"]`)) return; // a reconnect sends the backlog again
    const context = ["transport", "session_id", "run_id", "trace_id"].filter((key) => entry[key]).map((key) => `${key}=${entry[key]}`);
    const line = h(
      `li.log-line.level-${String(entry.level).toLowerCase()}`,
      { dataset: { seq: String(entry.seq), level: entry.level } },
      h("time", entry.ts),
      h("span.log-level", entry.level),
      h("span.log-logger", entry.logger),
      h("span.log-msg", entry.msg),
      context.length ? h("span.log-context.muted", context.join(" ")) : null,
      entry.exc ? h("pre.log-exc", entry.exc) : null,
    );
    line.hidden = !this.shown(entry.level);
    this.list.append(line);
    while (this.list.childElementCount > KEEP) this.list.firstElementChild.remove();
  }

  shown(level) {
    const order = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];
    return !this.level || order.indexOf(level) >= order.indexOf(this.level);
  }

  applyFilter() {
    for (const line of this.list.children) line.hidden = !this.shown(line.dataset.level);
  }
}
