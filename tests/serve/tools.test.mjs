// Tool calling through the official OpenAI SDK against a running `vkllm serve` on the tiny Qwen3
// twin (started by test_serve). A random twin writes no calls of its own, so this checks what the
// server accepts, renders and answers: the prompt it renders for a conversation with tools, calls
// and results has exactly the token count of the real Qwen3 template's rendering
// (@huggingface/jinja over the twin's tokenizer_config.json, tokenized by @lenml/tokenizers:
// tools/fixtures' pinned packages); the reply and stream shapes; the 400s.
// Env: VKLLM_URL, VKLLM_MODEL (the model id), VKLLM_TWIN (the twin's Hugging Face folder).
import OpenAI from "openai";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "../../tools/fixtures/node_modules");
const { Template } = await import(path.join(fixtures, "@huggingface/jinja/dist/index.js"));
const { TokenizerLoader } = await import(path.join(fixtures, "@lenml/tokenizers/dist/main.mjs"));

const url = process.env.VKLLM_URL, model = process.env.VKLLM_MODEL, twin = process.env.VKLLM_TWIN;
const cfg = JSON.parse(fs.readFileSync(path.join(twin, "tokenizer_config.json"), "utf8"));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(twin, "tokenizer.json"), "utf8")), tokenizerConfig: cfg});
const template = new Template(cfg.chat_template);
const client = new OpenAI({baseURL: url + "/v1", apiKey: "x", maxRetries: 0, timeout: 120000});
import { check, done } from "./check.mjs";
const tools = [
  {type: "function", function: {name: "get_weather", description: "Weather of a city.", parameters: {type: "object", properties: {city: {type: "string"}}, required: ["city"]}}},
  {type: "function", function: {name: "add", parameters: {type: "object", properties: {b: {type: "number"}, a: {type: "number"}}}}},
];
const history = [
  {role: "system", content: "Be brief."},
  {role: "user", content: "Weather in Paris and 2+3?"},
  {role: "assistant", content: null, tool_calls: [
    {id: "call_a", type: "function", function: {name: "get_weather", arguments: "{\"city\": \"Paris\"}"}},
    {id: "call_b", type: "function", function: {name: "add", arguments: "{\"b\": 3, \"a\": 2}"}}]},
  {role: "tool", tool_call_id: "call_a", content: "sunny, 21 C"},
  {role: "tool", tool_call_id: "call_b", content: [{type: "text", text: "5"}]},
];
// The real template's prompt for the same request: arguments as objects, content as text.
function referenceTokens(messages, withTools) {
  const msgs = messages.map(m => {
    const t = {role: m.role, content: typeof m.content === "string" ? m.content : (m.content ?? []).map(p => p.text).join("")};
    if (m.tool_calls) t.tool_calls = m.tool_calls.map(c => ({id: c.id, type: "function", function: {name: c.function.name, arguments: JSON.parse(c.function.arguments)}}));
    return t;
  });
  const text = template.render({messages: msgs, tools: withTools ? tools : undefined, add_generation_prompt: true, bos_token: cfg.bos_token, eos_token: cfg.eos_token});
  return tok.encode(text, {add_special_tokens: false}).length;
}
const isReply = (r) => {
  const c = r.choices[0];
  assert.equal(c.message.role, "assistant");
  assert.ok(["stop", "length", "tool_calls"].includes(c.finish_reason), c.finish_reason);
  if (c.finish_reason === "tool_calls") assert.ok(c.message.tool_calls.length >= 1);
  else assert.equal(typeof c.message.content, "string");
};

