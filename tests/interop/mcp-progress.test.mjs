// mcp_server's `progress` tool and `--timeout-ms`, driven by the official MCP TypeScript SDK
// (@modelcontextprotocol/sdk) Client over the recording stdio Transport from helpers.mjs, so
// the raw traffic (progress tokens, notifications/cancelled, replies or their absence) can be
// asserted next to what the SDK surfaces.
//
// What SDK 1.32.2 does with the RequestOptions used here (dist/esm/shared/protocol.js:
// Protocol.request, _onprogress, _setupTimeout/_resetTimeout):
// - `onprogress` set: the request carries `params._meta.progressToken` (= the request id); each
//   `notifications/progress` with that token calls the callback with the params minus the token.
// - `timeout` (default 60 s): when it fires the SDK sends `notifications/cancelled
//   {requestId, reason}` and rejects with McpError -32001 "Request timed out", data {timeout}.
// - `resetTimeoutOnProgress: true`: each progress notification re-arms `timeout`.
// - `maxTotalTimeout`: only checked when a progress notification arrives (typescript-sdk#2695).
//   Once exceeded the SDK rejects with McpError -32001 "Maximum total timeout exceeded", data
//   {maxTotalTimeout, totalElapsed}, WITHOUT sending notifications/cancelled at that moment.
//   It forgets the request's timer info without clearing the timer, though, so the `timeout`
//   armed by the last accepted progress still fires later and sends notifications/cancelled
//   (reason "...Request timed out"). The server is therefore told, `timeout` ms after the last
//   progress the SDK accepted. The maxTotalTimeout test pins that down.
// - A reply or progress notification that arrives after the SDK gave up on a request is
//   reported through `client.onerror` ("... unknown message ID" / "... unknown token").
// - Notification handlers run in a microtask, responses synchronously, so with a transport that
//   delivers one stdout chunk's messages back to back (like the SDK's StdioClientTransport) the
//   last progress notification is lost when it shares a chunk with the result
//   (typescript-sdk#2580). The transport here is built with {oneMessagePerTask: true}, which
//   delivers each message in its own task, so every report reaches `onprogress`.
//
// Timing: the tools step every 100 ms (150 ms for the server-side one) and the idle timeouts
// are 250 ms (client) and 300 ms (server), so a step may come 150 ms late before anything
// flips; every upper bound on an elapsed time leaves hundreds of ms. The tests run on loaded
// 2-core CI machines next to a cargo build.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { McpError, ErrorCode } from "@modelcontextprotocol/sdk/types.js";
import { sleep, withTimeout, waitFor, expectRejection, RecordingStdioTransport } from "./helpers.mjs";

/** Starts mcp_server with `args` and connects an SDK Client to it over a recording transport. */
async function connect(args = []) {
  const transport = new RecordingStdioTransport("mcp_server", args, { oneMessagePerTask: true });
  const client = new Client({ name: "tower-cancel-interop", version: "0.0.0" }, { capabilities: {} });
  const clientErrors = [];
  client.onerror = (e) => clientErrors.push(String(e?.message ?? e));
  await withTimeout(client.connect(transport), 5000, `initialize got no answer (mcp_server ${args.join(" ")})`);
  return { transport, client, clientErrors };
}

async function disconnect(conn) {
  await conn?.client?.close().catch(() => {});
  await conn?.transport?.server?.stop();
}

/** The `stats` tool's counters. */
async function stats(client) {
  const res = await withTimeout(client.callTool({ name: "stats", arguments: {} }), 5000, "stats hung");
  return res.structuredContent;
}

/** Counter differences `after - before`, plus `inFlight` as it is now. */
function delta(before, after) {
  return {
    started: after.started - before.started,
    completed: after.completed - before.completed,
    cancelled: after.cancelled - before.cancelled,
    inFlight: after.inFlight,
  };
}

/**
 * Starts a tools/call through the SDK. Returns the pending promise and the request as the SDK
 * put it on the wire (taken from the transport's record, so its id and _meta are the real ones).
 */
function startCall(conn, name, args, options) {
  const { transport, client } = conn;
  const sentBefore = transport.toServer.length;
  const startedAt = Date.now();
  const pending = client.callTool({ name, arguments: args }, undefined, options);
  pending.catch(() => {}); // awaited by the test; no unhandled-rejection noise meanwhile
  const req = transport.toServer
    .slice(sentBefore)
    .find((m) => m.method === "tools/call" && m.params?.name === name);
  assert.ok(req, `tools/call ${name} not seen on the wire`);
  return { pending, req, startedAt };
}

/** Log entries of everything the server wrote that answers request `id` (result or error). */
function repliesTo(transport, id) {
  return transport.log.filter((e) => e.dir === "in" && e.msg.id === id && e.msg.method === undefined);
}

