// One session, whoever drives it: its history, its runs as they stream (from any
// transport), the questions they wait on, and the prompt box and buttons that steer it.
//
// Opening: the session's info (its last seq, its active run) and history, then its event
// stream after that seq, so nothing is missed or shown twice. A run already going is
// replayed from the session's retained events (the stored rounds of that run are left
// out of the history, the replay shows them); the events of older runs are skipped.

import { api, requestId, SESSION_EVENTS, sessionEvents, stream } from "./api.js";
import { fill, h, icon } from "./dom.js";
import { plural, shortId, stateBadge, transportChip, waiting } from "./format.js";
import { commandCard, LiveRun, note, storedMessages, userBubble } from "./transcript.js";

const NEAR_BOTTOM_PX = 80;

/** A session's state after each of its events (kernel/state.py's moves, as the events show them). */
const STATE_AFTER = {
  run_started: "running",
  tool_approval_requested: "awaiting_tool_approval",
  tool_result: "running",
  turn_limit_reached: "awaiting_turn_confirmation",
  turn_started: "running",
  run_finished: "idle",
  run_failed: "idle",
};

function lastUserIndex(messages) {
  for (let i = messages.length - 1; i >= 0; i -= 1) if (messages[i].role === "user") return i;
  return -1;
}

/** A button that asks "sure?" on its first click and acts on the second (within 4 s). */
function confirmButton(label, iconName, question, action) {
  let armed = null;
  const text = h("span", label);
  const button = h("button.button.ghost", { type: "button" }, icon(iconName), text);
  button.addEventListener("click", () => {
    if (!armed) {
      text.textContent = question;
      button.classList.add("armed");
      armed = setTimeout(() => {
        armed = null;
        text.textContent = label;
        button.classList.remove("armed");
      }, 4000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    text.textContent = label;
    button.classList.remove("armed");
    action();
  });
  return button;
}

export class SessionPane {
  constructor(root, id, { overview, retention, commands, toast, onGone }) {
    this.root = root;
    this.id = id;
    this.overview = overview;
    this.retention = retention;
    this.commands = commands;
    this.toast = toast;
    this.onGone = onGone;
    this.runs = new Map();
    this.prompts = new Map();
    this.source = null;
    this.info = null;
    this.closed = false;
    this.actions = {
      approve: (call, yes, remember) => this.act(api.approve(this.id, call.call_id, yes, remember)),
      turnLimit: (yes) => this.act(api.turnLimit(this.id, yes)),
    };
    this.build();
  }

  build() {
    this.headMain = h("div.head-main");
    this.interruptButton = h("button.button.ghost", { type: "button", onclick: () => this.interrupt(), disabled: true }, icon("stop"), "Interrupt");
    this.regenerateButton = h("button.button.ghost", { type: "button", onclick: () => this.regenerate(), disabled: true }, icon("redo"), "Regenerate");
    // Made once: a re-render (the list's polls, the session's events) must not disarm a confirmation.
    this.head = h(
      "section.pane-head",
      this.headMain,
      h(
        "div.head-actions",
        this.interruptButton,
        this.regenerateButton,
        confirmButton("Clear", "eraser", "Clear context?", () => this.clear()),
        confirmButton("Delete", "trash", "Delete session?", () => this.remove()),
      ),
    );
    this.list = h("div.transcript-inner");
    this.scroller = h("div.transcript", this.list);
    this.input = h("textarea", { rows: 1, placeholder: "Message this session…  (Enter sends, Shift+Enter adds a line, /help lists commands)", "aria-label": "Prompt" });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submit();
      }
    });
    this.input.addEventListener("input", () => this.grow());
    this.sendButton = h("button.button.primary", { type: "submit" }, icon("send"), "Send");
    this.stopButton = h("button.button.danger", { type: "button", onclick: () => this.interrupt() }, icon("stop"), "Stop");
    this.composer = h("form.composer", { onsubmit: (event) => (event.preventDefault(), this.submit()) }, this.input, h("div.composer-actions", this.stopButton, this.sendButton));
    this.banner = h("div.pane-banner", { hidden: true });
    fill(this.root, this.head, this.banner, this.scroller, this.composer);
  }

  grow() {
    this.input.style.height = "auto";
    this.input.style.height = `${Math.min(this.input.scrollHeight, 220)}px`;
  }

  async open({ replay = true } = {}) {
    this.disconnect();
    this.runs.clear();
    const generation = (this.generation = (this.generation || 0) + 1);
    let info;
    let history;
    try {
      info = (await api.session(this.id)).session;
      history = (await api.history(this.id)).messages;
    } catch (error) {
      if (error.status === 404) this.gone();
      else this.toast(error.message);
      return;
    }
    if (this.closed || generation !== this.generation) return; // closed, or opened again meanwhile
    this.info = info;
    this.floor = info.last_seq;
    this.joining = replay && info.run_id ? info.run_id : null;
    this.seen = 0;
    let stored = history.slice(0, info.message_count);
    if (this.joining) stored = stored.slice(0, lastUserIndex(stored) + 1);
    this.lastUserAt = stored[lastUserIndex(stored)]?.created_at ?? null;
    fill(this.list, stored.length ? storedMessages(stored, this.actions) : h("div.empty-transcript", icon("chat"), h("p", "No messages yet. Say something below.")));
    if (info.run_id && !this.joining) this.joinedLate(info);
    this.renderHead();
    this.scroll(true);
    const after = this.joining ? Math.max(0, info.last_seq - this.retention) : info.last_seq;
    this.source = stream(sessionEvents(this.id, after), SESSION_EVENTS, (name, data) => this.event(name, data), (state) => this.connection(state));
  }

  /** A run that was going before its events could be replayed: what is known of it now. */
  joinedLate(info) {
    const run = this.runFor({ run_id: info.run_id }, true);
    run.body.append(note("This run was already going; its earlier output shows once it ends.", "muted"));
    if (info.state === "awaiting_tool_approval" && info.pending_call_id) {
      run.approvalRequested({ call_id: info.pending_call_id, name: "a tool call", arguments: "" }, this.actions);
    } else if (info.state === "awaiting_turn_confirmation") {
      run.turnLimit({ current_turns: info.max_turns, max_turns: info.max_turns }, this.actions);
    }
  }

  close() {
    this.closed = true;
    this.disconnect();
  }

  disconnect() {
    if (this.source) this.source.close();
    this.source = null;
  }

  connection(state) {
    if (state === "open") this.showBanner(null);
    else if (state === "retrying") this.showBanner("Reconnecting to this session's events…");
    else if (state === "closed") setTimeout(() => this.closed || this.open(), 1000); // gone (404), or the server restarted
  }

  showBanner(text) {
    this.banner.hidden = !text;
    this.banner.textContent = text || "";
  }

  gone() {
    this.disconnect();
    this.onGone(this.id);
  }

  /** The live run an event belongs to (made for a run whose start was not seen). */
  runFor(event, partial = false) {
    let run = this.runs.get(event.run_id);
    if (!run) {
      run = new LiveRun(event.run_id);
      run.partial = partial || event.type !== "run_started";
      this.runs.set(event.run_id, run);
      this.list.querySelector(".empty-transcript")?.remove();
      this.list.append(run.el);
    }
    return run;
  }

  event(name, event) {
    this.seen += 1;
    if (name === "subscriber_lagged") {
      // The events this page missed are gone: start again from the history (a replay that
      // found its start gone tries without one).
      this.open({ replay: !(this.joining && this.seen === 1) });
      return;
    }
    if (event.seq <= this.floor && !(this.joining && event.run_id === this.joining)) return;
    const stick = this.nearBottom();
    this.follow(name);
    if (name === "context_cleared") {
      this.runs.clear();
      fill(this.list, note("The context was cleared.", "divider"));
      this.lastUserAt = null;
    } else if (name === "run_started") {
      this.started(event);
    } else {
      const run = this.runFor(event);
      if (name === "text_delta") run.text(event.text);
      else if (name === "reasoning_delta") run.reasoning(event.text);
      else if (name === "tool_call") run.toolCall(event, this.actions);
      else if (name === "tool_approval_requested") run.approvalRequested(event, this.actions);
      else if (name === "tool_result") run.toolResult(event, this.actions);
      else if (name === "turn_limit_reached") run.turnLimit(event, this.actions);
      else if (name === "turn_started") run.turnStarted();
      else if (name === "run_finished" || name === "run_failed") {
        run.end(event);
        if (run.partial) this.open(); // the history has the whole run now
        this.setBusy(false);
      }
    }
    this.scroll(stick);
  }

  /** The state the session's own events say it is in, before the list's next poll does. */
  follow(name) {
    const state = STATE_AFTER[name];
    if (state && this.info && this.info.state !== state) {
      this.info = { ...this.info, state };
      this.renderHead();
    }
  }

  started(event) {
    if (this.runs.has(event.run_id)) return;
    this.setBusy(true);
    const mine = event.request_id ? this.prompts.get(event.request_id) : null;
    const run = new LiveRun(event.run_id, { regenerate: event.regenerate });
    this.runs.set(event.run_id, run);
    this.list.querySelector(".empty-transcript")?.remove();
    if (mine) {
      this.prompts.delete(event.request_id);
      mine.el.querySelector(".badge.queued")?.remove();
      this.list.append(mine.el); // in the order the runs start
    }
    this.list.append(run.el);
    if (!event.regenerate && event.run_id !== this.joining) this.showPrompt(run, Boolean(mine));
  }

  /** The user message that started a run from elsewhere (events carry no prompt text). */
  async showPrompt(run, mine) {
    try {
      const recent = (await api.history(this.id, 4)).messages;
      const user = recent[lastUserIndex(recent)];
      if (!user || user.created_at === this.lastUserAt) return; // a run without a new prompt
      this.lastUserAt = user.created_at;
      if (!mine) run.el.prepend(userBubble(user.content || "(attachment)"));
    } catch (error) {
      this.toast(error.message);
    }
  }

  nearBottom() {
    const el = this.scroller;
    return el.scrollHeight - el.scrollTop - el.clientHeight < NEAR_BOTTOM_PX;
  }

  scroll(stick) {
    if (stick) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /** Run an action (an answer, an interrupt); a refusal is shown, not thrown. */
  async act(promise) {
    try {
      return await promise;
    } catch (error) {
      this.toast(error.message);
      throw error;
    }
  }

  async submit() {
    const text = this.input.value;
    if (!text.trim()) return;
    this.input.value = "";
    this.grow();
    const trimmed = text.trim();
    const name = trimmed.startsWith("/") && !trimmed.startsWith("//") ? trimmed.slice(1).split(/\s+/)[0] : null;
    if (name && this.commands.has(name)) return this.command(trimmed);
    const prompt = trimmed.startsWith("//") ? text.trim().slice(1) : text;
    const id = requestId();
    const bubble = userBubble(prompt);
    this.prompts.set(id, { el: bubble });
    this.list.querySelector(".empty-transcript")?.remove();
    this.list.append(bubble);
    this.scroll(true);
    try {
      const accepted = await api.prompt(this.id, prompt, id);
      if (accepted.queued && this.prompts.has(id)) bubble.append(h("div.msg-meta", h("span.badge.queued", "queued")));
    } catch (error) {
      this.prompts.delete(id);
      bubble.append(note(`Not sent: ${error.message}`, "failed"));
    }
  }

  async command(text) {
    const stick = this.nearBottom();
    try {
      const reply = await api.command(this.id, text);
      this.list.append(commandCard(text, reply.output));
    } catch (error) {
      this.list.append(commandCard(text, error.message, true));
    }
    this.scroll(stick);
  }

  async interrupt() {
    await this.act(api.interrupt(this.id)).catch(() => {});
  }

  async regenerate() {
    await this.act(api.regenerate(this.id, requestId())).catch(() => {});
  }

  async clear() {
    const reply = await this.act(api.clear(this.id)).catch(() => null);
    if (reply && reply.type === "accepted") this.toast("The context will be cleared when the current run ends.");
  }

  async remove() {
    await this.act(api.remove(this.id)).catch(() => null);
  }

  setBusy(busy) {
    this.busy = busy;
    this.stopButton.hidden = !busy;
    this.root.classList.toggle("busy", busy);
    this.interruptButton.disabled = !busy;
    this.regenerateButton.disabled = busy || !this.info?.message_count;
  }

  /** A newer info from the session list (state, title, who follows it). */
  updateInfo(info) {
    if (!this.info) return;
    this.info = info;
    this.renderHead();
  }

  renderHead() {
    const info = this.info;
    const agent = this.overview.agents.find((a) => a.id === info.agent_id);
    const busy = info.state !== "idle" && info.state !== "closed";
    const usage = info.usage || {};
    const clients = info.clients || [];
    fill(
      this.headMain,
      h("h1.session-title", info.title || info.label || "Untitled session"),
      h(
        "div.head-meta",
        stateBadge(info.state),
        h("code", { title: info.session_id }, shortId(info.session_id)),
        agent ? h("span", agent.name) : null,
        info.model ? h("span", info.model) : null,
        info.max_turns ? h("span", `turn limit ${info.max_turns}`) : null,
        h("span", plural(info.message_count, "message")),
        usage.input_tokens || usage.output_tokens ? h("span", `${usage.input_tokens} → ${usage.output_tokens} tokens`) : null,
        clients.length ? h("span.followers", "followed over", clients.map((name) => transportChip(name, 1))) : null,
      ),
    );
    this.setBusy(busy || [...this.runs.values()].some((run) => !run.ended));
    this.root.classList.toggle("asking", waiting(info.state));
  }

}
