// What a conversation looks like: stored messages, and runs as their events arrive.
//
// A run streams into a LiveRun: its parts (text, folded reasoning, tool calls with their
// arguments and outcomes, the questions it waits on) each keep their own element, so a
// delta only touches its text and a reasoning block someone unfolded stays unfolded.

import { h, icon } from "./dom.js";
import { outcomeBadge, plural, prettyJson, words } from "./format.js";

/** The text of a stored message's content parts (text as is; files and images named). */
function partsText(message) {
  if (message.content) return message.content;
  return (message.parts || [])
    .map((part) => (part.type === "text" ? part.text : part.type === "file" ? `[file ${part.name}]` : `[image ${part.mime_type || ""}]`))
    .join("\n");
}

export function userBubble(text, { queued = false, who = null } = {}) {
  return h(
    "div.msg.user",
    h("div.bubble", text),
    queued || who ? h("div.msg-meta", queued ? h("span.badge.queued", "queued") : null, who ? h("span", who) : null) : null,
  );
}

function assistantText(text) {
  return h("div.msg.assistant", h("div.text", text));
}

function reasoningFold(text, streaming) {
  const body = h("div.reasoning-text", text);
  const summary = h("summary", icon("brain"), h("span.label", streaming ? "Reasoning…" : "Reasoning"), h("span.count", words(text)));
  return { el: h("details.reasoning", summary, body), body, summary };
}

function argumentsBlock(text) {
  const pretty = prettyJson(text);
  return pretty && pretty !== "{}" ? h("pre.args", pretty) : h("div.args.empty", "no arguments");
}

function resultBlock(call) {
  if (call.result === undefined || call.result === null) return null;
  const long = call.result.split("\n").length > 8 || call.result.length > 600;
  const pre = h("pre.result", call.result);
  return long ? h("details.result-fold", h("summary", `Result (${call.result.length} characters)`), pre) : pre;
}

/**
 * A tool call as a card: name, what it is, the arguments, the outcome and result; while it
 * waits for approval, the question with Approve / Reject (``actions.approve(call, yes, remember)``).
 */
export function toolCard(call, actions) {
  const waiting = call.question && !call.outcome;
  const status = call.outcome
    ? outcomeBadge(call.outcome)
    : waiting
      ? h("span.badge.state-waiting", "waiting for approval")
      : call.refused
        ? h("span.badge.outcome-warn", "refused")
        : call.live
          ? h("span.badge.state-running", "running")
          : null;
  const card = h(
    `div.tool${waiting ? ".asking" : ""}`,
    { dataset: { call: call.call_id, tool: call.name } },
    h("div.tool-head", icon("tool"), h("span.tool-name", call.name), call.category ? h("span.muted", `${call.category} · ${call.access}`) : null, status),
    call.description ? h("div.tool-desc", call.description) : null,
    argumentsBlock(call.arguments),
    call.error && call.outcome !== "ok" ? h("div.tool-error", call.error) : null,
    resultBlock(call),
  );
  if (waiting && actions) card.append(approvalBox(call, actions));
  return card;
}

function approvalBox(call, actions) {
  const remember = h("input", { type: "checkbox" });
  const buttons = [
    h("button.button.approve", { type: "button", onclick: () => decide(true) }, icon("check"), "Approve"),
    h("button.button.reject", { type: "button", onclick: () => decide(false) }, icon("x"), "Reject"),
  ];
  function decide(yes) {
    for (const button of buttons) button.disabled = true;
    actions.approve(call, yes, remember.checked).catch(() => {
      for (const button of buttons) button.disabled = false;
    });
  }
  const timeout = call.question.timeout_s ? ` It is rejected after ${Math.round(call.question.timeout_s)} s without an answer.` : "";
  return h(
    "div.question",
    h("p", h("b", `Run ${call.name}?`), ` The model asks to call this tool.${timeout}`),
    h("div.question-actions", buttons, h("label.remember", remember, `Always allow ${call.name} in this session`)),
  );
}

/** The turn-limit question: continue the run (the count starts again) or stop it. */
export function turnLimitCard(question, actions, answered) {
  const buttons = [
    h("button.button.approve", { type: "button", onclick: () => decide(true) }, icon("redo"), "Continue"),
    h("button.button.reject", { type: "button", onclick: () => decide(false) }, icon("stop"), "Stop here"),
  ];
  function decide(yes) {
    for (const button of buttons) button.disabled = true;
    actions.turnLimit(yes).catch(() => {
      for (const button of buttons) button.disabled = false;
    });
  }
  return h(
    `div.tool.turn-limit${answered ? "" : ".asking"}`,
    h("div.tool-head", icon("alert"), h("span.tool-name", "Turn limit reached"), h("span.muted", `${question.current_turns} of ${question.max_turns} turns`)),
    question.reason ? h("div.tool-desc", question.reason) : null,
    answered ? h("div.tool-desc", answered) : h("div.question", h("p", "The run stopped at its turn limit. Continue it?"), h("div.question-actions", buttons)),
  );
}

export function note(text, kind = "") {
  return h(`div.note${kind ? `.${kind}` : ""}`, text);
}

export function commandCard(command, output, failed = false) {
  return h(`div.command${failed ? ".failed" : ""}`, h("div.command-head", icon("terminal"), h("code", command)), h("pre", output));
}

/**
 * Stored messages as the transcript shows them: each tool result under its call.
 * ``pendingCall`` (a call id waiting for approval when the run's events are not at hand)
 * gets the question with its buttons.
 */
