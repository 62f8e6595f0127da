// mcp_http_server driven by the official MCP TypeScript SDK 1.x (@modelcontextprotocol/sdk) over
// its StreamableHTTPClientTransport: the 2025-11-25 revision, with sessions.
//
// Cancellation in this revision: the SDK POSTs `notifications/cancelled {requestId, reason}` (on
// abort or on its own `timeout`) as a separate request of the same session, and rejects the call
// at once. It keeps reading the cancelled request's SSE stream: the server ends that stream
// without a reply (MCP: a cancelled request gets none). `terminateSession()` (DELETE) ends the
// session and cancels what it has in flight. The transport is given a recording fetch, so the
// tests assert what went over the wire as well as what the SDK reports.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpError, ErrorCode, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { withTimeout, waitFor, sleep, expectRejection, elicitationParams, aborted } from "./helpers.mjs";
import { spawnHttpServer, FetchRecorder, messagesOf, pollUntil } from "./http.mjs";

/** A Client on a new session of `url`, with its transport and recorder; `setup` prepares the client first. */
async function connect(url, capabilities = {}, setup = () => {}) {
  const recorder = new FetchRecorder();
  const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recorder.fetch });
  const client = new Client({ name: "tower-cancel-interop", version: "0.0.0" }, { capabilities });
  const errors = [];
  client.onerror = (e) => errors.push(e);
  setup(client);
  await withTimeout(client.connect(transport), 5000, "initialize got no answer");
  return { client, transport, recorder, errors };
}

/** The `stats` tool's counters. */
async function stats(client) {
  const res = await withTimeout(client.callTool({ name: "stats", arguments: {} }), 5000, "stats hung");
  return res.structuredContent;
}

/** The exchange that POSTed the `tools/call` whose arguments are `args`. */
function callExchange(recorder, args) {
  const found = recorder.posted(
    (m) => m.method === "tools/call" && JSON.stringify(m.params?.arguments) === JSON.stringify(args),
  );
  assert.equal(found.length, 1, `one tools/call ${JSON.stringify(args)} on the wire, saw ${found.length}`);
  return found[0];
}

/** Waits until the handler of one more call than `before` stopped (cancelled) and nothing runs. */
function untilCancelled(client, before) {
  return pollUntil(
    () => stats(client),
    (s) => s.cancelled === before.cancelled + 1 && s.inFlight === 0,
    3000,
    `stats after the cancel (before: ${JSON.stringify(before)})`,
  );
}

