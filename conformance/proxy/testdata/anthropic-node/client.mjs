// The Anthropic TypeScript SDK as a client of the proxy, which serves it
// from a cloud upstream. conformance/proxy/cloud_node_test.go runs it with
// PROXY_URL and PROXY_KEY set and checks what it prints: one JSON object
// of what each call returned or raised.
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ baseURL: process.env.PROXY_URL, apiKey: process.env.PROXY_KEY, maxRetries: 0 });
const model = "claude-sonnet-4-5";
const out = {};

const created = await client.messages.create({ model, max_tokens: 16, messages: [{ role: "user", content: "hello from typescript" }] });
out.create = { text: created.content[0].text, stop: created.stop_reason, usage: created.usage };

const stream = client.messages.stream({ model, max_tokens: 16, messages: [{ role: "user", content: "streamed to typescript" }] });
let deltas = "";
stream.on("text", (t) => { deltas += t; });
const final = await stream.finalMessage();
out.stream = { deltas, text: final.content[0].text, stop: final.stop_reason, output: final.usage.output_tokens };

const tool = await client.messages.create({
  model, max_tokens: 16,
  tools: [{ name: "echo", input_schema: { type: "object", properties: { text: { type: "string" } } } }],
  tool_choice: { type: "tool", name: "echo" },
  messages: [{ role: "user", content: "call the tool" }],
});
out.tools = { stop: tool.stop_reason, input: tool.content[0].input };

const counted = await client.messages.countTokens({ model, messages: [{ role: "user", content: "count these four words" }] });
out.count = counted.input_tokens;

process.stdout.write(JSON.stringify(out));