export function storedMessages(messages, actions) {
  const results = new Map(messages.filter((m) => m.role === "tool" && m.tool_call_id).map((m) => [m.tool_call_id, m]));
  const shown = new Set();
  const out = [];
  for (const message of messages) {
    if (message.role === "user") out.push(userBubble(partsText(message)));
    else if (message.role === "system") out.push(note(partsText(message), "system"));
    else if (message.role === "assistant") {
      if (partsText(message)) out.push(assistantText(partsText(message)));
      for (const call of message.tool_calls || []) {
        const result = results.get(call.id);
        shown.add(call.id);
        out.push(toolCard({ call_id: call.id, name: call.name, arguments: call.arguments, result: result?.content, outcome: result ? result.outcome || "ok" : null }, actions));
      }
    } else if (message.role === "tool" && !shown.has(message.tool_call_id)) {
      out.push(toolCard({ call_id: message.tool_call_id || "", name: message.name || "tool", arguments: "", result: message.content, outcome: message.outcome || "ok" }, actions));
    }
  }
  return out;
}

/** One run, built from its events (kernel.model's run events, as the SSE stream gives them). */
export class LiveRun {
  constructor(runId, { user = null, regenerate = false } = {}) {
    this.runId = runId;
    this.el = h("div.run", { dataset: { run: runId } });
    this.user = user;
    if (user) this.el.append(user);
    if (regenerate) this.el.append(note("regenerated the last answer", "regenerate"));
    this.body = h("div.run-body");
    this.el.append(this.body);
    this.parts = [];
    this.calls = new Map();
    this.turns = 0;
    this.ended = false;
    this.question = null;
  }

  /** The last part if it is of ``kind``, else a new one made by ``make``. */
  _part(kind, make) {
    const last = this.parts[this.parts.length - 1];
    if (last && last.kind === kind) return last;
    return this._add({ kind, ...make() });
  }

  /** A new part after the others: the one before it is complete now. */
  _add(part) {
    const last = this.parts[this.parts.length - 1];
    if (last) this._settle(last);
    this.parts.push(part);
    this.body.append(part.el);
    return part;
  }

  _settle(part) {
    if (part.kind === "text") part.textEl.classList.remove("streaming");
    if (part.kind === "reasoning") part.summary.querySelector(".label").textContent = "Reasoning";
  }

  text(delta) {
    const part = this._part("text", () => {
      const text = h("div.text.streaming");
      return { el: h("div.msg.assistant", text), textEl: text, value: "" };
    });
    part.value += delta;
    part.textEl.textContent = part.value;
    return part;
  }

  reasoning(delta) {
    const part = this._part("reasoning", () => ({ ...reasoningFold("", true), value: "" }));
    part.value += delta;
    part.body.textContent = part.value;
    part.summary.querySelector(".count").textContent = words(part.value);
  }

  toolCall(event, actions) {
    const call = { ...event, live: true, question: null };
    const part = this._add({ kind: "tool", call, el: toolCard(call, actions) });
    this.calls.set(event.call_id, part);
  }

  _updateCall(callId, change, actions) {
    const part = this.calls.get(callId);
    if (!part) return;
    Object.assign(part.call, change);
    const card = toolCard(part.call, actions);
    part.el.replaceWith(card);
    part.el = card;
  }

  approvalRequested(event, actions) {
    if (!this.calls.has(event.call_id)) this.toolCall({ ...event, needs_approval: true }, actions);
    this.question = event;
    this._updateCall(event.call_id, { question: event }, actions);
  }

  toolResult(event, actions) {
    if (!this.calls.has(event.call_id)) this.toolCall({ call_id: event.call_id, name: event.name, arguments: "" }, actions);
    if (this.question && this.question.call_id === event.call_id) this.question = null;
    this._updateCall(event.call_id, { result: event.result, outcome: event.outcome || "ok", error: event.error, question: null, live: false }, actions);
  }

  turnLimit(event, actions) {
    this.question = event;
    this._add({ kind: "turn_limit", event, el: turnLimitCard(event, actions, null) });
  }

  turnStarted() {
    this.turns += 1;
    this._answerTurnLimit("continued");
  }

  _answerTurnLimit(answer) {
    for (const part of this.parts) {
      if (part.kind === "turn_limit" && !part.answered) {
        part.answered = answer;
        const card = turnLimitCard(part.event, null, answer);
        part.el.replaceWith(card);
        part.el = card;
      }
    }
    this.question = null;
  }

  /** ``run_finished`` or ``run_failed``: the footer says how it ended. */
  end(event) {
    this.ended = true;
    for (const part of this.parts) this._settle(part);
    for (const [callId, part] of this.calls) if (!part.call.outcome) this._updateCall(callId, { live: false, question: null }, null);
    this._answerTurnLimit("stopped");
    if (event.type === "run_failed") {
      this.body.append(h("div.run-end.failed", icon("alert"), h("b", event.error.code), ` ${event.error.message}`));
      return;
    }
    if (!this.parts.some((part) => part.kind === "text") && event.text) this._settle(this.text(event.text));
    const usage = event.usage || {};
    const facts = [];
    if (event.interrupted) facts.push(h("b", "interrupted"));
    else if (event.stop_reason && event.stop_reason !== "end_turn") facts.push(h("b", event.stop_reason.replace("_", " ")));
    if (event.tool_calls) facts.push(plural(event.tool_calls, "tool call"));
    if (usage.input_tokens || usage.output_tokens) facts.push(`${usage.input_tokens || 0} → ${usage.output_tokens || 0} tokens`);
    this.body.append(h(`div.run-end${event.interrupted ? ".interrupted" : ""}`, facts.flatMap((fact, i) => (i ? [" · ", fact] : [fact]))));
  }
}