describe("mcp_http_server via @modelcontextprotocol/sdk 1.x StreamableHTTPClientTransport (2025-11-25)", () => {
  let server;
  let session;

  before(async () => {
    server = await spawnHttpServer("mcp_http_server");
    session = await connect(server.url);
  });

  after(async () => {
    await session?.client.close().catch(() => {});
    const exit = await server?.stop();
    assert.doesNotMatch(server?.stderr() ?? "", /panicked/);
    assert.equal(exit?.signal ?? "SIGTERM", "SIGTERM", "the server ended by SIGTERM");
  });

  it("prints exactly one line, and initialize mints a session", () => {
    assert.deepEqual(server.stdout, [`listening on ${server.url}`]);
    assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    const { transport, recorder, client } = session;
    assert.match(transport.sessionId ?? "", /^[0-9a-f]{32}$/, "a 128-bit session id");
    const [init] = recorder.posted((m) => m.method === "initialize");
    assert.equal(init.status, 200);
    assert.equal(init.sessionId, transport.sessionId);
    const [reply] = messagesOf(init);
    assert.equal(reply.result.protocolVersion, init.body.params.protocolVersion, "the client's version echoed");
    assert.equal(client.getServerVersion()?.name, "tower-cancel-mcp-example");
    assert.deepEqual(client.getServerCapabilities(), { tools: {} });
    // notifications/initialized is taken with 202, so the SDK tries the standalone GET stream: 405.
    const [initialized] = recorder.posted((m) => m.method === "notifications/initialized");
    assert.equal(initialized.status, 202);
  });

  it("tools/list has confirm, progress, sleep and stats", async () => {
    const { tools } = await session.client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ["confirm", "progress", "sleep", "stats"]);
  });

  it("a sleep aborted by an AbortSignal: the SDK POSTs notifications/cancelled, the handler stops, no reply", async () => {
    const { client, recorder, transport } = session;
    const before = await stats(client);
    const ac = new AbortController();
    const started = Date.now();
    const pending = client.callTool({ name: "sleep", arguments: { ms: 10000 } }, undefined, { signal: ac.signal });
    setTimeout(() => ac.abort(), 200);
    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, started, "tools/call sleep aborted after 200 ms"),
      5000,
      "the aborted call did not reject",
    );
    assert.ok(error instanceof McpError, `expected an McpError, got ${error}`);
    assert.equal(error.code, ErrorCode.RequestTimeout); // the SDK's local code for an abort
    assert.ok(elapsedMs < 1000, `rejection took ${elapsedMs} ms`);

    const call = callExchange(recorder, { ms: 10000 });
    const cancels = recorder.posted((m) => m.method === "notifications/cancelled" && m.params?.requestId === call.body.id);
    assert.equal(cancels.length, 1, "one notifications/cancelled for the call");
    assert.equal(cancels[0].headers["mcp-session-id"], transport.sessionId, "POSTed in the session");
    await withTimeout(cancels[0].ended, 2000, "the cancel's POST got no answer");
    assert.equal(cancels[0].status, 202);

    const after = await untilCancelled(client, before);
    assert.equal(after.started, before.started + 1);
    assert.equal(after.completed, before.completed);
    // The server ended the cancelled request's stream itself, with no message for it.
    const ended = await withTimeout(call.ended, 2000, "the server left the cancelled request's stream open");
    assert.equal(ended.how, "server-ended");
    assert.deepEqual(messagesOf(call).filter((m) => m.id === call.body.id), [], "no reply to a cancelled request");
  });

  it("a sleep past the SDK's timeout: notifications/cancelled, the handler stops, no reply", async () => {
    const { client, recorder } = session;
    const before = await stats(client);
    const started = Date.now();
    const { error, elapsedMs } = await withTimeout(
      expectRejection(
        client.callTool({ name: "sleep", arguments: { ms: 10001 } }, undefined, { timeout: 300 }),
        started,
        "tools/call sleep with timeout 300",
      ),
      5000,
      "the timed-out call did not reject",
    );
    assert.ok(error instanceof McpError, `expected an McpError, got ${error}`);
    assert.equal(error.code, ErrorCode.RequestTimeout);
    assert.ok(elapsedMs >= 290 && elapsedMs < 1500, `rejection took ${elapsedMs} ms`);

    const call = callExchange(recorder, { ms: 10001 });
    const [cancel] = recorder.posted((m) => m.method === "notifications/cancelled" && m.params?.requestId === call.body.id);
    assert.match(cancel?.body.params.reason ?? "", /timed out/);
    await withTimeout(cancel.ended, 2000, "the cancel's POST got no answer");
    assert.equal(cancel.status, 202);
    await untilCancelled(client, before);
    const ended = await withTimeout(call.ended, 2000, "the server left the timed-out request's stream open");
    assert.equal(ended.how, "server-ended");
    assert.deepEqual(messagesOf(call).filter((m) => m.id === call.body.id), []);
  });

  it("progress with onprogress and resetTimeoutOnProgress outlives its timeout and completes", async () => {
    const { client, recorder } = session;
    const before = await stats(client);
    const seen = [];
    const res = await withTimeout(
      client.callTool({ name: "progress", arguments: { steps: 5, intervalMs: 100 } }, undefined, {
        onprogress: (p) => seen.push(p),
        timeout: 300, // shorter than the call (500 ms), longer than a step (100 ms)
        resetTimeoutOnProgress: true,
      }),
      5000,
      "the progress call hung",
    );
    assert.deepEqual(res.structuredContent, { steps: 5 });
    assert.deepEqual(
      seen,
      [1, 2, 3, 4, 5].map((i) => ({ progress: i, total: 5, message: `step ${i} of 5` })),
    );
    const call = callExchange(recorder, { steps: 5, intervalMs: 100 });
    assert.equal(call.body.params._meta?.progressToken, call.body.id, "the SDK asked for progress");
    assert.match(call.contentType ?? "", /^text\/event-stream/, "progress makes an SSE stream");
    assert.deepEqual(recorder.posted((m) => m.method === "notifications/cancelled" && m.params?.requestId === call.body.id), []);
    const after = await stats(client);
    assert.equal(after.completed, before.completed + 1);
    assert.equal(after.cancelled, before.cancelled);
  });

  it("the SDK reported no errors so far", () => {
    assert.deepEqual(session.errors.map(String), []);
  });

  it("terminateSession() with a sleep in flight: DELETE cancels it", async () => {
    const { client, recorder, transport } = session;
    const before = await stats(client);
    const pending = client.callTool({ name: "sleep", arguments: { ms: 10002 } });
    const settled = pending.then(
      (value) => ({ value }),
      (error) => ({ error }),
    );
    await pollUntil(() => stats(client), (s) => s.started === before.started + 1, 3000, "the sleep started");
    const sessionId = transport.sessionId;
    await withTimeout(transport.terminateSession(), 5000, "DELETE got no answer");
    const [del] = recorder.exchanges.filter((ex) => ex.method === "DELETE");
    assert.equal(del.headers["mcp-session-id"], sessionId);
    assert.equal(del.status, 200);
    assert.equal(transport.sessionId, undefined, "the SDK forgot the session");

    const call = callExchange(recorder, { ms: 10002 });
    const ended = await withTimeout(call.ended, 2000, "the server left the ended session's request stream open");
    assert.equal(ended.how, "server-ended");
    assert.deepEqual(messagesOf(call).filter((m) => m.id === call.body.id), []);

    // The old session is gone: the counters are read on a new one.
    const other = await connect(server.url);
    try {
      assert.notEqual(other.transport.sessionId, sessionId);
      const after = await untilCancelled(other.client, before);
      assert.equal(after.completed, before.completed);
    } finally {
      await other.client.close();
    }
    // The SDK never got a reply for the call: closing the client ends it.
    await client.close();
    const outcome = await withTimeout(settled, 2000, "the call outlived client.close()");
    assert.ok(outcome.error, `the call resolved: ${JSON.stringify(outcome.value)}`);
  });
});

