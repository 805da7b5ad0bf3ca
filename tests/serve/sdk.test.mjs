// The official OpenAI SDK for Node against a running `vkllm serve` (started by test_serve).
// Env: VKLLM_URL, VKLLM_KEY (the server's --api-key), VKLLM_EXPECT (JSON: the model id, the
// questions and `vkllm run`'s greedy replies to them). Prints one line per check; exit 1 if any
// failed. The expected texts come from `vkllm run`, a separate process: the server must agree.
import OpenAI from "openai";
import assert from "node:assert/strict";

const url = process.env.VKLLM_URL, key = process.env.VKLLM_KEY;
const want = JSON.parse(process.env.VKLLM_EXPECT);
const client = new OpenAI({baseURL: url + "/v1", apiKey: key, maxRetries: 0, timeout: 120000});
import { check, done } from "./check.mjs";
const user = q => [{role: "user", content: q}];
const greedy = (q, extra = {}) => ({model: want.model, messages: user(q), temperature: 0, max_tokens: want.n, ...extra});
async function streamText(params) {
  const stream = await client.chat.completions.create({...params, stream: true, stream_options: {include_usage: true}});
  let text = "", chunks = 0, finish = null, usage = null, role = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) { text += ch.delta.content; chunks++; }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return {text, chunks, finish, usage, role};
}
async function expectError(cls, status, fn, needle) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof cls, `${e.constructor.name} (${e.status}): ${e.message} is not ${cls.name}`);
    assert.equal(e.status, status);
    if (needle) assert.ok(String(e.message).includes(needle), e.message);
    assert.equal(typeof e.error?.message, "string", "an OpenAI error body");
    return;
  }
  assert.fail("no error");
}

