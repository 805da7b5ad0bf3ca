// The Anthropic Messages API (POST /v1/messages) of a running `vkllm serve` through the official
// Anthropic SDK for Node (@anthropic-ai/sdk, pinned in package-lock.json), on the tiny Qwen3 twin
// (started by test_serve). The expected replies are `vkllm run --chat`'s greedy ones (a separate
// process); the prompt of a tool round trip must have the real Qwen3 template's token count
// (@huggingface/jinja and @lenml/tokenizers from tools/fixtures).
// Env: VKLLM_URL, VKLLM_KEY, VKLLM_TWIN (the twin's folder), VKLLM_EXPECT (JSON: model, n, q1,
// a1, q2, a2, stop).
import Anthropic from "@anthropic-ai/sdk";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "../../tools/fixtures/node_modules");
const { Template } = await import(path.join(fixtures, "@huggingface/jinja/dist/index.js"));
const { TokenizerLoader } = await import(path.join(fixtures, "@lenml/tokenizers/dist/main.mjs"));
const url = process.env.VKLLM_URL, key = process.env.VKLLM_KEY, twin = process.env.VKLLM_TWIN;
const want = JSON.parse(process.env.VKLLM_EXPECT);
const cfg = JSON.parse(fs.readFileSync(path.join(twin, "tokenizer_config.json"), "utf8"));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(twin, "tokenizer.json"), "utf8")), tokenizerConfig: cfg});
const client = new Anthropic({baseURL: url, apiKey: key, maxRetries: 0, timeout: 120000});
import { check, done } from "./check.mjs";
const model = want.model;
const ask = (q, extra = {}) => ({model, max_tokens: want.n, temperature: 0, messages: [{role: "user", content: q}], ...extra});
const text = (m) => m.content.filter(b => b.type === "text").map(b => b.text).join("");
async function expectError(cls, status, type, fn) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof cls, `${e.constructor.name} (${e.status}): ${e.message} is not ${cls.name}`);
    assert.equal(e.status, status);
    assert.equal(e.error?.type, "error", JSON.stringify(e.error));
    assert.equal(e.error?.error?.type, type, JSON.stringify(e.error));
    assert.equal(typeof e.error.error.message, "string");
    return;
  }
  assert.fail("no error");
}

