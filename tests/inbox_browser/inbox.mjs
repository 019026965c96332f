// Drives toolgate's /inbox in headless Chromium (Debian's, through playwright-core), as a person
// would: run by tests/inbox_browser.rs from .ci/node, so that the import resolves. The server's
// address and keys come from the environment; API calls are made with fetch and a bearer token.
// The last line printed is a JSON summary the Rust test checks.
//
// INBOX_PHASE: `main` (every scenario, hostile strings included), `decide` (a realistic queue:
// reading, confirming and moving on; the README's screenshots are taken here, so no test string
// shows in them), `restart-1` (sign in, save the cookies to INBOX_STATE), `restart-2` (open the
// inbox with the saved cookies, after the server restarted).
// INBOX_SCREENSHOTS: a directory to write the README's screenshots to (decide phase only).
import { chromium } from "playwright-core";

const base = process.env.INBOX_BASE;
const phase = process.env.INBOX_PHASE || "main";
const approver = process.env.INBOX_APPROVER;
const caller = process.env.INBOX_CALLER;
const otherApprover = process.env.INBOX_OTHER_APPROVER;
const shots = process.env.INBOX_SCREENSHOTS || "";
const payload = `<script>alert(1)</script>"><img src=x onerror=alert(1)>`;

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

async function api(method, path, token, body) {
  const response = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

async function suspend(tool, input) {
  const { status, body } = await api("POST", `/tools/${tool}/call`, caller, { input });
  check(status === 202, `${tool} suspends: ${status} ${JSON.stringify(body)}`);
  return body.call_id;
}

async function record(callId) {
  const { status, body } = await api("GET", `/calls/${callId}`, approver);
  check(status === 200, `the call ${callId} is read`);
  return body;
}

function actor(call, kind) {
  const event = call.events.find((e) => e.kind === kind);
  return event ? event.actor : undefined;
}

const byId = (page, id) => page.locator(`[id="${id}"]`);

async function signIn(page, key) {
  await page.goto(`${base}/inbox`);
  // With the keyboard alone: focus the key field, type, press Enter.
  await page.keyboard.press("Tab"); // the skip link
  for (let i = 0; i < 6; i += 1) {
    if (await page.evaluate(() => document.activeElement && document.activeElement.id === "key")) break;
    await page.keyboard.press("Tab");
  }
  check(await page.evaluate(() => document.activeElement.id === "key"), "the key field is reachable by Tab");
  await page.keyboard.type(key);
  await Promise.all([page.waitForLoadState("load"), page.keyboard.press("Enter")]);
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
const seen = { phase, dialogs: [], steps: [] };
try {
  if (phase === "restart-1") {
    const context = await browser.newContext();
    const page = await context.newPage();
    await signIn(page, approver);
    await page.getByText("Signed in as").waitFor();
    await context.storageState({ path: process.env.INBOX_STATE });
    seen.steps.push("signed in, cookies saved");
  } else if (phase === "restart-2") {
    const context = await browser.newContext({ storageState: process.env.INBOX_STATE });
    const page = await context.newPage();
    await page.goto(`${base}/inbox`);
    check((await page.locator(".who strong").textContent()) === "finance-ops", "still signed in after the restart");
    check((await page.locator("#key").count()) === 0, "no sign-in form");
    seen.steps.push("still signed in after the restart");
  } else if (phase === "decide") {
    const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    const page = await context.newPage();
    page.on("dialog", async (dialog) => {
      seen.dialogs.push(dialog.message());
      await dialog.dismiss();
    });
    // What an approver of refunds finds on a Monday morning.
    const refund = await suspend("issue_refund", {
      order_id: "o-1042", amount_cents: 1999900, reason: "Espresso machine arrived with a cracked boiler",
    });
    const question = await suspend("ask_human", {
      question: "May I send the overdue-invoice reminder to Acme Corp today?",
    });
    const packing = await suspend("pack_order", { order_id: "o-1043" });
    const small = await suspend("issue_refund", {
      order_id: "o-1047", amount_cents: 12550, reason: "Wrong size delivered",
    });
    await signIn(page, approver);
    await page.getByText("Signed in as").waitFor();
    const queueExpiry = (await page.locator(".queue .expiry").allTextContents()).map((t) => t.trim());
    check(queueExpiry.length === 4 && queueExpiry.every((t) => t === "Never expires"),
      `the queue's expiry wording: ${JSON.stringify(queueExpiry)}`);
    check(!(await page.content()).includes("no expiry"), "no other wording in the queue");
    check((await page.locator(".queue").textContent()).includes("A refund of $19,999.00 for order o-1042"),
      "the reason in dollars");
    if (shots) await page.screenshot({ path: `${shots}/inbox-queue.png`, fullPage: true });
    seen.steps.push("realistic queue, one expiry wording");

    // One refund: its input as a readable list, the JSON folded away, the same expiry wording.
    await page.locator(`a[href$="/calls/${refund}"]`).click();
    await page.getByRole("heading", { name: "Approve" }).waitFor();
    const input = await page.locator(".readable").first().innerText();
    check(input.includes("1,999,900"), `digits grouped: ${input}`);
    check(input.includes("Amount cents") && input.includes("How much to refund, in cents."), `labelled: ${input}`);
    check(input.includes("Order id") && input.includes("o-1042"), `the order: ${input}`);
    const json = page.locator("details.json-view").first();
    check(!(await json.evaluate((d) => d.open)), "the raw JSON starts folded");
    await json.locator("summary").click();
    check((await json.locator("pre").innerText()).includes("\"amount_cents\": 1999900"), "the raw JSON, one click away");
    await json.locator("summary").click();
    check((await page.locator(".expiry").first().innerText()).trim() === "Never expires", "the call page's expiry wording");
    check(!(await page.locator("#complete").evaluate((d) => d.open)), "complete externally starts folded");
    // Times in the viewer's local time, UTC on hover.
    const when = page.locator("main time").first();
    check(!(await when.textContent()).includes("UTC"), `local time: ${await when.textContent()}`);
    check((await when.getAttribute("title")).endsWith(" UTC"), "UTC on hover");
    check((await page.locator(".consequence.write").first().innerText()).includes("toolgate does not undo it"),
      "what approving a write does");
    await byId(page, "approve-f/note").fill("Photos checked: the boiler is cracked. The customer keeps the machine.");
    await page.evaluate(() => document.activeElement.blur());
    if (shots) await page.screenshot({ path: `${shots}/inbox-approval.png`, fullPage: true });
    seen.steps.push("readable input");

    // Approve: the first submit asks for a confirmation and approves nothing.
    await page.getByRole("button", { name: "Approve", exact: true }).click();
    await page.locator("#confirm").waitFor();
    check((await record(refund)).status === "suspended", "still suspended after the first submit");
    const confirm = await page.locator("#confirm").innerText();
    check(confirm.includes("Approving runs issue_refund now: Refunds an order."), `says what happens: ${confirm}`);
    check(confirm.includes("Photos checked"), "shows the answer");
    await page.setViewportSize({ width: 360, height: 800 });
    check(await page.evaluate(() => document.documentElement.scrollWidth <= 360), "the confirmation fits 360 px");
    await page.setViewportSize({ width: 1100, height: 900 });
    check(confirm.includes("A refund of $19,999.00 for order o-1042"), "says what is approved");
    if (shots) await page.locator("#confirm").screenshot({ path: `${shots}/inbox-confirm.png` });
    seen.steps.push("confirm step approves nothing");

    // The second submit approves; a banner says what happened and leads to the next one.
    await page.getByRole("button", { name: "Approve and run issue_refund" }).click();
    await page.locator(".banner").waitFor();
    check((await page.locator(".banner-text").innerText()).trim() === "Approved. issue_refund ran and completed.",
      `the banner: ${await page.locator(".banner-text").innerText()}`);
    const approved = await record(refund);
    check(approved.status === "completed", `approved on the second submit: ${approved.status}`);
    check(actor(approved, "approved") === "finance-ops", "the approval's actor");
    check(approved.output.amount_cents === 1999900, "the refund was issued");
    const history = await page.locator(".history").innerText();
    check(history.includes("Approved by finance-ops: Photos checked: the boiler is cracked.") && history.includes("Ran again with the approval and completed."),
      `the history in sentences: ${history}`);
    check(new URL(page.url()).pathname === `/inbox/calls/${refund}`, "the URL names the call");
    check(!page.url().includes("sus_"), "no token in the URL");
    const next = page.locator("#next-approval");
    check((await next.getAttribute("href")).endsWith(`/calls/${question}`), "next: the oldest waiting approval");
    seen.steps.push("confirmed, banner, next");

    // On to the next one; a rejection leads on again.
    await next.click();
    await page.locator("#reject-reason").fill("Wait until the account manager has called them.");
    await page.getByRole("button", { name: "Reject" }).click();
    await page.locator(".banner").waitFor();
    check((await record(question)).status === "rejected", "rejected");
    check((await page.locator("#next-approval").getAttribute("href")).endsWith(`/calls/${packing}`), "next again");
    seen.steps.push("rejected, next");

    // The last one decided: the banner leads back to the queue, which is empty.
    const packed = await api("POST", `/approvals/${(await record(packing)).suspension.token}/reject`, otherApprover, {});
    check(packed.status === 200, `rejected over the API: ${packed.status}`);
    await page.goto(`${base}/inbox/calls/${small}`);
    await page.getByRole("button", { name: "Approve", exact: true }).click();
    await page.locator("#confirm").waitFor();
    check((await record(small)).status === "suspended", "a write waits for its confirmation");
    await page.getByRole("button", { name: "Approve and run issue_refund" }).click();
    await page.locator(".banner").waitFor();
    check((await record(small)).status === "completed", "the small refund was issued");
    const back = page.locator("#next-approval");
    check((await back.innerText()).trim() === "Back to the queue", `none left: ${await back.innerText()}`);
    await back.click();
    await page.getByText("Nothing waits for a person").waitFor();
    seen.steps.push("none left, back to the queue");
    seen.steps.push("done");
  } else {
    const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    const page = await context.newPage();
    page.on("dialog", async (dialog) => {
      seen.dialogs.push(dialog.message());
      await dialog.dismiss();
    });

    // A caller key is refused, with a message.
    await signIn(page, caller);
    await page.getByText("This is a caller key").waitFor();
    check((await page.locator(".who").count()) === 0, "the caller is not signed in");
    seen.steps.push("caller refused");

    // An approver signs in; the open queue shows a suspension made over the API, no reload.
    await signIn(page, approver);
    await page.getByText("Signed in as").waitFor();
    await page.evaluate(() => { window.notReloaded = true; });
    const asked = await suspend("ask_human", { question: `Ship the release? ${payload}` });
    await page.locator(`a[href$="/calls/${asked}"]`).waitFor({ timeout: 20000 });
    check(await page.evaluate(() => window.notReloaded === true), "the queue updated without a reload");
    check((await page.locator(".queue").textContent()).includes("<script>alert(1)</script>"), "the payload shows as text");
    seen.steps.push("live queue");

    // A suspension made after the queue was rendered, before its script opened the stream (the
    // script held back until then): the queue catches up once the stream opens.
    let release;
    const held = new Promise((resolve) => { release = resolve; });
    const script = /\/inbox\/assets\/inbox\.[0-9a-f]+\.js$/;
    await page.route(script, async (route) => { await held; await route.continue(); });
    await page.goto(`${base}/inbox`, { waitUntil: "commit" });
    const early = await suspend("ask_human", { question: "Asked before the stream opened?" });
    release();
    await page.locator(`a[href$="/calls/${early}"]`).waitFor({ timeout: 10000 });
    await page.unroute(script);
    seen.steps.push("caught up on open");

    // A refund with payloads in its input, for the screenshots and the escaping check.
    const refund = await suspend("issue_refund", { order_id: "o-1042", amount_cents: 25000, reason: "Damaged in transit" });
    await page.locator(`a[href$="/calls/${refund}"]`).waitFor({ timeout: 20000 });

    // Readable at 360 px wide: nothing wider than the screen.
    await page.setViewportSize({ width: 360, height: 800 });
    check(await page.evaluate(() => document.documentElement.scrollWidth <= 360), "the queue fits 360 px");
    await page.setViewportSize({ width: 1100, height: 900 });

    // Open it; an answer the schema refuses shows its message at the field; fix it; approve.
    await page.locator(`a[href$="/calls/${asked}"]`).click();
    await page.getByRole("heading", { name: "Approve" }).waitFor();
    await page.getByRole("button", { name: "Approve" }).click();
    await byId(page, "approve-f/answer-error").waitFor();
    check((await byId(page, "approve-f/answer-error").textContent()).includes("required"), "the message is at the field");
    check((await byId(page, "approve-f/answer").getAttribute("aria-invalid")) === "true", "the field is marked invalid");
    await byId(page, "approve-f/answer").fill("Yes, ship it.");
    await page.getByRole("button", { name: "Approve" }).click();
    await page.locator(".status-completed").waitFor();
    const approved = await record(asked);
    check(approved.status === "completed", `approved call is completed: ${approved.status}`);
    check(actor(approved, "approved") === "finance-ops", "the signed-in key is the actor");
    check(approved.output.answer === "Yes, ship it.", "the answer reached the tool");
    seen.steps.push("refused, fixed, approved");

    // Reject, with a reason.
    const risky = await suspend("ask_human", { question: "Drop the production database?" });
    await page.goto(`${base}/inbox/calls/${risky}`);
    await page.locator("#reject-reason").fill(`Never. ${payload}`);
    await page.getByRole("button", { name: "Reject" }).click();
    await page.locator(".status-rejected").waitFor();
    const rejected = await record(risky);
    check(rejected.status === "rejected", "rejected");
    check(actor(rejected, "rejected") === "finance-ops", "the rejection's actor");
    check(rejected.error.message.includes("Never."), "the reason is recorded");
    seen.steps.push("rejected");

    // Complete issue_refund externally through its output schema's form.
    await page.goto(`${base}/inbox/calls/${refund}`);
    await page.setViewportSize({ width: 360, height: 800 });
    check(await page.evaluate(() => document.documentElement.scrollWidth <= 360), "an approval fits 360 px");
    await page.setViewportSize({ width: 1100, height: 900 });
    // Folded away until opened.
    check(!(await page.locator("#complete").evaluate((d) => d.open)), "complete externally starts folded");
    await page.locator("#complete > summary").click();
    await byId(page, "complete-f/refund_id").fill("rf_bank_7781");
    await byId(page, "complete-f/order_id").fill("o-1042");
    await byId(page, "complete-f/amount_cents").fill("25000");
    check((await byId(page, "complete-f/status").inputValue()) === "0", "the one allowed status is chosen already");
    await page.getByRole("button", { name: "Complete externally" }).click();
    await page.locator(".status-completed").waitFor();
    const completed = await record(refund);
    check(completed.status === "completed", "completed externally");
    check(completed.output.refund_id === "rf_bank_7781", "with the receipt typed");
    check(actor(completed, "completed_externally") === "finance-ops", "the completion's actor");
    seen.steps.push("completed externally");

    // Nothing typed is lost to a live update: the queue's filter stays chosen while its list
    // changes; a call's page keeps what was typed when someone else decides the call, and says so.
    await page.goto(`${base}/inbox`);
    await page.locator("#tool").selectOption("issue_refund");
    const another = await suspend("ask_human", { question: "Another one?" });
    await page.locator(`a[href$="/calls/${another}"]`).waitFor({ timeout: 20000 });
    check((await page.locator("#tool").inputValue()) === "issue_refund", "the filter stays chosen");
    await page.goto(`${base}/inbox/calls/${another}`);
    await page.locator("#reject-reason").fill("Half-typed reason");
    const token = (await record(another)).suspension.token;
    const elsewhere = await api("POST", `/approvals/${token}/approve`, otherApprover, { input: { answer: "done" } });
    check(elsewhere.status === 200, `approved elsewhere: ${elsewhere.status}`);
    await page.getByText("completed now").waitFor({ timeout: 20000 });
    check((await page.locator("#reject-reason").inputValue()) === "Half-typed reason", "what was typed is kept");
    await page.getByRole("button", { name: "Reject" }).click();
    await page.getByText("already decided: approved by on-call").waitFor();
    check((await record(another)).status === "completed", "the late rejection changed nothing");
    seen.steps.push("typing kept, decided elsewhere");

    // Rows of an array: added and removed by the page's script.
    const packing = await suspend("pack_order", { order_id: "o-7" });
    await page.goto(`${base}/inbox/calls/${packing}`);
    await page.getByRole("button", { name: "Add to boxes" }).click();
    await byId(page, "approve-f/boxes/0/label").fill("first");
    await page.getByRole("button", { name: "Add to boxes" }).click();
    await byId(page, "approve-f/boxes/1/label").fill("second");
    await byId(page, "approve-f/boxes/1/weight_kg").fill("2.5");
    await page.getByRole("button", { name: "Add to boxes" }).click();
    await byId(page, "approve-f/boxes/2/label").fill("third");
    await page.locator('[data-row]:has([id="approve-f/boxes/0/label"]) [data-remove-row]').click();
    await page.getByRole("button", { name: "Approve" }).click();
    await page.locator(".status-completed").waitFor();
    const packed = await record(packing);
    check(JSON.stringify(packed.output) === JSON.stringify({ boxes: [{ label: "second", weight_kg: 2.5 }, { label: "third" }] }),
      `array rows: ${JSON.stringify(packed.output)}`);
    seen.steps.push("array rows");

    // A POST without the CSRF token, from the signed-in browser: 403, nothing decided.
    const pending = await suspend("ask_human", { question: "CSRF?" });
    const forged = await page.request.post(`${base}/inbox/calls/${pending}/approve`, {
      form: { "v/answer": "forged" }, maxRedirects: 0,
    });
    check(forged.status() === 403, `a form without its token is 403: ${forged.status()}`);
    check((await record(pending)).status === "suspended", "nothing was decided");
    seen.steps.push("csrf 403");

    // Every page visited with payloads in it: no dialog fired.
    await page.goto(`${base}/inbox`);
    await page.goto(`${base}/inbox/calls/${risky}`);
    await page.waitForTimeout(300);
    seen.steps.push("done");
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
