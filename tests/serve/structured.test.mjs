// Structured output against a running `vkllm serve` (started by test_serve_structured) through the
// official OpenAI SDK: a seeded table of random JSON schemas (within the subset docs/serve.md
// lists), each asked for greedy and sampled (some streamed); every reply must parse with
// JSON.parse and validate with ajv (the independent reference). json_object mode must give
// objects; unsupported keywords must be a 400 naming the keyword.
// Env: VKLLM_URL, VKLLM_MODEL, VKLLM_SCHEMAS (how many random schemas), VKLLM_MAX_TOKENS.
// Prints one line per check; exit 1 if any failed.
import OpenAI from "openai";
import Ajv from "ajv";
import assert from "node:assert/strict";

const url = process.env.VKLLM_URL, model = process.env.VKLLM_MODEL;
const nSchemas = Number(process.env.VKLLM_SCHEMAS || 50);
const maxTokens = Number(process.env.VKLLM_MAX_TOKENS || 96);
const client = new OpenAI({baseURL: url + "/v1", apiKey: "none", maxRetries: 0, timeout: 300000});
const ajv = new Ajv({strict: false, allErrors: true});
import { check, done } from "./check.mjs";

// mulberry32: a seeded generator, so the table is the same on every run.
let seed = 20260305;
function rand() {
  seed |= 0; seed = seed + 0x6D2B79F5 | 0;
  let t = Math.imul(seed ^ seed >>> 15, 1 | seed);
  t = t + Math.imul(t ^ t >>> 7, 61 | t) ^ t;
  return ((t ^ t >>> 14) >>> 0) / 4294967296;
}
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = a => a[int(0, a.length - 1)];
const words = ["id", "name", "count", "ok", "tags", "when", "x", "y", "note", "kind", "score", "é"];

function scalar() {
  switch (int(0, 8)) {
    case 0: { const s = {type: "string"}; if (rand() < 0.5) s.minLength = int(0, 3); if (rand() < 0.7) s.maxLength = (s.minLength || 0) + int(0, 10); return s; }
    case 1: { const s = {type: "integer"}; if (rand() < 0.6) s.minimum = int(-50, 50); if (rand() < 0.6) s.maximum = (s.minimum ?? -60) + int(0, 200); if (rand() < 0.2) { s.exclusiveMaximum = (s.maximum ?? 100) + 1; delete s.maximum; } return s; }
    case 2: { const s = {type: "number"}; if (rand() < 0.6) s.minimum = int(-1000, 1000) / 100; if (rand() < 0.6) s.maximum = (s.minimum ?? -20) + int(1, 5000) / 100; if (rand() < 0.3) s.exclusiveMinimum = (s.minimum ?? -30) - 0.5; return s; }
    case 3: return {type: "boolean"};
    case 4: return {type: "null"};
    case 5: return {enum: [pick(["red", "green", "blue"]), int(0, 9), null, "a \"q\""].slice(0, int(1, 4))};
    case 6: return {const: pick(["fixed", 42, true, {k: [1, "v"]}])};
    case 7: return {type: pick([["string", "null"], ["integer", "boolean"], ["number", "null"]])};
    default: return {oneOf: [{type: "string", maxLength: 4}, {type: "integer", minimum: 0, maximum: 99}]};
  }
}
function schema(depth) {
  const r = depth >= 2 ? 0 : rand();
  if (r < 0.45) return scalar();
  if (r < 0.7) {
    const s = {type: "array", items: schema(depth + 1)};
    if (rand() < 0.5) s.minItems = int(0, 2);
    s.maxItems = (s.minItems || 0) + int(0, 3);
    return s;
  }
  if (r < 0.8) return {anyOf: [schema(depth + 1), {type: "null"}]};
  const props = {}, names = [];
  for (let i = int(1, 3); i > 0; --i) {
    const k = pick(words);
    if (!(k in props)) { props[k] = schema(depth + 1); names.push(k); }
  }
  const s = {type: "object", properties: props, required: names.filter(() => rand() < 0.6)};
  const extra = rand();
  if (extra < 0.5) s.additionalProperties = false;
  else if (extra < 0.6) s.additionalProperties = {type: "integer"};
  return s;
}
function topSchema() {  // a top-level object, as the response_format json_schema examples have
  const s = schema(1);
  return s.type === "object" ? s : {type: "object", properties: {value: s}, required: ["value"], additionalProperties: false};
}