/** Log entries of the notifications/progress the server wrote for `token`. */
function progressFor(transport, token) {
  return transport.log.filter(
    (e) => e.dir === "in" && e.msg.method === "notifications/progress" && e.msg.params?.progressToken === token,
  );
}

/** Log entries of the notifications/cancelled the client sent for request `id`. */
function cancelsFor(transport, id) {
  return transport.log.filter(
    (e) => e.dir === "out" && e.msg.method === "notifications/cancelled" && e.msg.params?.requestId === id,
  );
}

/** The notifications/progress the server sends for step i of n (CONTRACT.md). */
function progressMessage(token, i, n) {
  return {
    jsonrpc: "2.0",
    method: "notifications/progress",
    params: { progressToken: token, progress: i, total: n, message: `step ${i} of ${n}` },
  };
}

const range = (n) => Array.from({ length: n }, (_, i) => i + 1);

/** Client errors other than the SDK's complaint about progress for a request it gave up on. */
const unexpectedErrors = (errs) => errs.filter((e) => !/progress notification for an unknown token/.test(e));

describe("mcp_server progress tool vs the SDK's client-side timeouts", () => {
  let conn;

  before(async () => {
    conn = await connect();
  });

  after(async () => {
    await disconnect(conn);
  });

  it("tools/list has the progress tool with integer steps and intervalMs", async () => {
    const { tools } = await conn.client.listTools();
    const tool = tools.find((t) => t.name === "progress");
    assert.ok(tool, `tools: ${tools.map((t) => t.name).join(", ")}`);
    assert.equal(tool.inputSchema.type, "object");
    assert.equal(tool.inputSchema.properties?.steps?.type, "integer");
    assert.equal(tool.inputSchema.properties?.intervalMs?.type, "integer");
  });

  it("resetTimeoutOnProgress: a 600 ms call with a 250 ms timeout completes while progress flows", async () => {
    const { transport, client, clientErrors } = conn;
    const errorsBefore = clientErrors.length;
    const s0 = await stats(client);
    const seen = [];
    const timeout = 250;
    const { pending, req, startedAt } = startCall(
      conn,
      "progress",
      { steps: 6, intervalMs: 100 },
      { onprogress: (p) => seen.push(p), timeout, resetTimeoutOnProgress: true, maxTotalTimeout: 60000 },
    );
    const res = await withTimeout(pending, 5000, "progress {steps:6, intervalMs:100} hung");
    const elapsedMs = Date.now() - startedAt;

    assert.deepEqual(res.structuredContent, { steps: 6 });
    assert.deepEqual(res.content, [{ type: "text", text: "did 6 steps" }]);
    assert.notEqual(res.isError, true);
    // The server works 6 x 100 ms: the call outlived its 250 ms timeout more than twice over.
    assert.ok(elapsedMs >= 2 * timeout, `call took only ${elapsedMs} ms`);

    // onprogress: 6 calls, progress 1..6, total 6, in order.
    assert.deepEqual(
      seen,
      range(6).map((i) => ({ progress: i, total: 6, message: `step ${i} of 6` })),
    );

    // Raw traffic: the SDK asked for progress with a token; the server sent exactly 6
    // notifications/progress with that token, all before the single result.
    const token = req.params?._meta?.progressToken;
    assert.ok(token !== undefined, `no progressToken in the request: ${JSON.stringify(req)}`);
    assert.equal(token, req.id); // this SDK uses the request id as the token
    const notes = progressFor(transport, token);
    assert.deepEqual(
      notes.map((e) => e.msg),
      range(6).map((i) => progressMessage(token, i, 6)),
    );
    const replies = repliesTo(transport, req.id);
    assert.equal(replies.length, 1, `replies: ${JSON.stringify(replies.map((e) => e.msg))}`);
    assert.ok(
      transport.log.indexOf(notes.at(-1)) < transport.log.indexOf(replies[0]),
      "a progress notification came after the result",
    );
    assert.deepEqual(cancelsFor(transport, req.id), [], "the SDK cancelled a call that was making progress");

    assert.deepEqual(delta(s0, await stats(client)), { started: 1, completed: 1, cancelled: 0, inFlight: 0 });
    assert.deepEqual(clientErrors.slice(errorsBefore), []);
  });

  it("without resetTimeoutOnProgress the SDK's 250 ms timeout cancels the call; the server stops it and never answers", async () => {
    const { transport, client, clientErrors } = conn;
    const errorsBefore = clientErrors.length;
    const s0 = await stats(client);
    const seen = [];
    const timeout = 250;
    const { pending, req, startedAt } = startCall(
      conn,
      "progress",
      { steps: 6, intervalMs: 100 },
      { onprogress: (p) => seen.push(p), timeout, resetTimeoutOnProgress: false },
    );
    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, startedAt, "progress {steps:6} with timeout 250 and no reset"),
      5000,
      "the SDK's timeout did not fire",
    );
    assert.ok(error instanceof McpError, `expected an McpError, got ${error}`);
    assert.equal(error.code, ErrorCode.RequestTimeout); // -32001
    assert.equal(error.message, "MCP error -32001: Request timed out");
    assert.deepEqual(error.data, { timeout });
    // Fired on the timeout, well before the call's own end at 600 ms.
    assert.ok(elapsedMs >= timeout - 5 && elapsedMs < 550, `rejected after ${elapsedMs} ms`);
    // Reports before the timeout reached the callback; they did not keep the call alive.
    assert.ok(seen.length < 6, `onprogress called ${seen.length} times`);
    assert.deepEqual(
      seen.map((p) => p.progress),
      range(seen.length),
    );

    // The SDK sent notifications/cancelled for that id, once.
    const cancels = cancelsFor(transport, req.id);
    assert.deepEqual(
      cancels.map((e) => e.msg),
      [
        {
          jsonrpc: "2.0",
          method: "notifications/cancelled",
          params: { requestId: req.id, reason: "McpError: MCP error -32001: Request timed out" },
        },
      ],
    );

    // Wait until well past the moment the uncancelled call would have answered (600 ms).
    await sleep(Math.max(0, startedAt + 600 + 400 - Date.now()));
    assert.deepEqual(
      repliesTo(transport, req.id).map((e) => e.msg),
      [],
      `server replied to cancelled request ${req.id}`,
    );
    // The server stopped working on it: it did not go on to report all 6 steps.
    const notes = progressFor(transport, req.params._meta.progressToken);
    assert.ok(notes.length < 6, `server kept reporting after the cancel: ${notes.length} progress notifications`);

    assert.deepEqual(delta(s0, await stats(client)), { started: 1, completed: 0, cancelled: 1, inFlight: 0 });
    // At most a progress report that crossed the cancel on the wire.
    assert.deepEqual(unexpectedErrors(clientErrors.slice(errorsBefore)), []);
  });

  it("maxTotalTimeout 450 ms: the SDK rejects at the first progress past it, then cancels; the server stops it and never answers", async () => {
    const { transport, client, clientErrors } = conn;
    const errorsBefore = clientErrors.length;
    const s0 = await stats(client);
    const seen = [];
    const timeout = 250;
    const maxTotalTimeout = 450;
    const { pending, req, startedAt } = startCall(
      conn,
      "progress",
      { steps: 10, intervalMs: 100 },
      { onprogress: (p) => seen.push(p), timeout, resetTimeoutOnProgress: true, maxTotalTimeout },
    );
    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, startedAt, "progress {steps:10} with maxTotalTimeout 450"),
      5000,
      "maxTotalTimeout did not fire",
    );
    const rejectedAt = Date.now();
    assert.ok(error instanceof McpError, `expected an McpError, got ${error}`);
    assert.equal(error.code, ErrorCode.RequestTimeout); // -32001
    assert.equal(
      error.message,
      "MCP error -32001: Maximum total timeout exceeded",
      "('Request timed out' here means a progress step came more than 250 ms late: machine overloaded?)",
    );
    assert.equal(error.data?.maxTotalTimeout, maxTotalTimeout);
    assert.ok(error.data?.totalElapsed >= maxTotalTimeout, `data: ${JSON.stringify(error.data)}`);
    // Around the max total (checked at the ~500 ms report), well before the call's end at 1000 ms.
    assert.ok(elapsedMs >= maxTotalTimeout && elapsedMs < 900, `rejected after ${elapsedMs} ms`);
    // The reports before the max total reached the callback; the one that tripped it did not.
    assert.ok(seen.length >= 1 && seen.length < 10, `onprogress called ${seen.length} times`);
    assert.deepEqual(
      seen.map((p) => p.progress),
      range(seen.length),
    );

    // The SDK sends notifications/cancelled for that id once its leftover `timeout` timer fires
    // (see the header comment): within `timeout` of the rejection.
    await waitFor(() => cancelsFor(transport, req.id).length > 0, timeout + 1000, "the SDK never sent notifications/cancelled");
    const cancels = cancelsFor(transport, req.id);
    assert.equal(cancels.length, 1, `cancels: ${JSON.stringify(cancels.map((e) => e.msg))}`);
    assert.equal(typeof cancels[0].msg.params.reason, "string");
    assert.ok(cancels[0].at >= rejectedAt - 5, "the cancel went out before the rejection");

    // Wait until well past the moment the uncancelled call would have answered (1000 ms).
    await sleep(Math.max(0, startedAt + 1000 + 400 - Date.now()));
    assert.deepEqual(
      repliesTo(transport, req.id).map((e) => e.msg),
      [],
      `server replied to cancelled request ${req.id}`,
    );
    const notes = progressFor(transport, req.params._meta.progressToken);
    assert.ok(notes.length < 10, `server kept reporting after the cancel: ${notes.length} progress notifications`);

    assert.deepEqual(delta(s0, await stats(client)), { started: 1, completed: 0, cancelled: 1, inFlight: 0 });
    // Progress reports between the rejection and the cancel are reported as unknown; nothing else.
    assert.deepEqual(unexpectedErrors(clientErrors.slice(errorsBefore)), []);
  });

  it("the server wrote only JSON-RPC 2.0 and the SDK saw no reply it did not expect", async () => {
    await withTimeout(conn.client.ping(), 5000, "ping hung");
    const bad = conn.transport.fromServer.messages.filter((m) => m.unparsable !== undefined || m.jsonrpc !== "2.0");
    assert.deepEqual(bad, []);
    assert.deepEqual(unexpectedErrors(conn.clientErrors), []);
  });
});

