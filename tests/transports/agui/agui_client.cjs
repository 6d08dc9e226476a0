// Drives the official @ag-ui/client HttpAgent against the gateway, step by step.
//
//   node agui_client.cjs '{"url": "...", "threadId": "...", "steps": [...]}'
//
// Steps: {"do": "say", "text"}               add a user message
//        {"do": "run", "tools"?, "resume"?}  runAgent (resume: {status, payload} answers every pending interrupt)
//        {"do": "run", "cutAfter": K}        runAgent, the connection cut after K complete SSE events
//        {"do": "answer_tools", "content"}   add a tool message for each call the last run left pending
//        {"do": "connect"}                   connectAgent: GET the thread's events with Last-Event-ID
//        {"do": "connect_fresh"}             connectAgent from a new agent of the thread (no Last-Event-ID)
// Prints one JSON object: every run's verified events, how it finished, the agent's messages,
// and what the client warned about. Every stream goes through the client's own verifier
// (runAgent and connectAgent apply verifyEvents): a stream it rejects is an error here.
"use strict";

const { HttpAgent, runHttpRequest, transformHttpEventStream } = require("@ag-ui/client");

const warnings = [];
for (const level of ["warn", "error"]) {
  console[level] = (...args) => warnings.push(args.map(String).join(" "));
}

// The SSE events of a response, as they arrive: each one's id is remembered once the
// whole event is in (as EventSource does). With cutAfter, the "network" drops the
// connection after that many complete events, as a lost connection would.
function trackingFetch(agent) {
  return async (url, init) => {
    const response = await fetch(url, init);
    if (!response.ok || !response.body) return response;
    const cutAfter = agent.cutAfter;
    agent.cutAfter = undefined;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const encoder = new TextEncoder();
    let buffer = "";
    let seen = 0;
    let lost = false;
    const body = new ReadableStream({
      async pull(controller) {
        if (lost) {  // the events before the cut were taken: now the connection goes
          await reader.cancel();
          controller.error(new DOMException("the connection was lost", "AbortError"));
          return;
        }
        const { done, value } = await reader.read();
        if (done) {
          controller.close();
          return;
        }
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, end + 2);
          buffer = buffer.slice(end + 2);
          for (const line of event.split("\n")) {
            if (line.startsWith("id:")) agent.lastEventId = line.slice(3).trim();
          }
          controller.enqueue(encoder.encode(event));
          if (event.includes("data:")) seen += 1;
          if (cutAfter !== undefined && seen >= cutAfter) {
            lost = true;
            return;
          }
        }
      },
      cancel() {
        return reader.cancel();
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
}

// What a front-end adds to HttpAgent to catch up after a lost connection: connect()
// GETs the thread's events, sending the id of the last event it has.
class ResumableHttpAgent extends HttpAgent {
  constructor(config) {
    super(config);
    this.fetch = trackingFetch(this);
    this.lastEventId = undefined;
  }

  connect(input) {
    const headers = { ...this.headers, Accept: "text/event-stream" };
    if (this.lastEventId !== undefined) headers["Last-Event-ID"] = this.lastEventId;
    const url = `${this.url}/threads/${encodeURIComponent(input.threadId)}/events`;
    const signal = this.abortController.signal;
    return transformHttpEventStream(runHttpRequest(() => this.fetch(url, { method: "GET", headers, signal })));
  }
}

function recorder(kind) {
  const run = { kind, events: [], finished: [], errors: [] };
  const subscriber = {
    onEvent({ event }) {
      run.events.push(event);
    },
    onRunFinishedEvent(params) {
      run.finished.push({
        outcome: params.outcome,
        result: params.result,
        pendingToolCallIds: params.pendingToolCallIds,
        interrupts: params.interrupts,
      });
    },
    onRunErrorEvent({ event }) {
      run.errors.push({ message: event.message, code: event.code });
    },
  };
  return { run, subscriber };
}

async function main() {
  const plan = JSON.parse(process.argv[2]);
  const agent = new ResumableHttpAgent({ url: plan.url, threadId: plan.threadId, headers: plan.headers || {} });
  const runs = [];
  let said = 0;
  for (const step of plan.steps) {
    if (step.do === "say") {
      said += 1;
      agent.addMessage({ id: `user-${said}`, role: "user", content: step.text });
    } else if (step.do === "answer_tools") {
      const last = runs[runs.length - 1].finished.at(-1);
      for (const id of last.pendingToolCallIds) {
        agent.addMessage({ id: `result-${id}`, role: "tool", toolCallId: id, content: step.content });
      }
    } else if (step.do === "connect_fresh") {
      const { run, subscriber } = recorder(step.do);
      runs.push(run);
      const fresh = new ResumableHttpAgent({ url: plan.url, threadId: plan.threadId, headers: plan.headers || {} });
      try {
        await fresh.connectAgent({}, subscriber);
      } catch (error) {
        run.thrown = String(error && error.stack ? error.stack : error);
      }
      run.messages = fresh.messages;
    } else if (step.do === "run" || step.do === "connect") {
      const { run, subscriber } = recorder(step.do);
      runs.push(run);
      try {
        if (step.do === "connect") {
          agent.abortController = new AbortController();
          await agent.connectAgent({}, subscriber);
        } else {
          agent.cutAfter = step.cutAfter;
          const parameters = { tools: step.tools || [] };
          if (step.resume) {
            parameters.resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, ...step.resume }));
          }
          await agent.runAgent(parameters, subscriber);
        }
      } catch (error) {
        run.thrown = String(error && error.stack ? error.stack : error);
      }
      run.lastEventId = agent.lastEventId;
    } else {
      throw new Error(`unknown step ${JSON.stringify(step)}`);
    }
  }
  process.stdout.write(JSON.stringify({ runs, messages: agent.messages, pendingInterrupts: agent.pendingInterrupts, warnings }));
}

main().catch((error) => {
  process.stdout.write(JSON.stringify({ fatal: String(error && error.stack ? error.stack : error), warnings }));
  process.exitCode = 1;
});
