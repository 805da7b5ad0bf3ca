// The node tests' report (read by test_serve): check() runs one named async check and prints
// "ok   NAME" or "FAIL NAME: error"; done() exits non-zero when any check failed.
let failed = 0;
export async function check(name, fn) {
  try {
    await fn();
    console.log("ok   " + name);
  } catch (e) {
    failed++;
    console.log("FAIL " + name + ": " + (e && e.stack || e));
  }
}
export function done() {
  process.exit(failed ? 1 : 0);
}
