// Validates replies against their JSON schemas with ajv (the independent reference of the
// constrained decoding tests that run without a server): argv[2] is a JSON file holding
// [{"schema": ..., "text": "..."}, ...]. Prints one line per reply; exit 1 if any reply does not
// parse as JSON or does not validate.
import Ajv from "ajv";
import { readFileSync } from "node:fs";

const ajv = new Ajv({strict: false, allErrors: true});
let bad = 0;
const replies = JSON.parse(readFileSync(process.argv[2], "utf8"));
replies.forEach(({schema, text}, i) => {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    console.log(`FAIL ${i}: does not parse (${e.message}): ${text}`);
    ++bad;
    return;
  }
  if (ajv.validate(schema, value)) {
    console.log(`ok ${i}: ${text}`);
  } else {
    console.log(`FAIL ${i}: ${ajv.errorsText()}: ${text}`);
    ++bad;
  }
});
if (replies.length === 0) { console.log("FAIL: no replies"); ++bad; }
process.exit(bad ? 1 : 0);