describe("mcp_server --timeout-ms (the server's own idle timeout) via the SDK Client", () => {
  const serverTimeoutMs = 300;
  let conn;

  before(async () => {
    conn = await connect(["--timeout-ms", String(serverTimeoutMs)]);
  });

  after(async () => {
    await disconnect(conn);
  });

  it("a 2 s sleep gets the server's -32001 'Request timed out' error, which the SDK surfaces; counted as cancelled", async () => {
    const { transport, client, clientErrors } = conn;
    const errorsBefore = clientErrors.length;
    const s0 = await stats(client);
    const { pending, req, startedAt } = startCall(conn, "sleep", { ms: 2000 }, { timeout: 30000 });
    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, startedAt, `sleep {ms:2000} on a --timeout-ms ${serverTimeoutMs} server`),
      5000,
      "the server's timeout did not fire",
    );
    // What the SDK surfaces: the server's error as an McpError without data (the SDK's own
    // timeout would have data {timeout}, and would fire only after 30 s).
    assert.ok(error instanceof McpError, `expected an McpError, got ${error}`);
    assert.equal(error.code, -32001);
    assert.equal(error.message, "MCP error -32001: Request timed out");
    assert.equal(error.data, undefined);
    assert.ok(elapsedMs >= serverTimeoutMs - 5 && elapsedMs < 1500, `rejected after ${elapsedMs} ms`);

    // The raw reply, byte for byte as in CONTRACT.md; the client cancelled nothing.
    assert.deepEqual(
      repliesTo(transport, req.id).map((e) => e.line),
      [`{"jsonrpc":"2.0","id":${req.id},"error":{"code":-32001,"message":"Request timed out"}}`],
    );
    assert.deepEqual(cancelsFor(transport, req.id), []);

    await sleep(300);
    assert.equal(repliesTo(transport, req.id).length, 1, "a second reply for the timed-out request");
    assert.deepEqual(delta(s0, await stats(client)), { started: 1, completed: 0, cancelled: 1, inFlight: 0 });
    assert.deepEqual(clientErrors.slice(errorsBefore), []);
  });

  it("a progress call with an onprogress callback outlives the server's timeout: each report pushes its deadline back", async () => {
    const { transport, client, clientErrors } = conn;
    const errorsBefore = clientErrors.length;
    const s0 = await stats(client);
    const steps = 5;
    const intervalMs = 150;
    const seen = [];
    const { pending, req, startedAt } = startCall(
      conn,
      "progress",
      { steps, intervalMs },
      { onprogress: (p) => seen.push(p), timeout: 30000 },
    );
    const res = await withTimeout(pending, 5000, `progress {steps:${steps}, intervalMs:${intervalMs}} hung`);
    const elapsedMs = Date.now() - startedAt;
    assert.deepEqual(res.structuredContent, { steps });
    assert.deepEqual(res.content, [{ type: "text", text: `did ${steps} steps` }]);
    assert.ok(elapsedMs >= 2 * serverTimeoutMs, `call took only ${elapsedMs} ms`);

    assert.deepEqual(
      seen.map((p) => [p.progress, p.total]),
      range(steps).map((i) => [i, steps]),
    );
    const token = req.params?._meta?.progressToken;
    assert.ok(token !== undefined, "the SDK sent no progressToken although onprogress is set");
    assert.deepEqual(
      progressFor(transport, token).map((e) => e.msg),
      range(steps).map((i) => progressMessage(token, i, steps)),
    );
    assert.equal(repliesTo(transport, req.id).length, 1);
    assert.deepEqual(delta(s0, await stats(client)), { started: 1, completed: 1, cancelled: 0, inFlight: 0 });
    assert.deepEqual(clientErrors.slice(errorsBefore), []);
  });
});