await check("tools offered: the prompt is the real template's (token count), a well-formed reply", async () => {
  const messages = [{role: "user", content: "Weather in Paris?"}];
  const r = await client.chat.completions.create({model, messages, tools, max_tokens: 4, temperature: 0});
  isReply(r);
  assert.equal(r.usage.prompt_tokens, referenceTokens(messages, true));
});
await check("tool_choice none: the tools are not rendered", async () => {
  const messages = [{role: "user", content: "Weather in Paris?"}];
  const r = await client.chat.completions.create({model, messages, tools, tool_choice: "none", max_tokens: 2});
  assert.equal(r.usage.prompt_tokens, referenceTokens(messages, false));
});
await check("a history of calls (content null) and results is accepted and rendered as the template does", async () => {
  for (const withTools of [true, false]) {
    const r = await client.chat.completions.create({model, messages: history, tools: withTools ? tools : undefined, max_tokens: 4, temperature: 0, parallel_tool_calls: false});
    isReply(r);
    assert.equal(r.usage.prompt_tokens, referenceTokens(history, withTools), `with tools: ${withTools}`);
  }
});
await check("tool_choice auto: a well-formed reply", async () => {
  const r = await client.chat.completions.create({model, messages: history, tools, tool_choice: "auto", max_tokens: 3});
  isReply(r);
});
// tool_choice required or a named function: decoding is constrained to the family's call, so even
// the random twin answers with a valid call (a name offered, arguments its parameters schema
// accepts), streamed or not; the loop then goes on with the tool's result to a text answer.
const validCall = (c, names) => {
  assert.equal(c.type, "function");
  assert.match(c.id, /^call_/);
  assert.ok(names.includes(c.function.name), c.function.name);
  const args = JSON.parse(c.function.arguments);
  assert.equal(typeof args, "object");
  assert.ok(args !== null && !Array.isArray(args));
  if (c.function.name === "get_weather") assert.equal(typeof args.city, "string", c.function.arguments);
  if (c.function.name === "add")
    for (const [k, v] of Object.entries(args)) assert.ok(["a", "b"].includes(k) && typeof v === "number", c.function.arguments);
  return args;
};
for (const [what, tool_choice, names] of [["required", "required", ["get_weather", "add"]],
                                            ["a named function", {type: "function", function: {name: "add"}}, ["add"]]]) {
  await check(`tool_choice ${what}: a valid call, streamed or not, then the loop to a text answer`, async () => {
    const messages = [{role: "user", content: "Weather in Paris?"}];
    const body = {model, messages, tools, tool_choice, max_tokens: 96, temperature: 0};
    const r = await client.chat.completions.create(body);
    assert.equal(r.choices[0].finish_reason, "tool_calls", JSON.stringify(r.choices[0]));
    const call = r.choices[0].message.tool_calls[0];
    validCall(call, names);
    const streamed = await client.chat.completions.stream(body).finalChatCompletion();
    assert.equal(streamed.choices[0].finish_reason, "tool_calls");
    const sc = streamed.choices[0].message.tool_calls[0];
    validCall(sc, names);
    assert.equal(sc.function.name, call.function.name);
    assert.equal(sc.function.arguments, call.function.arguments);
    const sampled = await client.chat.completions.create({...body, temperature: 1, seed: 7});
    validCall(sampled.choices[0].message.tool_calls[0], names);
    const next = [...messages, r.choices[0].message, {role: "tool", tool_call_id: call.id, content: "42"}];
    const answer = await client.chat.completions.create({model, messages: next, tools, max_tokens: 4, temperature: 0});
    isReply(answer);
  });
}
await check("streamed with tools: the SDK's accumulator gets a whole message", async () => {
  const stream = client.chat.completions.stream({model, messages: history, tools, max_tokens: 6, temperature: 0});
  const done = await stream.finalChatCompletion();
  isReply(done);
  const plain = await client.chat.completions.create({model, messages: history, tools, max_tokens: 6, temperature: 0});
  assert.equal(done.choices[0].message.content, plain.choices[0].message.content);
});
await check("bad tool requests: 400 naming the field", async () => {
  const bad = async (body, param) => {
    try {
      await client.chat.completions.create({model, max_tokens: 1, ...body});
    } catch (e) {
      assert.ok(e instanceof OpenAI.BadRequestError, `${e.constructor.name}: ${e.message}`);
      assert.equal(e.param, param, e.message);
      return;
    }
    assert.fail("no error for " + JSON.stringify(body));
  };
  const user = [{role: "user", content: "hi"}];
  await bad({messages: user, tools, tool_choice: {type: "function", function: {name: "nope"}}}, "tool_choice");
  await bad({messages: user, tool_choice: "required"}, "tool_choice");
  await bad({messages: user, tools: [{type: "function", function: {name: "has space"}}]}, "tools[0].function.name");
  await bad({messages: user, tools: [{type: "function", function: {name: "f", parameters: []}}]}, "tools[0].function.parameters");
  await bad({messages: user, tools: [{type: "code_interpreter"}]}, "tools[0].type");
  await bad({messages: [...history.slice(0, 3), {role: "tool", tool_call_id: "call_zzz", content: "x"}]}, "messages[3].tool_call_id");
  await bad({messages: [...user, {role: "tool", content: "x"}]}, "messages[1].tool_call_id");
  const noArgs = structuredClone(history);
  noArgs[2].tool_calls[0].function.arguments = "not json";
  await bad({messages: noArgs}, "messages[2].tool_calls[0].function.arguments");
});
done();
