// The Vercel AI SDK (ai + @ai-sdk/openai + @ai-sdk/openai-compatible) as a program uses it,
// against the gateway. argv[2]: {"baseURL", "model", "steps": [names]}. Prints one JSON object:
// {"<step>": what the SDK returned (object, text, tool calls, finish reason, the request body
// it sent)} or {"<step>": {"thrown": {name, message}}} when the SDK threw.
"use strict";

const { generateObject, generateText, tool } = require("ai");
const { createOpenAI } = require("@ai-sdk/openai");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");
const { z } = require("zod");

const plan = JSON.parse(process.argv[2]);
const openai = createOpenAI({ baseURL: plan.baseURL, apiKey: "unused-on-loopback" });
const compatible = createOpenAICompatible({ name: "gateway", baseURL: plan.baseURL, apiKey: "unused-on-loopback", supportsStructuredOutputs: true });

const person = z.object({
  name: z.string(),
  age: z.number().int().min(18),
  tags: z.array(z.string()).min(2),
  role: z.enum(["admin", "user"]),
});
const weather = tool({
  description: "The forecast for a city (run by the client)",
  inputSchema: z.object({ city: z.string().min(2), days: z.number().int().min(1) }),
});

function body(result) {
  const sent = result.request && result.request.body;
  return typeof sent === "string" ? JSON.parse(sent) : sent;
}

function calls(result) {
  return result.toolCalls.map((c) => ({ toolName: c.toolName, input: c.input }));
}

const steps = {
  // generateObject over the Responses API (openai(id)): text.format json_schema.
  async object_responses() {
    const result = await generateObject({ model: openai(plan.model), schema: person, prompt: "Describe someone." });
    return { object: result.object, finishReason: result.finishReason, request: body(result) };
  },
  // generateObject over chat completions (openai-compatible): response_format json_schema.
  async object_chat() {
    const result = await generateObject({ model: compatible.chatModel(plan.model), schema: person, prompt: "Describe someone." });
    return { object: result.object, finishReason: result.finishReason, request: body(result) };
  },
  // A forced tool over the Responses API: the call comes back to the program.
  async tool_responses() {
    const result = await generateText({
      model: openai(plan.model), tools: { weather }, toolChoice: { type: "tool", toolName: "weather" }, prompt: "Weather in Paris?",
    });
    return { toolCalls: calls(result), finishReason: result.finishReason, request: body(result) };
  },
  // "required" over chat completions (@ai-sdk/openai's chat model).
  async tool_chat() {
    const result = await generateText({
      model: openai.chat(plan.model), tools: { weather }, toolChoice: "required", prompt: "Weather in Paris?",
    });
    return { toolCalls: calls(result), finishReason: result.finishReason, request: body(result) };
  },
  // A second turn from response.messages, with the Responses provider's default store: the
  // earlier assistant message goes back as an item_reference.
  async second_turn() {
    const model = openai(plan.model);
    const first = await generateText({ model, prompt: "first question" });
    const messages = [{ role: "user", content: "first question" }, ...first.response.messages, { role: "user", content: "second question" }];
    const second = await generateText({ model, messages });
    return { first: first.text, text: second.text, finishReason: second.finishReason, request: body(second) };
  },
};

(async () => {
  const out = {};
  for (const name of plan.steps) {
    try {
      out[name] = await steps[name]();
    } catch (error) {
      out[name] = { thrown: { name: error && error.name, message: String(error && error.message).slice(0, 2000) } };
    }
  }
  process.stdout.write(JSON.stringify(out));
})();
