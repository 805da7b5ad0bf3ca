#!/usr/bin/env node
// HTTP load generator for `vkllm serve` (or any OpenAI-compatible server): C concurrent streaming
// clients, each sending requests one after another until N requests have been sent, every request
// a prompt of about P words and max_tokens M (greedy, ignore_eos so every reply is M tokens where
// the server supports it). Prints aggregate generated tok/s over the wall time, time to first
// token and inter-token latency percentiles, and errors, as one JSON line.
//
//   node tools/serve_load.mjs --url http://127.0.0.1:8080 --concurrency 16 --requests 64 \
//        --prompt-words 100 --max-tokens 128
// Node 18+ (global fetch); no dependencies.
const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const url = args.url || "http://127.0.0.1:8080";
const C = Number(args.concurrency || 4), N = Number(args.requests || 4 * C);
const P = Number(args["prompt-words"] || 100), M = Number(args["max-tokens"] || 128);
for (const [k, v] of [["concurrency", C], ["requests", N], ["prompt-words", P], ["max-tokens", M]])
  if (!Number.isInteger(v) || v < 1) { console.error(`serve_load: --${k} must be a positive integer`); process.exit(2); }
const words = ["river", "stone", "light", "garden", "number", "window", "story", "market", "cloud", "engine"];
const prompt = (i) => Array.from({length: P}, (_, k) => words[(i * 7 + k * 3) % words.length]).join(" ");

const ttft = [], itl = [];
let sent = 0, tokens = 0, ok = 0, errors = 0;
async function one(i) {
  const t0 = performance.now();
  const r = await fetch(url + "/v1/completions", {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({prompt: prompt(i), max_tokens: M, temperature: 0, ignore_eos: true, stream: true}),
  });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${(await r.text()).slice(0, 200)}`);
  const reader = r.body.getReader(), dec = new TextDecoder();
  let buf = "", last = null, n = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    buf += dec.decode(value, {stream: true});
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, at);
      buf = buf.slice(at + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const j = JSON.parse(ev.slice(6));
      if (j.error) throw new Error(j.error.message);
      if (!j.choices?.[0]?.text) continue;
      const now = performance.now();
      if (last === null) ttft.push(now - t0); else itl.push(now - last);
      last = now;
      n++;
    }
  }
  return n;
}
async function client() {
  while (sent < N) {
    const i = sent++;
    try {
      await one(i);
      ok++;
    } catch (e) {
      errors++;
      console.error(`request ${i}: ${e.message}`);
    }
  }
}
// Generated tokens are counted from /metrics when the server has it (a streamed piece may hold
// several tokens or none), else from the streamed pieces.
async function generated() {
  try {
    const t = await (await fetch(url + "/metrics")).text();
    const m = t.match(/^vkllm_generated_tokens_total (\d+)/m);
    return m ? Number(m[1]) : null;
  } catch { return null; }
}
const g0 = await generated();
const w0 = performance.now();
await Promise.all(Array.from({length: C}, client));
const wall = (performance.now() - w0) / 1000;
const g1 = await generated();
tokens = g0 !== null && g1 !== null ? g1 - g0 : ttft.length + itl.length;
const pct = (a, p) => (a.length ? [...a].sort((x, y) => x - y)[Math.min(a.length - 1, Math.floor(p * a.length))] : null);
const r1 = (x) => (x === null ? null : Math.round(x * 10) / 10);
console.log(JSON.stringify({
  concurrency: C, requests: N, completed: ok, errors, wall_s: r1(wall), generated_tokens: tokens,
  aggregate_tok_s: r1(tokens / wall), per_stream_tok_s: r1(tokens / wall / C),
  ttft_ms: {p50: r1(pct(ttft, 0.5)), p90: r1(pct(ttft, 0.9)), p99: r1(pct(ttft, 0.99))},
  itl_ms: {p50: r1(pct(itl, 0.5)), p90: r1(pct(itl, 0.9)), p99: r1(pct(itl, 0.99))},
}));
process.exit(errors ? 1 : 0);
