// The native API (docs/http.md), as the console calls it: same origin, the login cookie.
// Its bodies are kernel.model as msgspec encodes it: a field at its default value is left
// out (an empty ``clients``, an ``ok`` outcome, a zero usage), so every reader has a fallback.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function call(method, path, body) {
  const init = { method, headers: { accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    if (response.status === 401) window.location.assign("/"); // the login page asks for the token again
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.code || "http_error", error.message || `${response.status} ${response.statusText}`);
  }
  return data;
}

const session = (id) => `/v1/sessions/${encodeURIComponent(id)}`;

/** A client request id: the console's runs are recognised by it in the session's events. */
export function requestId() {
  return `console-${Math.random().toString(36).slice(2, 10)}`;
}

export const api = {
  status: () => call("GET", "/v1/status"),
  agents: () => call("GET", "/v1/agents"),
  commands: () => call("GET", "/v1/commands"),
  settings: () => call("GET", "/v1/settings"),
  me: () => call("GET", "/v1/me"),
  session: (id) => call("GET", session(id)),
  history: (id, limit) => call("GET", `${session(id)}/history${limit ? `?limit=${limit}` : ""}`),
  create: (agent) => call("POST", "/v1/sessions", { agent }),
  remove: (id) => call("DELETE", session(id)),
  prompt: (id, text, request_id) => call("POST", `${session(id)}/prompt?wait=false`, { text, request_id }),
  regenerate: (id, request_id) => call("POST", `${session(id)}/regenerate?wait=false`, { request_id }),
  interrupt: (id) => call("POST", `${session(id)}/interrupt`),
  clear: (id) => call("POST", `${session(id)}/clear`),
  approve: (id, call_id, approved, remember) =>
    call("POST", `${session(id)}/approvals`, {
      call_id,
      approved,
      remember,
      reason: approved ? null : "rejected from the gateway console",
    }),
  turnLimit: (id, confirmed) =>
    call("POST", `${session(id)}/turn-limit`, { confirmed, reason: confirmed ? null : "stopped from the gateway console" }),
  command: (id, command) => call("POST", `${session(id)}/commands`, { command }),
};

/**
 * An EventSource whose named events go to ``handlers[name](data)``; ``onstate`` hears
 * "open", "retrying" (the browser reconnects by itself, with Last-Event-ID) and "closed"
 * (it gave up: the stream answered an error, e.g. 404 for a deleted session).
 */
export function stream(url, names, handler, onstate) {
  const source = new EventSource(url, { withCredentials: true });
  for (const name of names) {
    source.addEventListener(name, (message) => handler(name, JSON.parse(message.data), message.lastEventId));
  }
  source.addEventListener("open", () => onstate("open"));
  source.addEventListener("error", () => onstate(source.readyState === EventSource.CLOSED ? "closed" : "retrying"));
  return source;
}

/** The session list stream: GET /v1/sessions with Accept: text/event-stream (EventSource's). */
export const LIST_EVENTS = ["sessions", "session", "session_removed", "status", "list_error"];

/** Every event type a session's stream carries (kernel.model's Event union). */
export const SESSION_EVENTS = [
  "run_started",
  "turn_started",
  "model_responding",
  "text_delta",
  "reasoning_delta",
  "tool_call",
  "tool_approval_requested",
  "tool_result",
  "tool_progress",
  "turn_limit_reached",
  "run_finished",
  "run_failed",
  "context_cleared",
  "subscriber_lagged",
];

export function sessionEvents(id, after) {
  return `${session(id)}/events?after=${after}`;
}