/**
 * `confirm {action}` in a session: the server's `elicitation/create` goes out on the SSE stream of the tool call's
 * POST, the SDK answers it with a POST of its own, and that answer reaches the waiting tool. Cancelling the tool
 * call while the question is open cancels the question on the same stream (`notifications/cancelled` naming it),
 * and the SDK aborts its handler's signal.
 */
describe("mcp_http_server confirm: the SDK client answers the server's elicitation/create (2025-11-25)", () => {
  let server;
  let session;
  let answer = { action: "accept", content: {} };
  const asked = [];

  before(async () => {
    server = await spawnHttpServer("mcp_http_server");
    session = await connect(server.url, { elicitation: {} }, (client) => {
      client.setRequestHandler(ElicitRequestSchema, async (request, extra) => {
        asked.push({ params: request.params, id: extra.requestId, signal: extra.signal });
        if (answer !== "wait") return answer;
        await aborted(extra.signal);
        return { action: "cancel" };
      });
    });
  });

  after(async () => {
    await session?.client.close().catch(() => {});
    const exit = await server?.stop();
    assert.doesNotMatch(server?.stderr() ?? "", /panicked/);
    assert.equal(exit?.signal ?? "SIGTERM", "SIGTERM", "the server ended by SIGTERM");
  });

  it("accepted: asked on the call's stream, answered by a POST of the session, confirmed", async () => {
    const { client, recorder, transport } = session;
    answer = { action: "accept", content: {} };
    const res = await withTimeout(
      client.callTool({ name: "confirm", arguments: { action: "deploy" } }),
      5000,
      "confirm hung",
    );
    assert.deepEqual(res.content, [{ type: "text", text: "confirmed" }]);
    assert.deepEqual(elicitationParams(asked[0].params), {
      message: "Allow deploy?",
      requestedSchema: { type: "object", properties: {} },
    });
    const call = callExchange(recorder, { action: "deploy" });
    const messages = messagesOf(call);
    assert.equal(messages[0].method, "elicitation/create", "the question on the call's own stream");
    assert.equal(messages[0].id, asked[0].id);
    assert.equal(messages.at(-1).id, call.body.id, "then the call's reply");
    const [reply] = recorder.posted((m) => m.id === asked[0].id && m.result);
    await withTimeout(reply.ended, 2000, "the answer's POST got no response");
    assert.equal(reply.status, 202);
    assert.equal(reply.headers["mcp-session-id"], transport.sessionId);
  });

  it("two questions at once get ids of their own, and each answer reaches its tool", async () => {
    const { client } = session;
    answer = { action: "decline" };
    const [a, b] = await withTimeout(
      Promise.all([
        client.callTool({ name: "confirm", arguments: { action: "a" } }),
        client.callTool({ name: "confirm", arguments: { action: "b" } }),
      ]),
      5000,
      "the two confirms hung",
    );
    assert.deepEqual(a.content, [{ type: "text", text: "declined" }]);
    assert.deepEqual(b.content, [{ type: "text", text: "declined" }]);
    const ids = asked.slice(1).map((q) => q.id);
    assert.equal(new Set([asked[0].id, ...ids]).size, 3, `ids unique in the session: ${ids}`);
  });

  it("cancelled while asked: notifications/cancelled on the call's stream, the handler's signal fires", async () => {
    const { client, recorder } = session;
    answer = "wait";
    const before = await stats(client);
    const ac = new AbortController();
    const started = Date.now();
    const pending = client.callTool({ name: "confirm", arguments: { action: "reboot" } }, undefined, {
      signal: ac.signal,
    });
    await waitFor(() => asked.length === 4, 5000, "the server never asked");
    const question = asked[3];
    ac.abort("user pressed stop");
    await withTimeout(expectRejection(pending, started, "the aborted confirm"), 5000, "the aborted call did not reject");
    await withTimeout(
      aborted(question.signal),
      5000,
      "the elicitation handler's abort signal never fired",
    );
    const call = callExchange(recorder, { action: "reboot" });
    const ended = await withTimeout(call.ended, 2000, "the server left the cancelled call's stream open");
    assert.equal(ended.how, "server-ended");
    assert.deepEqual(messagesOf(call), [
      { jsonrpc: "2.0", id: question.id, method: "elicitation/create", params: asked[3].params },
      {
        jsonrpc: "2.0",
        method: "notifications/cancelled",
        params: { requestId: question.id, reason: "parent request cancelled" },
      },
    ]);
    const after = await untilCancelled(client, before);
    assert.equal(after.completed, before.completed);
    await sleep(100);
    assert.deepEqual(recorder.posted((m) => m.id === question.id && !m.method), [], "no answer to a cancelled question");
    assert.deepEqual(session.errors.map(String), []);
  });
});