await check("messages.create: the greedy reply equals vkllm run --chat's, with usage and stop_reason", async () => {
  const m = await client.messages.create(ask(want.q1));
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.match(m.id, /^msg_/);
  assert.equal(text(m), want.a1);
  assert.ok(["end_turn", "max_tokens"].includes(m.stop_reason), m.stop_reason);
  assert.ok(m.usage.input_tokens > 5 && m.usage.output_tokens >= 1 && m.usage.output_tokens <= want.n);
});
await check("system as a string and as blocks render alike", async () => {
  const a = await client.messages.create(ask(want.q1, {system: "Be brief."}));
  const b = await client.messages.create(ask(want.q1, {system: [{type: "text", text: "Be brief."}]}));
  assert.equal(text(a), text(b));
  assert.equal(a.usage.input_tokens, b.usage.input_tokens);
  const c = await client.messages.create(ask(want.q1));
  assert.ok(a.usage.input_tokens > c.usage.input_tokens);
});
await check("messages.stream: the events in order, the text equals the greedy reply", async () => {
  const stream = client.messages.stream(ask(want.q2));
  const types = [];
  stream.on("streamEvent", (e) => types.push(e.type));
  const m = await stream.finalMessage();
  assert.equal(text(m), want.a2);
  assert.equal(types[0], "message_start");
  assert.equal(types[1], "content_block_start");
  assert.ok(types.includes("content_block_delta"));
  assert.deepEqual(types.slice(-3), ["content_block_stop", "message_delta", "message_stop"]);
  assert.ok(["end_turn", "max_tokens"].includes(m.stop_reason));
  assert.ok(m.usage.output_tokens >= 1);
});
await check("stop_sequences: the reply ends before the match, stop_reason stop_sequence (plain and streamed)", async () => {
  const cut = want.a1.slice(0, want.a1.indexOf(want.stop));
  const m = await client.messages.create(ask(want.q1, {stop_sequences: ["\u0001never", want.stop]}));
  assert.equal(text(m), cut);
  assert.equal(m.stop_reason, "stop_sequence");
  assert.equal(m.stop_sequence, want.stop);
  const s = await client.messages.stream(ask(want.q1, {stop_sequences: [want.stop]})).finalMessage();
  assert.equal(text(s), cut);
  assert.equal(s.stop_reason, "stop_sequence");
});
await check("max_tokens cuts the reply: stop_reason max_tokens", async () => {
  const m = await client.messages.create(ask(want.q1, {max_tokens: 1}));
  assert.equal(m.usage.output_tokens, 1);
  assert.equal(m.stop_reason, "max_tokens");
});
await check("a tool_use / tool_result round trip in the history: accepted, rendered as the real template does", async () => {
  const tools = [{name: "get_weather", description: "Weather of a city.", input_schema: {type: "object", properties: {city: {type: "string"}}, required: ["city"]}}];
  const messages = [
    {role: "user", content: "Weather in Paris?"},
    {role: "assistant", content: [{type: "text", text: "Checking."}, {type: "tool_use", id: "toolu_01", name: "get_weather", input: {city: "Paris"}}]},
    {role: "user", content: [{type: "tool_result", tool_use_id: "toolu_01", content: "sunny"}, {type: "text", text: "And so?"}]},
  ];
  for (const stream of [false, true]) {
    const req = {model, max_tokens: 3, temperature: 0, tools, tool_choice: {type: "auto"}, messages};
    const m = stream ? await client.messages.stream(req).finalMessage() : await client.messages.create(req);
    assert.ok(["end_turn", "max_tokens", "tool_use"].includes(m.stop_reason));
    const reference = new Template(cfg.chat_template).render({
      tools: tools.map(t => ({type: "function", function: {name: t.name, description: t.description, parameters: t.input_schema}})),
      messages: [
        {role: "user", content: "Weather in Paris?"},
        {role: "assistant", content: "Checking.", tool_calls: [{id: "toolu_01", type: "function", function: {name: "get_weather", arguments: {city: "Paris"}}}]},
        {role: "tool", content: "sunny", tool_call_id: "toolu_01"},
        {role: "user", content: "And so?"},
      ],
      add_generation_prompt: true, bos_token: cfg.bos_token, eos_token: cfg.eos_token});
    assert.equal(m.usage.input_tokens, tok.encode(reference, {add_special_tokens: false}).length);
  }
});
await check("bad requests: Anthropic's error shape (400, 401, 404, 413)", async () => {
  const bad = (body) => expectError(Anthropic.BadRequestError, 400, "invalid_request_error", () => client.messages.create(body));
  await bad({model, messages: [{role: "user", content: "hi"}]});  // no max_tokens
  await bad({model, max_tokens: 4, messages: []});
  await bad({model, max_tokens: 4, messages: [{role: "system", content: "hi"}]});
  await bad({model, max_tokens: 4, messages: [{role: "user", content: [{type: "image", source: {}}]}]});
  await bad({model, max_tokens: 4, messages: [{role: "user", content: [{type: "tool_result", tool_use_id: "toolu_x", content: "?"}]}]});
  await bad({model, max_tokens: 4, temperature: 1.5, messages: [{role: "user", content: "hi"}]});
  await bad({model, max_tokens: 4, tools: [{name: "f"}], messages: [{role: "user", content: "hi"}]});
  await bad({model, max_tokens: 4, tools: [{name: "f", input_schema: {type: "object"}}], tool_choice: {type: "tool", name: "g"}, messages: [{role: "user", content: "hi"}]});
  const wrong = new Anthropic({baseURL: url, apiKey: key + "x", maxRetries: 0});
  await expectError(Anthropic.AuthenticationError, 401, "authentication_error", () => wrong.messages.create(ask(want.q1)));
  await expectError(Anthropic.APIError, 413, "request_too_large", () => client.messages.create(ask("x".repeat(2 << 20))));
});
done();
