// The TypeScript MCP SDK's Client against handrail mcp, over streamable HTTP or stdio.
// Usage: node gateway_check.mjs SPEC, SPEC a JSON object:
//   {"transport": "http", "url": "http://127.0.0.1:PORT/mcp", "token": "hr_...",
//    "calls": [{"name": "write_note", "arguments": {...}}, ...]}
//   {"transport": "stdio", "command": "/path/handrail", "args": ["mcp", ...],
//    "stderr": "/path/gateway.err", "calls": [...]}
// Over stdio the client launches the gateway (with this process's environment) and appends
// its stderr to the "stderr" file. It prints one JSON line per step on stdout: "connected",
// "tools", then for each call "calling" and its "result"; a result that says the review is
// pending is followed by "pending" and handrail_await_review, again until it is not. Last
// "done"; on a failure "error" (and exit code 1).
import { openSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const AWAIT_TOOL = "handrail_await_review";
const REVIEW_META = "handrail/review";
const CALL_OPTIONS = { timeout: 120_000, resetTimeoutOnProgress: true, maxTotalTimeout: 300_000 };
const MAX_AWAITS = 20;

const say = (event, fields = {}) => console.log(JSON.stringify({ event, ...fields }));

function transportOf(spec) {
  if (spec.transport === "http") {
    return new StreamableHTTPClientTransport(new URL(spec.url), {
      requestInit: { headers: { Authorization: `Bearer ${spec.token}` } },
    });
  }
  if (spec.transport === "stdio") {
    const env = Object.fromEntries(Object.entries(process.env).filter(([, value]) => value !== undefined));
    return new StdioClientTransport({
      command: spec.command,
      args: spec.args,
      env,
      stderr: spec.stderr ? openSync(spec.stderr, "a") : "inherit",
    });
  }
  throw new Error(`transport is "http" or "stdio", not ${JSON.stringify(spec.transport)}`);
}

function summary(name, result, progress) {
  return {
    name,
    isError: result.isError === true,
    texts: (result.content ?? []).filter((block) => block.type === "text").map((block) => block.text),
    review: result._meta?.[REVIEW_META] ?? null,
    structured: result.structuredContent ?? null,
    progress,
  };
}

async function call(client, name, args) {
  let progress = 0;
  const options = { ...CALL_OPTIONS, onprogress: () => (progress += 1) };
  const result = await client.callTool({ name, arguments: args }, undefined, options);
  return summary(name, result, progress);
}

const spec = JSON.parse(process.argv[2]);
const client = new Client({ name: "handrail-gateway-check", version: "1.0.0" });
try {
  await client.connect(transportOf(spec), { timeout: 60_000 });
  say("connected", { server: client.getServerVersion() });
  const { tools } = await client.listTools(undefined, { timeout: 60_000 });
  say("tools", { tools: tools.map((tool) => ({ name: tool.name, annotations: tool.annotations ?? null })) });
  for (const { name, arguments: args } of spec.calls ?? []) {
    say("calling", { name, arguments: args });
    let result = await call(client, name, args);
    say("result", result);
    for (let round = 0; result.review?.status === "pending" && round < MAX_AWAITS; round += 1) {
      say("pending", { review_id: result.review.review_id });
      result = await call(client, AWAIT_TOOL, { review_id: result.review.review_id });
      say("result", result);
    }
  }
  say("done");
} catch (error) {
  say("error", { message: String(error?.stack ?? error) });
  process.exitCode = 1;
} finally {
  await client.close();
}
