// The openai npm package as a client of the proxy's Chat Completions
// ingress. conformance/proxy/openai_node_test.go runs it with PROXY_URL and
// PROXY_KEY set and checks what it prints: one JSON object of what each
// call returned or raised.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.PROXY_URL + "/v1", apiKey: process.env.PROXY_KEY, maxRetries: 0 });
const model = "claude-sonnet-4-5";
const out = {};

const created = await client.chat.completions.create({
  model,
  messages: [
    { role: "system", content: "answer briefly" },
    { role: "user", content: "hello from node" },
  ],
  max_completion_tokens: 16,
});
out.create = { content: created.choices[0].message.content, finish: created.choices[0].finish_reason, usage: created.usage };

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "streamed from node" }],
  stream: true,
  stream_options: { include_usage: true },
});
let text = "";
let finish = null;
let usage = null;
for await (const chunk of stream) {
  for (const c of chunk.choices) {
    text += c.delta.content ?? "";
    finish = c.finish_reason ?? finish;
  }
  usage = chunk.usage ?? usage;
}
out.stream = { content: text, finish, usage };

const tools = await client.chat.completions.create({
  model,
  tools: [{ type: "function", function: { name: "weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }],
  messages: [
    { role: "user", content: "weather in Oslo?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_9", type: "function", function: { name: "weather", arguments: '{"city":"Oslo"}' } }] },
    { role: "tool", tool_call_id: "call_9", content: "snow" },
  ],
});
out.tools = { finish: tools.choices[0].finish_reason };

try {
  await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], n: 2 });
  out.refused = null;
} catch (e) {
  out.refused = { status: e.status, param: e.param, code: e.code, type: e.type };
}

try {
  const cut = await client.chat.completions.create(
    { model, messages: [{ role: "user", content: "a long enough answer to be cut" }], stream: true },
    { headers: { "x-sim-fault": "drop_after_events=4" } },
  );
  let got = "";
  for await (const chunk of cut) {
    got += chunk.choices[0]?.delta?.content ?? "";
  }
  out.cut = { raised: false, content: got };
} catch (e) {
  out.cut = { raised: true, message: String(e.message) };
}

process.stdout.write(JSON.stringify(out) + "\n");
