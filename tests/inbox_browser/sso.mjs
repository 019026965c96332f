// Single sign-on for /inbox in headless Chromium (through playwright-core): a person signs in
// through the test identity provider's own login page (tests/oidc/provider.mjs), approves a
// refund, and the call's history names them. Run by tests/inbox_browser.rs from .ci/node.
// SSO_BASE: toolgate's address; SSO_CALLER: a caller key, for the calls made over the API. The
// last line printed is a JSON summary the Rust test checks.
import { chromium } from "playwright-core";

const base = process.env.SSO_BASE;
const caller = process.env.SSO_CALLER;

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

async function call(tool, input) {
  const response = await fetch(`${base}/tools/${tool}/call`, {
    method: "POST",
    headers: { authorization: `Bearer ${caller}`, "content-type": "application/json" },
    body: JSON.stringify({ input }),
  });
  const body = await response.json();
  check(response.status === 202, `${tool} suspends: ${response.status} ${JSON.stringify(body)}`);
  return body.call_id;
}

// Signs in on a fresh browser (its own cookie jar, at toolgate and at the provider) as
// `username`, through the provider's login page; the page where it lands.
async function signIn(browser, username) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${base}/inbox`);
  check((await page.locator("#key").count()) === 0, "no key form: key_sign_in = false");
  const sso = page.locator("#sso");
  check((await sso.innerText()).includes("Sign in with corp"), "the sign-in offers the provider");
  await sso.click();
  // The provider's page, on another origin.
  await page.locator("#username").waitFor();
  check(!page.url().startsWith(base), `at the provider: ${page.url()}`);
  await page.locator("#username").fill(username);
  await Promise.all([page.waitForURL((url) => url.href.startsWith(base)), page.locator("#sign-in").click()]);
  await page.waitForLoadState("load");
  return { context, page };
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
const seen = { steps: [] };
try {
  const refund = await call("issue_refund", { order_id: "o-sso", amount_cents: 25000, reason: "broken on arrival" });
  const question = await call("ask_human", { question: "Ship the spare part?" });

  // Sam's grants give no approver's role: signed in at the provider, refused here.
  const sam = await signIn(browser, "sam");
  const refusal = await sam.page.locator("#key-error").innerText();
  check(refusal.includes("may not decide"), `sam is refused: ${refusal}`);
  check(!(await sam.page.content()).includes("Signed in as"), "no session for sam");
  await sam.context.close();
  seen.steps.push("no grant refused");

  // Dana, of finance, decides refunds only.
  const dana = await signIn(browser, "dana");
  const page = dana.page;
  await page.getByText("Signed in as").waitFor();
  const who = await page.locator(".who strong").innerText();
  check(who === "Dana Reyes (corp:dana)", `the header names the person: ${who}`);
  check(page.url() === `${base}/inbox`, `moved on to the inbox: ${page.url()}`);
  const queue = await page.content();
  check(queue.includes(`/inbox/calls/${refund}`), "the refund is in dana's queue");
  check(!queue.includes(question), "the question, outside her decides, is not");
  seen.steps.push("signed in as a person");

  await page.locator(`a[href="/inbox/calls/${refund}"]`).first().click();
  await page.getByRole("heading", { name: "Approve" }).waitFor();
  await page.locator('[id="approve-f/note"]').fill("Photos checked.");
  await page.getByRole("button", { name: "Approve", exact: true }).click();
  await page.locator("#confirm").waitFor();
  await page.getByRole("button", { name: "Approve and run issue_refund" }).click();
  await page.getByText("Approved. issue_refund ran and completed.").waitFor();
  const history = await page.locator("main").innerText();
  check(history.includes("Approved by Dana Reyes (corp:dana)"), `the history names her: ${history}`);
  seen.steps.push("approved, history names her");
  seen.refund = refund;

  // Signed out, the key form stays off: the way back in is the provider.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.locator("#sso").waitFor();
  seen.steps.push("signed out");
  seen.steps.push("done");
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
