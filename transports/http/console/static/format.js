// How values read on screen: times, counts, states, JSON.

import { h } from "./dom.js";

/** "just now", "12 s ago", "5 min ago", "3 h ago", then the date. */
export function ago(seconds) {
  if (!seconds) return "never";
  const delta = Math.max(0, Date.now() / 1000 - seconds);
  if (delta < 5) return "just now";
  if (delta < 60) return `${Math.floor(delta)} s ago`;
  if (delta < 3600) return `${Math.floor(delta / 60)} min ago`;
  if (delta < 86400) return `${Math.floor(delta / 3600)} h ago`;
  return new Date(seconds * 1000).toLocaleDateString();
}

/** 3725 -> "1 h 2 min"; 42 -> "42 s". */
export function duration(seconds) {
  const s = Math.floor(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

export function shortId(id) {
  return id.length > 12 ? `${id.slice(0, 8)}…` : id;
}

/** A session's state as a person reads it, and the class that colours it. */
export const STATES = {
  idle: { label: "idle", cls: "idle" },
  running: { label: "running", cls: "running" },
  awaiting_tool_approval: { label: "awaiting approval", cls: "waiting" },
  awaiting_turn_confirmation: { label: "awaiting confirmation", cls: "waiting" },
  closed: { label: "closed", cls: "idle" },
};

export function stateBadge(state) {
  const known = STATES[state] || { label: state, cls: "idle" };
  return h(`span.badge.state-${known.cls}`, { dataset: { state } }, known.label);
}

export function waiting(state) {
  return state === "awaiting_tool_approval" || state === "awaiting_turn_confirmation";
}

/** A transport's name as a coloured chip (colours in console.css, by name). */
export function transportChip(name, count) {
  return h("span.chip", { dataset: { transport: name }, title: `followed over ${name}` }, name, count > 1 ? h("b", ` ${count}`) : null);
}

/** The model's JSON arguments, indented when they parse. */
export function prettyJson(text) {
  if (!text) return "";
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** How a tool call ended, as a badge: outcome names from kernel.model.ToolOutcome. */
const OUTCOMES = {
  ok: ["ok", "ok"],
  error: ["error", "error"],
  rejected: ["rejected", "warn"],
  invalid_arguments: ["invalid arguments", "error"],
  limit_reached: ["limit reached", "warn"],
  timed_out: ["timed out", "error"],
  interrupted: ["interrupted", "warn"],
};

export function outcomeBadge(outcome) {
  const [label, cls] = OUTCOMES[outcome] || [outcome, "warn"];
  return h(`span.badge.outcome-${cls}`, { dataset: { outcome } }, label);
}

export function words(text) {
  const n = (text.match(/\S+/g) || []).length;
  return plural(n, "word");
}
