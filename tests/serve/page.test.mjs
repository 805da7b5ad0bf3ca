// The chat page of `vkllm serve` (GET /) in Debian's chromium, headless, driven by playwright-core
// (run by test_serve). Types VKLLM_QUESTION with temperature 0 and VKLLM_N tokens, waits for the
// streamed reply, checks it equals VKLLM_ANSWER (`vkllm run --chat`'s) and that it arrived in
// several updates, and writes a screenshot to VKLLM_SCREENSHOT.
import {chromium} from "playwright-core";

const fail = m => { console.log("FAIL " + m); process.exitCode = 1; };
const browser = await chromium.launch({executablePath: process.env.VKLLM_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]});
try {
  const page = await browser.newPage({viewport: {width: 900, height: 600}});
  page.on("pageerror", e => fail("page error: " + e.message));
  await page.goto(process.env.VKLLM_URL + "/");
  await page.waitForFunction(() => !document.getElementById("model").textContent.includes("connecting"));
  await page.fill("#temperature", "0");
  await page.fill("#max_tokens", process.env.VKLLM_N);
  // Count the updates of the reply's text while it streams.
  await page.evaluate(() => {
    window.updates = 0;
    new MutationObserver(() => window.updates++).observe(document.getElementById("log"), {subtree: true, childList: true, characterData: true});
  });
  await page.fill("#input", process.env.VKLLM_QUESTION);
  await page.press("#input", "Enter");
  await page.waitForSelector(".assistant[data-state=done]", {timeout: 120000});
  const reply = await page.textContent(".assistant");
  const updates = await page.evaluate(() => window.updates);
  if (reply !== process.env.VKLLM_ANSWER) fail(`reply ${JSON.stringify(reply)} != ${JSON.stringify(process.env.VKLLM_ANSWER)}`);
  if (updates < 4) fail(`the reply arrived in ${updates} DOM updates (not streamed)`);
  const user = await page.textContent(".user");
  if (user !== process.env.VKLLM_QUESTION) fail(`the user message shows ${JSON.stringify(user)}`);
  await page.screenshot({path: process.env.VKLLM_SCREENSHOT});
  if (!process.exitCode) console.log(`ok   the page streamed the greedy reply in ${updates} updates`);
} finally {
  await browser.close();
}
