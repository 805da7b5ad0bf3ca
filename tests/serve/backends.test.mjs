// The same greedy chat requests, through the official OpenAI SDK, to two `vkllm serve` processes on
// one artifact (run by test_serve): VKLLM_URL_A on the CPU reference backend, VKLLM_URL_B on
// Vulkan. Env: VKLLM_MODEL (the model id), VKLLM_QUESTION, VKLLM_N (max_tokens). A non-streamed
// and a streamed (include_usage) completion from each: the reply text and the usage of B must
// equal A's, and each server's streamed text its non-streamed one. Prints one line per check and
// "replies {json}"; exit 1 if any check failed.
import OpenAI from "openai";
import assert from "node:assert/strict";

const model = process.env.VKLLM_MODEL, question = process.env.VKLLM_QUESTION;
const n = Number(process.env.VKLLM_N);
const client = url => new OpenAI({baseURL: url + "/v1", apiKey: "none", maxRetries: 0, timeout: 120000});
const params = {model, messages: [{role: "user", content: question}], temperature: 0, max_tokens: n};

async function replies(url) {
  const c = client(url);
  const plain = await c.chat.completions.create(params);
  const stream = await c.chat.completions.create({...params, stream: true, stream_options: {include_usage: true}});
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const x of ch.choices) {
      if (x.delta.content) { text += x.delta.content; chunks++; }
      if (x.finish_reason) finish = x.finish_reason;
    }
  }
  const u = x => ({prompt_tokens: x.prompt_tokens, completion_tokens: x.completion_tokens, total_tokens: x.total_tokens});
  return {plain: {text: plain.choices[0].message.content, finish: plain.choices[0].finish_reason, usage: u(plain.usage)},
          streamed: {text, finish, usage: usage && u(usage), chunks}};
}

let failed = 0;
function check(name, fn) {
  try {
    fn();
    console.log("ok   " + name);
  } catch (e) {
    failed++;
    console.log("FAIL " + name + ": " + (e && e.message || e));
  }
}
const a = await replies(process.env.VKLLM_URL_A), b = await replies(process.env.VKLLM_URL_B);
check("the CPU server's reply is not empty", () => assert.ok(a.plain.text.length > 0 && a.plain.usage.completion_tokens >= 1));
for (const [name, r] of [["cpu", a], ["vulkan", b]])
  check(`${name}: the streamed reply equals the non-streamed one`, () => {
    assert.equal(r.streamed.text, r.plain.text);
    assert.equal(r.streamed.finish, r.plain.finish);
    assert.ok(r.streamed.chunks >= 1);
  });
check("vulkan's non-streamed reply and usage equal the CPU's", () => assert.deepEqual(b.plain, a.plain));
check("vulkan's streamed reply, finish_reason and usage equal the CPU's", () => {
  assert.equal(b.streamed.text, a.streamed.text);
  assert.equal(b.streamed.finish, a.streamed.finish);
  assert.deepEqual(b.streamed.usage, a.streamed.usage);
});
console.log("replies " + JSON.stringify({cpu: a, vulkan: b}));
process.exit(failed ? 1 : 0);
