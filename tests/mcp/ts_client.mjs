// Drives toolgate's /mcp with the official MCP TypeScript SDK (@modelcontextprotocol/sdk 1.32,
// the 2025-11-25 era), as an agent would: list, call echo, call ask_human and get the pending
// answer, let a person approve over REST, and await the outcome with toolgate_await_call.
//
// Usage: MCP_BASE=... MCP_CALLER=... MCP_APPROVER=... node ts_client.mjs (tokens "-" without
// keys), run where the SDK is installed (`.ci/node`, by .ci/test-deps).
// Prints one JSON object of what it saw; exits non-zero with the reason on a failed expectation.
// The SDK validates every structuredContent against the tool's outputSchema by itself.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const { MCP_BASE: base, MCP_CALLER: caller, MCP_APPROVER: approver } = process.env;
const seen = { answers: [] };

function expect(condition, what) {
  if (!condition) {
    console.error(`expectation failed (typescript): ${what}`);
    process.exit(1);
  }
}

const auth = (token) => (token === "-" ? {} : { Authorization: `Bearer ${token}` });

async function rest(method, path, body) {
  const response = await fetch(base + path, {
    method,
    headers: { "content-type": "application/json", ...auth(approver) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  expect(response.ok, `${method} ${path}: ${response.status}`);
  return response.json();
}

const transport = new StreamableHTTPClientTransport(new URL(base + "/mcp"), {
  requestInit: { headers: auth(caller) },
});
const client = new Client({ name: "toolgate-test", version: "1.0.0" });
await client.connect(transport);

const { tools } = await client.listTools();
const names = tools.map((tool) => tool.name);
expect(JSON.stringify(names) === JSON.stringify([...names].sort()), `name order: ${names}`);
expect(names.includes("toolgate_await_call"), "the await tool is listed");
seen.tools = tools;

const echoed = await client.callTool({ name: "echo", arguments: { text: "hello from TypeScript" } });
seen.answers.push(echoed);
expect(!echoed.isError, `echo succeeds: ${JSON.stringify(echoed)}`);
expect(echoed.structuredContent.text === "hello from TypeScript", "echo's output");

// A write tool with an output schema: its receipt passes the SDK's own outputSchema check.
const sent = await client.callTool({
  name: "send_email",
  arguments: { to: "ops@example.com", subject: "Hi", body: "From the TypeScript SDK." },
});
seen.answers.push(sent);
expect(!sent.isError, `send_email succeeds: ${JSON.stringify(sent)}`);
expect(typeof sent.structuredContent.message_id === "string", "its receipt");

const pending = await client.callTool({ name: "ask_human", arguments: { question: "Merge it?" } });
seen.answers.push(pending);
expect(!pending.isError, `pending is no error: ${JSON.stringify(pending)}`);
expect(pending.structuredContent.status === "pending_approval", "pending");
const callId = pending.structuredContent.call_id;

const approvals = await rest("GET", "/approvals");
const approval = approvals.approvals.find((a) => a.call_id === callId);
expect(approval, `a pending approval for ${callId}`);
seen.token = approval.token;
await rest("POST", `/approvals/${approval.token}/approve`, { input: { answer: "Merged." } });

const outcome = await client.callTool({
  name: "toolgate_await_call",
  arguments: { call_id: callId, wait_seconds: 10 },
});
seen.answers.push(outcome);
expect(!outcome.isError, `the approved call completed: ${JSON.stringify(outcome)}`);
expect(outcome.structuredContent.answer === "Merged.", "its output");

await client.close();
console.log(JSON.stringify(seen));
