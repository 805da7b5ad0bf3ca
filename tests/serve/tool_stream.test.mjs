// The streamed chunks of replies with tool calls (written by test_serve_tools in the server's
// order) served over HTTP to the official openai SDK, whose ChatCompletionStream accumulator must
// rebuild the message: the content, each call's id, type, name and arguments.
// Env: VKLLM_STREAMS: a JSON file of [{sse, content, calls: [{name, arguments}]}].
import OpenAI from "openai";
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";

const cases = JSON.parse(fs.readFileSync(process.env.VKLLM_STREAMS, "utf8"));
let current = "";
const server = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    res.writeHead(200, {"Content-Type": "text/event-stream"});
    res.end(current);
  });
});
await new Promise(r => server.listen(0, "127.0.0.1", r));
const client = new OpenAI({baseURL: `http://127.0.0.1:${server.address().port}/v1`, apiKey: "x", maxRetries: 0});
let failed = 0;
for (const [i, c] of cases.entries()) {
  try {
    current = c.sse;
    const stream = client.chat.completions.stream({model: "m", messages: [{role: "user", content: "hi"}],
      tools: [{type: "function", function: {name: "get_weather", parameters: {type: "object"}}},
              {type: "function", function: {name: "add", parameters: {type: "object"}}}]});
    const done = await stream.finalChatCompletion();
    const choice = done.choices[0];
    const msg = choice.message;
    assert.equal(msg.content ?? "", c.content);
    assert.equal(choice.finish_reason, c.calls.length ? "tool_calls" : "stop");
    assert.equal((msg.tool_calls ?? []).length, c.calls.length);
    for (const [k, want] of c.calls.entries()) {
      const got = msg.tool_calls[k];
      assert.equal(got.type, "function");
      assert.match(got.id, /^call_[A-Za-z0-9]{24}$/);
      assert.equal(got.function.name, want.name);
      assert.deepEqual(JSON.parse(got.function.arguments), want.arguments);
    }
    console.log(`ok   stream ${i}: ${c.calls.length} call(s) rebuilt by ChatCompletionStream`);
  } catch (e) {
    failed++;
    console.log(`FAIL stream ${i}: ${e && e.stack || e}`);
  }
}
server.close();
process.exit(failed ? 1 : 0);
