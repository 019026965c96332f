// Follows decision links in headless Chromium (Debian's, through playwright-core), as the person
// a message reached would: run by tests/links/browser.rs from .ci/node, so that the import
// resolves. LINK_ANSWER: a link to ask_human's approval; LINK_WRITE: a link to issue_refund's (a
// write, which asks a confirmation); LINK_BASE and LINK_APPROVER read the calls back over REST.
// The last line printed is a JSON summary the Rust test checks.
import { chromium } from "playwright-core";

const base = process.env.LINK_BASE;
const approver = process.env.LINK_APPROVER;

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

async function record(callId) {
  const response = await fetch(`${base}/calls/${callId}`, {
    headers: { authorization: `Bearer ${approver}` },
  });
  check(response.status === 200, `the call ${callId} is read`);
  return response.json();
}

function actor(call, kind) {
  const event = call.events.find((e) => e.kind === kind);
  return event ? event.actor : undefined;
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
const seen = { steps: [], errors: [] };
try {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on("pageerror", (error) => seen.errors.push(String(error)));

  // An answer to give: the page shows the question, the person types and approves.
  const answerCall = process.env.LINK_ANSWER_CALL;
  const opened = await page.goto(process.env.LINK_ANSWER);
  check(opened.status() === 200, `the link opens: ${opened.status()}`);
  check((await page.locator("h1 .tool").textContent()) === "ask_human", "the tool is named");
  check((await page.getByText("Signed in as").count()) === 0, "no sign-in");
  check((await record(answerCall)).status === "suspended", "opening decided nothing");
  await page.locator('#approve-form [name="v/answer"]').fill("yes, from the link");
  await Promise.all([
    page.waitForLoadState("load"),
    page.locator("#approve-form button[type=submit]").click(),
  ]);
  await page.locator("#banner").waitFor();
  check((await page.locator(".banner-text").textContent()).startsWith("Approved."), "the banner says it");
  let call = await record(answerCall);
  check(call.status === "completed", `approved and completed: ${call.status}`);
  check(actor(call, "approved") === "finance-ops", "under the person's name");
  seen.steps.push("answered and approved");

  const again = await page.goto(process.env.LINK_ANSWER);
  check(again.status() === 409, `the link serves once: ${again.status()}`);
  check((await page.locator("#refusal").getAttribute("data-refusal")) === "used", "the used page");
  seen.steps.push("used");

  // A write: approving asks a confirmation first, which decides nothing by itself.
  const writeCall = process.env.LINK_WRITE_CALL;
  await page.goto(process.env.LINK_WRITE);
  await Promise.all([
    page.waitForLoadState("load"),
    page.locator("#approve-form button[type=submit]").click(),
  ]);
  await page.locator("#confirm-form").waitFor();
  check((await record(writeCall)).status === "suspended", "the confirmation step decided nothing");
  await Promise.all([
    page.waitForLoadState("load"),
    page.locator('#confirm-form button[name="confirm"]').click(),
  ]);
  await page.locator("#banner").waitFor();
  call = await record(writeCall);
  check(call.status === "completed", `the write ran: ${call.status}`);
  check(actor(call, "approved") === "finance-ops", "under the person's name");
  seen.steps.push("write confirmed");
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
