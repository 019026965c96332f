// DNS rebinding, in headless Chromium: a page on a foreign name (`rebind.test`, which the
// browser resolves to 127.0.0.1, as a rebinding DNS server would once the page loaded) tries
// to read and change a toolgate running with auth off. Run by tests/inbox_browser.rs from
// .ci/node. The last line printed is a JSON summary of what each attempt got.
import { chromium } from "playwright-core";

const port = process.env.REBIND_PORT;
const foreign = `http://rebind.test:${port}`;
const own = `http://127.0.0.1:${port}`;

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--host-resolver-rules=MAP rebind.test 127.0.0.1"],
});
const seen = {};
try {
  const page = await browser.newPage();
  seen.inbox_navigation = (await page.goto(`${foreign}/inbox`)).status();
  // The attacker's page, once its name resolves to this machine: a document of this server
  // under the foreign name (the health probe, which answers any Host), so that the requests
  // below go from a local page to a local address, as after a real rebinding.
  const probe = await page.goto(`${foreign}/healthz`);
  seen.probe = probe.status();
  // Same-origin requests, as far as the browser knows: only the Host names the foreign name.
  const attempts = await page.evaluate(async (own) => {
    const out = {};
    const json = { "content-type": "application/json" };
    const tries = {
      list_tools: ["/tools", {}],
      call_echo: ["/tools/echo/call", { method: "POST", headers: json, body: '{"input":{"text":"pwned"}}' }],
      send_email: [
        "/tools/send_email/call",
        { method: "POST", headers: json, body: '{"input":{"to":"a@example.com","subject":"s","body":"b"}}' },
      ],
      list_approvals: ["/approvals", {}],
      list_calls: ["/calls", {}],
      openapi: ["/openapi.json", {}],
      inbox: ["/inbox", {}],
      sign_in: ["/inbox/sign-in", { method: "POST", body: new URLSearchParams({ key: "x", csrf: "y" }) }],
      mcp: [
        "/mcp",
        {
          method: "POST",
          headers: { ...json, accept: "application/json, text/event-stream" },
          body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        },
      ],
      // Cross-origin to the loopback name, as a simple request (no preflight): the Origin
      // header names the foreign page.
      cross_origin_call: [
        `${own}/tools/echo/call`,
        { method: "POST", headers: { "content-type": "text/plain" }, body: '{"input":{"text":"pwned"}}', mode: "no-cors" },
      ],
    };
    for (const [name, [path, init]] of Object.entries(tries)) {
      try {
        const response = await fetch(path, init);
        out[name] = response.type === "opaque" ? "opaque" : response.status;
      } catch (e) {
        out[name] = "failed";
      }
    }
    out.events = await new Promise((resolve) => {
      const source = new EventSource("/events");
      source.onopen = () => { source.close(); resolve("opened"); };
      source.onerror = () => { source.close(); resolve("failed"); };
    });
    return out;
  }, own);
  Object.assign(seen, attempts);
  // The control: the same server under its own name answers.
  seen.own_inbox_navigation = (await page.goto(`${own}/inbox`)).status();
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
