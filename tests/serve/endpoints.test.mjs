// POST /tokenize, POST /detokenize, GET /props and GET /metrics of a running `vkllm serve` on the
// tiny Qwen3 twin (real Qwen3 tokenizer), started by test_serve. The token ids must equal the
// tokenizer conformance references (transformers.js ids, tests/tokenizer/reference/qwen3.jsonl);
// /metrics is read by an npm Prometheus text-format parser after a counted run of requests.
// Env: VKLLM_URL, VKLLM_KEY, VKLLM_MODEL, VKLLM_CTX (the context length).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import parsePrometheusTextFormat from "parse-prometheus-text-format";

const here = path.dirname(fileURLToPath(import.meta.url));
const url = process.env.VKLLM_URL, key = process.env.VKLLM_KEY, model = process.env.VKLLM_MODEL;
const auth = {Authorization: "Bearer " + key, "Content-Type": "application/json"};
const post = async (p, body) => {
  const r = await fetch(url + p, {method: "POST", headers: auth, body: typeof body === "string" ? body : JSON.stringify(body)});
  return {status: r.status, json: await r.json()};
};
const get = async (p) => fetch(url + p, {headers: auth});
import { check, done } from "./check.mjs";
const lines = (f) => fs.readFileSync(f, "utf8").split("\n").filter(l => l).map(l => JSON.parse(l));
const corpus = lines(path.join(here, "../tokenizer/corpus.jsonl"));
const refs = lines(path.join(here, "../tokenizer/reference/qwen3.jsonl"));