const question = [{role: "user", content: "Reply in JSON."}];
async function reply(format, sampled, stream, i) {
  const params = {model, messages: question, max_tokens: maxTokens, response_format: format,
                  ...(sampled ? {temperature: 1.0, top_p: 0.95, seed: 1000 + i} : {temperature: 0})};
  if (!stream) {
    const r = await client.chat.completions.create(params);
    return r.choices[0].message.content;
  }
  let text = "";
  for await (const c of await client.chat.completions.create({...params, stream: true}))
    for (const ch of c.choices) if (ch.delta.content) text += ch.delta.content;
  return text;
}
function validates(s, text) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new Error(`not JSON: ${JSON.stringify(text)} (${e.message})`);
  }
  const ok = ajv.validate(s, v);
  assert.ok(ok, `${JSON.stringify(text)} does not validate against ${JSON.stringify(s)}: ${ajv.errorsText()}`);
  return v;
}

const t0 = Date.now();
const table = Array.from({length: nSchemas}, () => topSchema());
table.push({$defs: {pt: {type: "object", properties: {x: {type: "integer"}, y: {type: "integer"}}, required: ["x", "y"], additionalProperties: false}},
            type: "object", properties: {a: {$ref: "#/$defs/pt"}, b: {$ref: "#/$defs/pt"}}, required: ["a"], additionalProperties: false});
for (let i = 0; i < table.length; ++i) {
  const s = table[i];
  const format = {type: "json_schema", json_schema: {name: `s${i}`, schema: s, strict: true}};
  await check(`schema ${i} greedy`, async () => validates(s, await reply(format, false, i % 4 === 1, i)));
  await check(`schema ${i} sampled`, async () => validates(s, await reply(format, true, i % 2 === 0, i)));
}
for (let i = 0; i < 4; ++i)
  await check(`json_object ${i % 2 ? "sampled" : "greedy"}`, async () => {
    const v = validates({type: "object"}, await reply({type: "json_object"}, i % 2 === 1, i >= 2, i));
    assert.ok(v !== null && !Array.isArray(v));
  });
await check("/v1/completions with json_schema", async () => {
  const s = {type: "object", properties: {n: {type: "integer", minimum: 1, maximum: 9}}, required: ["n"], additionalProperties: false};
  const r = await client.completions.create({model, prompt: "JSON:", max_tokens: 24, temperature: 0,
                                              response_format: {type: "json_schema", json_schema: {name: "n", schema: s}}});
  validates(s, r.choices[0].text);
});
for (const [kw, s] of [["pattern", {type: "object", properties: {a: {type: "string", pattern: "^x"}}}],
                       ["format", {type: "string", format: "email"}],
                       ["not", {not: {type: "null"}}],
                       ["patternProperties", {type: "object", patternProperties: {"^a": {}}}]])
  await check(`unsupported '${kw}' is a 400 naming it`, async () => {
    try {
      await reply({type: "json_schema", json_schema: {name: "bad", schema: s}}, false, false, 0);
    } catch (e) {
      assert.equal(e.status, 400, `${e.status}: ${e.message}`);
      assert.ok(e.message.includes(`'${kw}'`), e.message);
      return;
    }
    assert.fail("no error");
  });
await check("a bad response_format type is a 400", async () => {
  try {
    await reply({type: "yaml"}, false, false, 0);
  } catch (e) {
    assert.equal(e.status, 400);
    return;
  }
  assert.fail("no error");
});
console.log(`${table.length} schemas in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
done();