await check("models.list names the served model", async () => {
  const page = await client.models.list();
  assert.deepEqual(page.data.map(m => m.id), [want.model]);
  assert.equal((await client.models.retrieve(want.model)).id, want.model);
});
await check("chat, greedy: the reply equals vkllm run --chat's", async () => {
  const r = await client.chat.completions.create(greedy(want.q1));
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(r.choices[0].message.content, want.a1);
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5 && r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= want.n);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});
await check("chat, streamed: the deltas add up to the same reply, then finish_reason and usage", async () => {
  const s = await streamText(greedy(want.q2));
  assert.equal(s.text, want.a2);
  assert.equal(s.role, "assistant");
  assert.ok(s.chunks >= 2, `streamed in ${s.chunks} chunk(s)`);
  assert.ok(["stop", "length"].includes(s.finish));
  assert.ok(s.usage && s.usage.completion_tokens >= 1);
});
await check("completions, plain and streamed: the text equals vkllm run's", async () => {
  const p = {model: want.model, prompt: want.prompt, max_tokens: want.n, temperature: 0};
  const r = await client.completions.create(p);
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices[0].text, want.completion);
  let text = "";
  for await (const c of await client.completions.create({...p, stream: true})) text += c.choices[0]?.text ?? "";
  assert.equal(text, want.completion);
});
await check("stop strings (a string, a list, streamed): the reply ends before the first match", async () => {
  const stop = want.stop;
  const cut = want.a1.slice(0, want.a1.indexOf(stop));
  const a = await client.chat.completions.create(greedy(want.q1, {stop}));
  assert.equal(a.choices[0].message.content, cut);
  assert.equal(a.choices[0].finish_reason, "stop");
  const b = await client.chat.completions.create(greedy(want.q1, {stop: ["\u0001never", stop]}));
  assert.equal(b.choices[0].message.content, cut);
  const s = await streamText(greedy(want.q1, {stop}));
  assert.equal(s.text, cut);
  assert.equal(s.finish, "stop");
});
await check("max_tokens and max_completion_tokens cut the reply: finish_reason length", async () => {
  for (const f of ["max_tokens", "max_completion_tokens"]) {
    const r = await client.chat.completions.create({...greedy(want.q1), max_tokens: undefined, [f]: 2, ignore_eos: true});
    assert.equal(r.usage.completion_tokens, 2);
    assert.equal(r.choices[0].finish_reason, "length");
    assert.ok(want.a1.startsWith(r.choices[0].message.content), JSON.stringify(r.choices[0].message.content));
  }
});
await check("seeded sampling is reproducible (temperature, top_p, top_k, min_p, penalties)", async () => {
  const p = seed => ({model: want.model, messages: user(want.q1), max_tokens: want.n, temperature: 1.3,
    top_p: 0.95, top_k: 50, min_p: 0.01, presence_penalty: 0.5, frequency_penalty: 0.5, seed, ignore_eos: true});
  const a = await client.chat.completions.create(p(42)), b = await client.chat.completions.create(p(42));
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const others = new Set();
  for (const seed of [43, 44, 45]) others.add((await client.chat.completions.create(p(seed))).choices[0].message.content);
  assert.ok(others.size > 1 || !others.has(a.choices[0].message.content), "the seed changes nothing");
});
await check("a follow-up turn reuses the conversation's KV cache (usage cached_tokens)", async () => {
  const first = await client.chat.completions.create(greedy(want.q1));
  const messages = [...user(want.q1), {role: "assistant", content: first.choices[0].message.content}, ...user(want.q2)];
  const r = await client.chat.completions.create({model: want.model, messages, temperature: 0, max_tokens: want.n});
  const cached = r.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= first.usage.prompt_tokens, `cached ${cached} of ${r.usage.prompt_tokens}; first prompt ${first.usage.prompt_tokens}`);
  console.log(`info prefix reuse: ${cached} of ${r.usage.prompt_tokens} prompt tokens cached`);
});
await check("a client that leaves mid-stream: its generation stops, the next request is served", async () => {
  const stream = await client.chat.completions.create({...greedy(want.q1), max_tokens: 40, ignore_eos: true, stream: true});
  for await (const c of stream) if (c.choices[0]?.delta?.content) break;  // leaves the loop: aborts
  const r = await client.chat.completions.create(greedy(want.q2));
  assert.equal(r.choices[0].message.content, want.a2);
});
await check("bad requests: BadRequestError (400) with the reason", async () => {
  const bad = async (body, needle) => expectError(OpenAI.BadRequestError, 400, () => client.chat.completions.create(body), needle);
  await bad({model: want.model, messages: []}, "messages");
  await bad({model: want.model, messages: [{role: "wizard", content: "hi"}]}, "wizard");
  await bad({model: want.model, messages: [{role: "", content: "hi"}]}, "role");
  await bad({model: want.model, messages: [{role: "user", content: 42}]}, "content");
  await bad({...greedy(want.q1), temperature: "hot"}, "temperature");
  await bad({...greedy(want.q1), max_tokens: -3}, "max_tokens");
  await bad({...greedy(want.q1), n: 2}, "'n'");
  await bad({...greedy(want.q1), stop: [""]}, "stop");
  await bad({model: want.model, messages: user("word ".repeat(200))}, `context holds ${want.ctx} tokens`);
  await expectError(OpenAI.BadRequestError, 400, () => client.completions.create({model: want.model, prompt: 7}), "prompt");
});
await check("wrong API key: AuthenticationError (401)", async () => {
  const wrong = new OpenAI({baseURL: url + "/v1", apiKey: key + "x", maxRetries: 0});
  await expectError(OpenAI.AuthenticationError, 401, () => wrong.models.list());
  await expectError(OpenAI.AuthenticationError, 401, () => wrong.chat.completions.create(greedy(want.q1)));
});
await check("unknown path: NotFoundError (404); wrong method: 405; oversized body: 413", async () => {
  await expectError(OpenAI.NotFoundError, 404, () => client.get("/no/such/endpoint"));
  await expectError(OpenAI.NotFoundError, 404, () => client.models.retrieve("no-such-model"));
  await expectError(OpenAI.APIError, 405, () => client.get("/chat/completions"));
  await expectError(OpenAI.APIError, 413, () => client.chat.completions.create({model: want.model, messages: user("x".repeat(2 << 20))}));
});
await check("malformed JSON (raw fetch): 400 with an OpenAI error body", async () => {
  const r = await fetch(url + "/v1/chat/completions", {method: "POST", body: "{\"messages\": [", headers: {Authorization: "Bearer " + key, "Content-Type": "application/json"}});
  assert.equal(r.status, 400);
  const j = await r.json();
  assert.ok(j.error.message.includes("not valid JSON"), j.error.message);
});
await check("after all of that the server still answers the greedy reply", async () => {
  const r = await client.chat.completions.create(greedy(want.q1));
  assert.equal(r.choices[0].message.content, want.a1);
});
done();
