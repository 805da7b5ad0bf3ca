// A bounded load test of `vkllm serve` on 127.0.0.1 (run by test_serve): VKLLM_CLIENTS clients,
// each sending VKLLM_REQUESTS greedy chat requests one after another; every third one streamed,
// every seventh streamed and left after its first piece. Every completed reply must equal the
// greedy text of its question (VKLLM_EXPECT: questions, answers from `vkllm run --chat`, n).
// Last line: "figures {json}" (requests, statuses, latency percentiles in ms, wall seconds).
const url = process.env.VKLLM_URL;
const want = JSON.parse(process.env.VKLLM_EXPECT);
const clients = Number(process.env.VKLLM_CLIENTS || 8), per = Number(process.env.VKLLM_REQUESTS || 25);
const fig = {requests: 0, completed: 0, aborted: 0, streamed: 0, http_5xx: 0, http_other: 0, wrong_text: 0, errors: 0};
const lat = [];

async function one(c, i) {
  const k = (c + i) % want.questions.length, n = c * per + i;
  const leave = n % 7 === 3, stream = leave || n % 3 === 0;
  const body = {messages: [{role: "user", content: want.questions[k]}], temperature: 0, max_tokens: want.n, stream};
  const ctl = new AbortController();
  const t0 = performance.now();
  fig.requests++;
  let r;
  try {
    r = await fetch(url + "/v1/chat/completions", {method: "POST", body: JSON.stringify(body), signal: ctl.signal, headers: {"Content-Type": "application/json"}});
  } catch (e) {
    fig.errors++;
    console.log(`request ${n}: ${e}`);
    return;
  }
  if (r.status >= 500) { fig.http_5xx++; console.log(`request ${n}: ${r.status} ${await r.text()}`); return; }
  if (r.status !== 200) { fig.http_other++; console.log(`request ${n}: ${r.status} ${await r.text()}`); return; }
  let text = "";
  try {
    if (!stream) {
      text = (await r.json()).choices[0].message.content;
    } else {
      fig.streamed++;
      const reader = r.body.getReader(), dec = new TextDecoder();
      let buf = "", done = false;
      while (!done) {
        const chunk = await reader.read();
        if (chunk.done) break;
        buf += dec.decode(chunk.value, {stream: true});
        let at;
        while ((at = buf.indexOf("\n\n")) >= 0) {
          const ev = buf.slice(0, at); buf = buf.slice(at + 2);
          if (ev === "data: [DONE]") { done = true; break; }
          const j = JSON.parse(ev.slice(6));
          text += j.choices[0]?.delta?.content ?? "";
        }
        if (leave && text) { ctl.abort(); fig.aborted++; return; }
      }
    }
  } catch (e) {
    if (e.name === "AbortError") return;
    fig.errors++;
    console.log(`request ${n}: ${e}`);
    return;
  }
  lat.push(performance.now() - t0);
  fig.completed++;
  if (text !== want.answers[k]) { fig.wrong_text++; console.log(`request ${n}: ${JSON.stringify(text)} != ${JSON.stringify(want.answers[k])}`); }
}

const t0 = performance.now();
await Promise.all(Array.from({length: clients}, async (_, c) => { for (let i = 0; i < per; ++i) await one(c, i); }));
fig.wall_s = +((performance.now() - t0) / 1000).toFixed(2);
lat.sort((a, b) => a - b);
const pct = p => lat.length ? +lat[Math.min(lat.length - 1, Math.floor(p / 100 * lat.length))].toFixed(1) : null;
Object.assign(fig, {clients, per_client: per, latency_ms: {p50: pct(50), p90: pct(90), p99: pct(99), max: pct(100)},
  requests_per_s: +(fig.completed / fig.wall_s).toFixed(2)});
console.log("figures " + JSON.stringify(fig));
process.exit(fig.http_5xx || fig.wrong_text || fig.errors || fig.http_other ? 1 : 0);
