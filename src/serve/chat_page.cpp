#include "serve/chat_page.h"

namespace vkllm::serve {

const std::string& chat_page() {
  static const std::string page = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>vkllm chat</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d1f23; }
  header { padding: 10px 16px; background: #24292f; color: #fff; display: flex; gap: 12px; align-items: baseline; }
  header h1 { font-size: 17px; margin: 0; }
  header span { font-size: 13px; opacity: .75; flex: 1; }
  header label { font-size: 13px; }
  header input { width: 56px; font: inherit; }
  #log { max-width: 820px; margin: 0 auto; padding: 16px; display: flex; flex-direction: column; gap: 10px; min-height: calc(100vh - 190px); }
  .msg { padding: 9px 13px; border-radius: 10px; white-space: pre-wrap; word-break: break-word; max-width: 85%; line-height: 1.4; }
  .user { align-self: flex-end; background: #0b63ce; color: #fff; }
  .assistant { align-self: flex-start; background: #fff; border: 1px solid #d0d7de; }
  .error { align-self: center; background: #ffebe9; border: 1px solid #ff8182; color: #82071e; }
  .meta { align-self: flex-start; font-size: 12px; color: #57606a; margin-top: -6px; }
  form { position: sticky; bottom: 0; background: #f4f5f7; max-width: 820px; margin: 0 auto; padding: 10px 16px 16px; display: flex; gap: 8px; }
  textarea { flex: 1; font: inherit; padding: 8px; border-radius: 8px; border: 1px solid #d0d7de; resize: vertical; min-height: 44px; }
  button { font: inherit; padding: 0 16px; border-radius: 8px; border: 0; background: #1f883d; color: #fff; cursor: pointer; }
  button.secondary { background: #6e7781; }
  button:disabled { opacity: .5; cursor: default; }
</style>
</head>
<body>
<header><h1>vkllm chat</h1><span id="model">connecting...</span>
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>max tokens <input id="max_tokens" type="number" min="1" step="1" value="256"></label></header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Message (Enter sends, Shift+Enter: new line)" autofocus></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" class="secondary" disabled>Stop</button>
  <button id="reset" type="button" class="secondary">New chat</button>
</form>
<script>
"use strict";
const log = document.getElementById("log"), input = document.getElementById("input");
const send = document.getElementById("send"), stop = document.getElementById("stop");
let history = [], controller = null, modelId = null, apiKey = "";

function add(cls, text) {
  const d = document.createElement("div");
  d.className = "msg " + cls;
  d.textContent = text;
  log.appendChild(d);
  d.scrollIntoView({block: "end"});
  return d;
}
function headers() {
  const h = {"Content-Type": "application/json"};
  if (apiKey) h["Authorization"] = "Bearer " + apiKey;
  return h;
}
async function loadModel() {
  const r = await fetch("/v1/models", {headers: headers()});
  if (r.status === 401) {
    apiKey = prompt("API key") || "";
    return loadModel();
  }
  const j = await r.json();
  modelId = j.data[0].id;
  document.getElementById("model").textContent = modelId + ", context " + j.data[0].context_length + " tokens";
}
async function ask(text) {
  history.push({role: "user", content: text});
  add("user", text);
  const out = add("assistant", "");
  out.dataset.state = "streaming";
  send.disabled = true; stop.disabled = false;
  controller = new AbortController();
  let reply = "", finish = "", usage = null;
  try {
    const r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(), signal: controller.signal,
      body: JSON.stringify({model: modelId, messages: history, stream: true, stream_options: {include_usage: true},
        temperature: Number(document.getElementById("temperature").value),
        max_tokens: Number(document.getElementById("max_tokens").value)})});
    if (!r.ok) throw new Error((await r.json()).error.message);
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let at;
      while ((at = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, at); buf = buf.slice(at + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        if (j.usage) usage = j.usage;
        for (const c of j.choices || []) {
          if (c.delta && c.delta.content) { reply += c.delta.content; out.textContent = reply; out.scrollIntoView({block: "end"}); }
          if (c.finish_reason) finish = c.finish_reason;
        }
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") add("error", String(e.message || e));
    finish = finish || (e.name === "AbortError" ? "stopped" : "error");
  }
  history.push({role: "assistant", content: reply});
  out.dataset.state = "done";
  const meta = document.createElement("div");
  meta.className = "meta";
  meta.textContent = finish + (usage ? " \u00b7 " + usage.prompt_tokens + " prompt tokens (" +
    usage.prompt_tokens_details.cached_tokens + " cached), " + usage.completion_tokens + " generated" : "");
  log.appendChild(meta);
  send.disabled = false; stop.disabled = true; controller = null;
  input.focus();
}
document.getElementById("form").addEventListener("submit", e => {
  e.preventDefault();
  const text = input.value.trim();
  if (!text || controller) return;
  input.value = "";
  ask(text);
});
input.addEventListener("keydown", e => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); document.getElementById("form").requestSubmit(); }
});
stop.addEventListener("click", () => controller && controller.abort());
document.getElementById("reset").addEventListener("click", () => { if (!controller) { history = []; log.textContent = ""; } });
loadModel().catch(e => add("error", String(e)));
</script>
</body>
</html>
)HTML";
  return page;
}

}  // namespace vkllm::serve
