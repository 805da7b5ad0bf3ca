// report.html: a self-contained page (inline CSS and JS, no network) that renders the matrix
// from the results embedded as JSON, so opening the file is all a reader needs.
#include <string>

#include "core/mapped_file.h"
#include "e2e/matrix.h"

namespace vkllm {

namespace {

// Everything but the data. The page builds its rows from the JSON in #data (textContent only,
// never innerHTML with data), so a browser that renders seven rows has really run the script.
constexpr const char* kPage = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>vkllm e2e matrix</title>
<style>
:root { --ok: #1a7f37; --ok-bg: #dafbe1; --bad: #cf222e; --bad-bg: #ffebe9; --muted: #57606a;
        --line: #d0d7de; --head: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: #1f2328; margin: 0; padding: 24px 32px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; display: flex; align-items: center; gap: 12px; }
.pill { font-size: 13px; font-weight: 600; padding: 2px 10px; border-radius: 999px; }
.pill.ok { color: var(--ok); background: var(--ok-bg); }
.pill.bad { color: var(--bad); background: var(--bad-bg); }
.meta { color: var(--muted); margin: 0 0 14px; }
.meta code { font-size: 12px; }
.gates { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; margin: 0 0 16px;
         background: var(--head); max-width: 1200px; }
.gates b { font-weight: 600; }
.gates ul { margin: 4px 0; padding-left: 20px; }
table { border-collapse: collapse; width: 100%; max-width: 1600px; }
th, td { border-bottom: 1px solid var(--line); padding: 7px 7px; text-align: left; vertical-align: top; }
th { background: var(--head); font-weight: 600; font-size: 11px; color: var(--muted);
     text-transform: uppercase; letter-spacing: .03em; vertical-align: bottom; }
th.num { text-align: right; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.cell-row { cursor: pointer; }
tr.cell-row:hover { background: #f6f8fa; }
.badge { font-weight: 700; font-size: 12px; padding: 2px 8px; border-radius: 4px; }
.badge.pass { color: var(--ok); background: var(--ok-bg); }
.badge.fail { color: var(--bad); background: var(--bad-bg); }
.model, .recipe { white-space: nowrap; }
.model { font-weight: 600; }
.sub { color: var(--muted); font-size: 12px; }
.reason { min-width: 360px; max-width: 560px; font-size: 13px; }
.gate { display: flex; gap: 6px; margin: 0 0 2px; }
.gname { flex: 0 0 52px; color: var(--muted); font-size: 11px; line-height: 19px;
         text-transform: uppercase; letter-spacing: .03em; }
tr.fail .reason { color: var(--bad); }
.bar { display: flex; height: 12px; width: 130px; background: #eef1f4; border-radius: 3px; overflow: hidden; }
.bar span { display: block; height: 100%; }
.legend { display: flex; gap: 12px; flex-wrap: wrap; color: var(--muted); font-size: 12px; margin: 10px 0; }
.legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px;
            vertical-align: -1px; }
tr.details td { background: #fbfcfd; padding: 10px 16px 14px; }
tr.details table { width: auto; margin-bottom: 8px; }
tr.details td td, tr.details th { border-bottom: 1px solid #eaeef2; padding: 3px 10px 3px 0; }
pre { white-space: pre-wrap; word-break: break-word; background: #f6f8fa; border: 1px solid var(--line);
      border-radius: 6px; padding: 8px 10px; margin: 4px 0 0; max-height: 160px; overflow: auto;
      font-size: 12px; }
a { color: #0969da; }
.ok-t { color: var(--ok); font-weight: 600; } .bad-t { color: var(--bad); font-weight: 600; }
.skip-t { color: var(--muted); }
footer { color: var(--muted); font-size: 12px; margin-top: 18px; }
</style>
</head>
<body>
<h1><span id="title">vkllm e2e matrix</span><span id="summary" class="pill"></span></h1>
<p class="meta" id="meta"></p>
<div class="gates" id="gates"></div>
<table id="matrix">
<thead><tr><th>#</th><th>Model</th><th>Recipe</th><th>Result</th><th>Stage</th><th>Gates / reason</th>
<th class="num">Size</th><th class="num">Prefill tok/s</th><th class="num">Decode tok/s</th>
<th class="num">Peak host</th><th class="num">Peak GPU</th><th>Time per stage</th></tr></thead>
<tbody id="rows"></tbody>
</table>
<div class="legend" id="legend"></div>
<footer>Click a row for its stages, logs and the runner's output. Written by <code>vkllm e2e</code>;
data also in results.tsv and results.json next to this file.</footer>
<script id="data" type="application/json">@DATA@</script>
<script>
(function () {
  "use strict";
  var d = JSON.parse(document.getElementById("data").textContent);
  var colors = { pull: "#8250df", lora: "#6e7781", golden: "#d4a72c", "export": "#0969da", verify: "#54aeff",
                 run: "#1a7f37", cpu: "#bc4c00", quality: "#cf222e" };
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmt(v, digits) { return v > 0 ? v.toFixed(digits) : "\u2013"; }
  function mib(b) { return b > 0 ? (b / 1048576).toFixed(1) + " MiB" : "\u2013"; }
  function mb(v) { return v > 0 ? v.toFixed(0) + " MB" : "\u2013"; }
  var passed = d.passed, total = d.cells.length;
  var twin = d.mode === "twins";
  document.getElementById("title").textContent =
      "vkllm e2e matrix \u2014 " + (twin ? "tiny twins" : "real models");
  var s = document.getElementById("summary");
  s.textContent = passed + " / " + total + " passed";
  s.className = "pill " + (passed === total && total > 0 ? "ok" : "bad");
  var dev = "";
  d.cells.forEach(function (c) { if (!dev && c.device) dev = c.device; });
  var meta = document.getElementById("meta");
  meta.appendChild(document.createTextNode(
      "Started " + d.started_at + " on " + d.host + (dev ? " \u00b7 Vulkan device: " + dev : "") +
      " \u00b7 wall time " + d.seconds.toFixed(1) + " s \u00b7 "));
  meta.appendChild(el("code", "", d.command));
  var g = document.getElementById("gates");
  g.appendChild(el("b", "", "Gates. "));
  g.appendChild(document.createTextNode(twin
      ? "Each cell's tiny twin (same architecture, config keys, tokenizer and recipe; seeded weights) is pulled from the loopback hub under the cell's model id and pinned revision, then:"
      : "Each cell is pulled at its pinned revision, then:"));
  var ul = el("ul");
  var items = twin ? [
      "golden: the fp32 twin's greedy ids equal the Hugging Face transformers golden, on the CPU reference backend (the pulled folder) and on Vulkan (the twin's non-quantized artifact); the served weights' sha256 is the golden's",
      "adapter cells (+ LoRA): the matrix generates a LoRA adapter for the pulled base and publishes it on a loopback hub; every export pulls it with --lora; the golden is the merged non-quantized export on the CPU reference, whose greedy ids must differ from the base golden's; verify must print the adapter; quality is measured against the merged model",
      "export + verify: the recipe's artifact, every op on the GPU backend, the size limit where the cell has one",
      "run: vkllm run on Vulkan, temperature 0, " + d.max_new_tokens + " new tokens, exit status 0, no validation message",
      "cpu: vkllm verify --agree: the CPU reference, teacher-forced along Vulkan's greedy tokens on the same artifact, has each Vulkan token as its argmax or within the recipe's near-tie margin of it (a capped number of such steps), Vulkan's top-k logits within the recipe's bound of the CPU's and the logits NMSE under its bound (docs/gates.md); the tokens checked are the run stage's. The two backends' free greedy texts may part after a near tie",
      "quality: mean KL and top-1 agreement against the fp32 twin within the recipe's gate (docs/quality.md)"] : [
      "export + verify: the recipe's artifact, every op on the GPU backend, the size limit where the cell has one; adapter cells (+ LoRA) export with the adapter the matrix generated and published on a loopback hub, and verify prints it",
      "run: vkllm run on Vulkan, temperature 0, " + d.max_new_tokens + " new tokens, exit status 0",
      "answer: stdout contains the expected answer (literal, case-insensitive, whole word)"];
  items.forEach(function (t) { ul.appendChild(el("li", "", t)); });
  g.appendChild(ul);
  var maxT = 0;
  d.cells.forEach(function (c) { var t = 0; c.stages.forEach(function (x) { t += x.seconds; }); maxT = Math.max(maxT, t); });
  var rows = document.getElementById("rows");
  d.cells.forEach(function (c) {
    var tr = el("tr", "cell-row " + (c.pass ? "pass" : "fail"));
    tr.setAttribute("data-cell", c.cell);
    tr.appendChild(el("td", "num", c.cell));
    var m = el("td");
    m.appendChild(el("div", "model", c.model));
    m.appendChild(el("div", "sub", "@" + c.revision.slice(0, 10) + (twin ? " \u00b7 twin " + c.twin : "")));
    if (c.lora) m.appendChild(el("div", "sub lora", "+ LoRA " + c.lora));
    tr.appendChild(m);
    var r = el("td");
    r.appendChild(el("div", "recipe", c.recipe));
    if (c.max_size && c.max_size !== "-") r.appendChild(el("div", "sub", "limit " + c.max_size));
    tr.appendChild(r);
    var res = el("td");
    res.appendChild(el("span", "badge " + (c.pass ? "pass" : "fail"), c.pass ? "PASS" : "FAIL"));
    tr.appendChild(res);
    tr.appendChild(el("td", "", c.stage));
    var why = el("td", "reason");
    if (c.pass) {  // one line per gate: what it compared and measured
      c.stages.forEach(function (x) {
        var gate = x.name === "lora" || x.name === "golden" || x.name === "cpu" || x.name === "quality" ||
                   (x.name === "run" && !twin) || (x.name === "verify" && ((c.max_size && c.max_size !== "-") || c.lora));
        if (!x.ran || !gate) return;
        var line = el("div", "gate");
        line.appendChild(el("span", "gname", x.name));
        line.appendChild(el("span", "", x.note));
        why.appendChild(line);
      });
    } else {
      why.textContent = c.reason;
    }
    tr.appendChild(why);
    tr.appendChild(el("td", "num", mib(c.artifact_bytes)));
    tr.appendChild(el("td", "num", fmt(c.prefill_tok_s, 1)));
    tr.appendChild(el("td", "num", fmt(c.decode_tok_s, 2)));
    tr.appendChild(el("td", "num", mb(c.peak_host_mb)));
    tr.appendChild(el("td", "num", mb(c.peak_gpu_mb)));
    var tb = el("td");
    var bar = el("div", "bar");
    var tot = 0;
    c.stages.forEach(function (x) {
      if (!x.ran) return;
      tot += x.seconds;
      var sp = el("span");
      sp.style.width = (maxT > 0 ? 100 * x.seconds / maxT : 0) + "%";
      sp.style.background = colors[x.name] || "#888";
      sp.title = x.name + " " + x.seconds.toFixed(2) + " s";
      bar.appendChild(sp);
    });
    tb.appendChild(bar);
    tb.appendChild(el("div", "sub", tot.toFixed(1) + " s"));
    tr.appendChild(tb);
    rows.appendChild(tr);
    var det = el("tr", "details");
    det.style.display = "none";
    var td = el("td");
    td.colSpan = 12;
    var st = el("table");
    var h = el("tr");
    ["stage", "result", "seconds", "process", "what it showed", "logs"].forEach(function (t) { h.appendChild(el("th", "", t)); });
    st.appendChild(h);
    c.stages.forEach(function (x) {
      var sr = el("tr");
      sr.appendChild(el("td", "", x.name));
      sr.appendChild(el("td", x.ran ? (x.ok ? "ok-t" : "bad-t") : "skip-t", x.ran ? (x.ok ? "ok" : "FAIL") : "not run"));
      sr.appendChild(el("td", "num", x.ran ? x.seconds.toFixed(2) : ""));
      sr.appendChild(el("td", "sub", x.status));
      sr.appendChild(el("td", "", x.note));
      var lg = el("td");
      x.logs.forEach(function (p, i) {
        var a = el("a", "", p.split("/").pop());
        a.href = p;
        if (i) lg.appendChild(document.createTextNode(" "));
        lg.appendChild(a);
      });
      sr.appendChild(lg);
      st.appendChild(sr);
    });
    td.appendChild(st);
    td.appendChild(el("div", "sub", "Runner stdout (the text the answer gate reads):"));
    td.appendChild(el("pre", "", c.answer || "(none)"));
    det.appendChild(td);
    rows.appendChild(det);
    tr.addEventListener("click", function () { det.style.display = det.style.display === "none" ? "" : "none"; });
  });
  var lgd = document.getElementById("legend");
  d.stage_names.forEach(function (n) {
    var sp = el("span");
    var i = el("i");
    i.style.background = colors[n] || "#888";
    sp.appendChild(i);
    sp.appendChild(document.createTextNode(n));
    lgd.appendChild(sp);
  });
})();
</script>
</body>
</html>
)HTML";

}  // namespace

std::string report_html(const MatrixResult& r) {
  // JSON inside <script>: '<', '>' and '&' only occur inside strings, where \u escapes are valid.
  const std::string j = r.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string data;
  data.reserve(j.size() + 64);
  for (char c : j) {
    if (c == '<')
      data += "\\u003c";
    else if (c == '>')
      data += "\\u003e";
    else if (c == '&')
      data += "\\u0026";
    else
      data += c;
  }
  std::string page = kPage;
  const std::string tag = "@DATA@";
  page.replace(page.find(tag), tag.size(), data);
  return page;
}

void write_report_html(const MatrixResult& r, const std::string& path) {
  const std::string page = report_html(r);
  AtomicFile f(path);
  f.write(page.data(), page.size());
  f.commit();
}

}  // namespace vkllm