await check("/tokenize: the ids of the reference tokenizer (add_special both ways), /detokenize gives the text back", async () => {
  let n = 0;
  for (let i = 0; i < 100 && n < 30; i++) {
    if (corpus[i].text === undefined) continue;
    const text = corpus[i].text;
    const a = await post("/tokenize", {content: text});
    assert.equal(a.status, 200);
    assert.deepEqual(a.json.tokens, refs[i].ids, text);
    const b = await post("/tokenize", {content: text, add_special: true});
    assert.deepEqual(b.json.tokens, refs[i].ids_special, text);
    if (refs[i].rt) assert.equal((await post("/detokenize", {tokens: refs[i].ids})).json.content, text);
    n++;
  }
  assert.ok(n >= 20, `${n} strings`);
});
await check("/tokenize with_pieces: {id, piece} whose pieces spell the text", async () => {
  const text = "Hello world, tokenizers!";
  const r = await post("/tokenize", {content: text, with_pieces: true});
  assert.equal(r.status, 200);
  assert.deepEqual(r.json.tokens.map(t => t.id), (await post("/tokenize", {content: text})).json.tokens);
  assert.equal(r.json.tokens.map(t => t.piece).join(""), text);
});
await check("/tokenize and /detokenize refuse bad bodies with 400", async () => {
  assert.equal((await post("/tokenize", {content: 7})).status, 400);
  assert.equal((await post("/tokenize", {})).status, 400);
  assert.equal((await post("/tokenize", "[1,")).status, 400);
  assert.equal((await post("/tokenize", {content: "x", add_special: "yes"})).status, 400);
  const vocab = (await (await get("/props")).json()).vocab_size;
  for (const bad of [[-1], [vocab], [1.5], ["a"], [2 ** 40], 5]) {
    const r = await post("/detokenize", {tokens: bad});
    assert.equal(r.status, 400, JSON.stringify(bad));
    assert.equal(r.json.error.param, "tokens");
  }
  assert.equal((await post("/detokenize", {tokens: [vocab - 1]})).status, 200);
});
await check("/props: the model, context, slots and defaults", async () => {
  const p = await (await get("/props")).json();
  assert.equal(p.model, model);
  assert.equal(p.context_length, Number(process.env.VKLLM_CTX));
  assert.equal(p.chat_template, "qwen3");
  assert.equal(p.architecture, "qwen3");
  assert.ok(p.total_slots >= 1 && p.vocab_size > 100000);
  assert.equal(p.default_generation_settings.temperature, 1);
  assert.equal((await fetch(url + "/props")).status, 401, "the API key is needed");
});
await check("/metrics: counters equal the requests made, histograms and gauges present", async () => {
  const read = async () => {
    const r = await get("/metrics");
    assert.equal(r.status, 200);
    assert.match(r.headers.get("content-type"), /^text\/plain; version=0\.0\.4/);
    return Object.fromEntries(parsePrometheusTextFormat(await r.text()).map(f => [f.name, f]));
  };
  const value = (fams, name, labels = {}) => {
    const f = fams[name];
    if (!f) return 0;
    const m = f.metrics.find(m => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
    return m ? Number(m.value) : 0;
  };
  const before = await read();
  const N = 3;
  let prompt = 0, generated = 0;
  for (let i = 0; i < N; i++) {
    const r = await post("/v1/chat/completions", {model, messages: [{role: "user", content: "Count " + i}], max_tokens: 3, temperature: 0, ignore_eos: true});
    assert.equal(r.status, 200);
    prompt += r.json.usage.prompt_tokens;
    generated += r.json.usage.completion_tokens;
  }
  assert.equal((await post("/v1/chat/completions", {messages: []})).status, 400);
  const after = await read();
  const d = (name, labels) => value(after, name, labels) - value(before, name, labels);
  assert.equal(d("vkllm_requests_total", {endpoint: "/v1/chat/completions", status: "200"}), N);
  assert.equal(d("vkllm_requests_total", {endpoint: "/v1/chat/completions", status: "400"}), 1);
  assert.equal(d("vkllm_prompt_tokens_total"), prompt);
  assert.equal(d("vkllm_generated_tokens_total"), generated);
  const hist = (fams, name) => fams[name]?.metrics[0] ?? {count: 0, buckets: {}};
  const ttft = hist(after, "vkllm_time_to_first_token_seconds");
  assert.equal(after.vkllm_time_to_first_token_seconds.type, "HISTOGRAM");
  assert.equal(Number(ttft.count) - Number(hist(before, "vkllm_time_to_first_token_seconds").count), N);
  assert.equal(Number(ttft.buckets["+Inf"]), Number(ttft.count));
  const gap = Number(hist(after, "vkllm_time_per_output_token_seconds").count) - Number(hist(before, "vkllm_time_per_output_token_seconds").count);
  assert.equal(gap, generated - N);
  assert.equal(value(after, "vkllm_requests_waiting"), 0);
  assert.equal(value(after, "vkllm_requests_running"), 0);
  if (after.vkllm_kv_blocks_total) {
    // Continuous batching: the finished requests hold no block; the pool's default size is room
    // for --parallel (16) requests at the full context, in blocks of vkllm_kv_block_tokens, plus
    // the one spare block admission keeps.
    assert.equal(value(after, "vkllm_kv_blocks_used"), 0);
    const bt = value(after, "vkllm_kv_block_tokens");
    assert.equal(value(after, "vkllm_kv_blocks_total"), 16 * Math.ceil(Number(process.env.VKLLM_CTX) / bt) + 1);
    assert.ok(value(after, "vkllm_kv_blocks_cached") <= value(after, "vkllm_kv_blocks_total"));
    const health = await (await fetch(url + "/health")).json();
    assert.equal(health.active, 0);
    assert.equal(health.kv_blocks_total, value(after, "vkllm_kv_blocks_total"));
  } else {
    assert.ok(value(after, "vkllm_kv_slots_used") >= 1 && value(after, "vkllm_kv_tokens") > 0);
    assert.equal(value(after, "vkllm_kv_tokens_capacity"), value(after, "vkllm_kv_slots") * Number(process.env.VKLLM_CTX));
  }
  assert.ok(value(after, "vkllm_requests_total", {endpoint: "/metrics", status: "200"}) >= 1);
});
done();
