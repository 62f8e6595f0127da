// mcp_http_server driven by the official MCP TypeScript SDK 2.x (@modelcontextprotocol/client),
// pinned to the stateless 2026-07-28 revision: no session, no initialize; `connect` sends
// `server/discover`, every request carries its version in `_meta` and in headers.
//
// Cancellation in this revision: closing the request's response stream. On abort or on its own
// `timeout` the SDK aborts that request's fetch (the connection is closed) and sends nothing else;
// the server must notice and stop the handler. The transport is given a recording fetch, so the
// tests assert what went over the wire as well as what the SDK reports.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client, StreamableHTTPClientTransport, SdkError, SdkErrorCode, ProtocolError } from "@modelcontextprotocol/client";
import { withTimeout, waitFor, sleep, expectRejection } from "./helpers.mjs";
import { spawnHttpServer, FetchRecorder, messagesOf, pollUntil } from "./http.mjs";

const VERSION = "2026-07-28";

describe("mcp_http_server via @modelcontextprotocol/client 2.x, pinned to 2026-07-28", () => {
  let server;
  let client;
  let recorder;
  const errors = [];

  /** The `stats` tool's counters. */
  async function stats() {
    const res = await withTimeout(client.callTool({ name: "stats", arguments: {} }), 5000, "stats hung");
    return res.structuredContent;
  }

  /** The exchange that POSTed the `tools/call` whose arguments are `args`. */
  function callExchange(args) {
    const found = recorder.posted(
      (m) => m.method === "tools/call" && JSON.stringify(m.params?.arguments) === JSON.stringify(args),
    );
    assert.equal(found.length, 1, `one tools/call ${JSON.stringify(args)} on the wire, saw ${found.length}`);
    return found[0];
  }

  /** Waits until the handler of one more call than `before` stopped (cancelled) and nothing runs. */
  function untilCancelled(before) {
    return pollUntil(
      stats,
      (s) => s.cancelled === before.cancelled + 1 && s.inFlight === 0,
      3000,
      `stats after the stream was closed (before: ${JSON.stringify(before)})`,
    );
  }

  before(async () => {
    server = await spawnHttpServer("mcp_http_server", ["--subscription-ms", "300"]);
    recorder = new FetchRecorder();
    const transport = new StreamableHTTPClientTransport(new URL(server.url), { fetch: recorder.fetch });
    client = new Client(
      { name: "tower-cancel-interop", version: "0.0.0" },
      { versionNegotiation: { mode: { pin: VERSION } } },
    );
    client.onerror = (e) => errors.push(e);
    await withTimeout(client.connect(transport), 5000, "server/discover got no answer");
  });

  after(async () => {
    await client?.close().catch(() => {});
    const exit = await server?.stop();
    assert.doesNotMatch(server?.stderr() ?? "", /panicked/);
    assert.equal(exit?.signal ?? "SIGTERM", "SIGTERM", "the server ended by SIGTERM");
  });

  it("connect: server/discover, no initialize, no session", () => {
    assert.equal(client.getProtocolEra(), "modern");
    assert.equal(client.getNegotiatedProtocolVersion(), VERSION);
    assert.equal(client.getServerVersion()?.name, "tower-cancel-mcp-example");
    assert.deepEqual(client.getServerCapabilities(), { tools: {} });
    const [discover] = recorder.posted((m) => m.method === "server/discover");
    assert.equal(discover.headers["mcp-protocol-version"], VERSION);
    assert.equal(discover.status, 200);
    const [reply] = messagesOf(discover);
    assert.deepEqual(reply.result.supportedVersions, [VERSION]);
    assert.equal(reply.result.resultType, "complete");
    assert.deepEqual(recorder.posted((m) => m.method === "initialize"), []);
    assert.ok(recorder.exchanges.every((ex) => ex.sessionId === undefined), "no Mcp-Session-Id minted");
  });

  it("tools/list has confirm, progress, sleep and stats, with its cache fields", async () => {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ["confirm", "progress", "sleep", "stats"]);
    const [list] = recorder.posted((m) => m.method === "tools/list");
    const [reply] = messagesOf(list);
    assert.equal(reply.result.resultType, "complete");
    assert.equal(reply.result.ttlMs, 0);
    assert.equal(reply.result.cacheScope, "private");
  });

  it("a sleep aborted by an AbortSignal: the client closes the stream, the handler stops, no reply", async () => {
    const before = await stats();
    const ac = new AbortController();
    const started = Date.now();
    const pending = client.callTool({ name: "sleep", arguments: { ms: 10000 } }, { signal: ac.signal });
    setTimeout(() => ac.abort(new Error("user pressed stop")), 200);
    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, started, "tools/call sleep aborted after 200 ms"),
      5000,
      "the aborted call did not reject",
    );
    assert.ok(error instanceof SdkError, `expected an SdkError, got ${error}`);
    assert.equal(error.code, SdkErrorCode.RequestTimeout); // the client's local code for an abort too
    assert.ok(elapsedMs < 1000, `rejection took ${elapsedMs} ms`);

    const call = callExchange({ ms: 10000 });
    assert.equal(call.headers["mcp-method"], "tools/call");
    assert.equal(call.headers["mcp-name"], "sleep");
    assert.ok(call.aborted, "the client aborted the request's fetch");
    // Closing the stream is the whole cancel: nothing else is POSTed.
    assert.deepEqual(recorder.posted((m) => m.method === "notifications/cancelled"), []);
    const after = await untilCancelled(before);
    assert.equal(after.started, before.started + 1);
    assert.equal(after.completed, before.completed);
    assert.deepEqual(messagesOf(call).filter((m) => m.id === call.body.id), [], "no reply to a cancelled request");
  });

  it("a sleep past the client's timeout: the client closes the stream, the handler stops", async () => {
    const before = await stats();
    const started = Date.now();
    const { error, elapsedMs } = await withTimeout(
      expectRejection(
        client.callTool({ name: "sleep", arguments: { ms: 10001 } }, { timeout: 300 }),
        started,
        "tools/call sleep with timeout 300",
      ),
      5000,
      "the timed-out call did not reject",
    );
    assert.ok(error instanceof SdkError, `expected an SdkError, got ${error}`);
    assert.equal(error.code, SdkErrorCode.RequestTimeout);
    assert.ok(elapsedMs >= 290 && elapsedMs < 1500, `rejection took ${elapsedMs} ms`);
    const call = callExchange({ ms: 10001 });
    assert.ok(call.aborted, "the client aborted the request's fetch");
    assert.deepEqual(recorder.posted((m) => m.method === "notifications/cancelled"), []);
    const after = await untilCancelled(before);
    assert.equal(after.completed, before.completed);
    assert.deepEqual(messagesOf(call).filter((m) => m.id === call.body.id), []);
  });

  it("progress with onprogress and resetTimeoutOnProgress outlives its timeout and completes", async () => {
    const before = await stats();
    const seen = [];
    const res = await withTimeout(
      client.callTool(
        { name: "progress", arguments: { steps: 5, intervalMs: 100 } },
        {
          onprogress: (p) => seen.push(p),
          timeout: 300, // shorter than the call (500 ms), longer than a step (100 ms)
          resetTimeoutOnProgress: true,
        },
      ),
      5000,
      "the progress call hung",
    );
    assert.deepEqual(res.structuredContent, { steps: 5 });
    assert.deepEqual(
      seen,
      [1, 2, 3, 4, 5].map((i) => ({ progress: i, total: 5, message: `step ${i} of 5` })),
    );
    const call = callExchange({ steps: 5, intervalMs: 100 });
    assert.equal(call.body.params._meta?.progressToken, call.body.id, "the client asked for progress");
    assert.match(call.contentType ?? "", /^text\/event-stream/, "progress makes an SSE stream");
    assert.equal(call.aborted, false);
    const messages = messagesOf(call);
    assert.equal(messages.at(-1).result.resultType, "complete");
    const after = await stats();
    assert.equal(after.completed, before.completed + 1);
    assert.equal(after.cancelled, before.cancelled);
  });

  it("an unknown tool: 400 with -32602, a ProtocolError for the caller", async () => {
    const { error } = await expectRejection(
      client.callTool({ name: "nope", arguments: {} }),
      Date.now(),
      "tools/call of an unknown tool",
    );
    assert.ok(error instanceof ProtocolError, `expected a ProtocolError, got ${error}`);
    assert.equal(error.code, -32602);
    const [call] = recorder.posted((m) => m.method === "tools/call" && m.params?.name === "nope");
    assert.equal(call.status, 400);
  });

  it("confirm: this revision has no requests from server to client, so the tool says so (no hang)", async () => {
    const res = await withTimeout(
      client.callTool({ name: "confirm", arguments: { action: "deploy" } }),
      5000,
      "confirm hung",
    );
    assert.equal(res.isError, true);
    assert.match(res.content[0].text, /stateless revision \(2026-07-28\) sends the client no requests/);
    const [call] = recorder.posted((m) => m.method === "tools/call" && m.params?.name === "confirm");
    assert.deepEqual(
      messagesOf(call).map((m) => m.method ?? "reply"),
      ["reply"],
      "nothing but the reply: no elicitation/create",
    );
  });

  it("listen(): acknowledged; the server ends it after 300 ms with notifications/cancelled on its stream", async () => {
    const errorsBefore = errors.length;
    const started = Date.now();
    const subscription = await withTimeout(client.listen({ toolsListChanged: true }), 5000, "listen() never acknowledged");
    assert.deepEqual(subscription.honoredFilter, { toolsListChanged: true });
    const cause = await withTimeout(subscription.closed, 5000, "the subscription never ended");
    const elapsed = Date.now() - started;
    // The SDK's name for an end without a result; it takes the server's cancel as the subscription's end.
    assert.equal(cause, "remote");
    assert.ok(elapsed >= 290, `ended after ${elapsed} ms`);
    const [listen] = recorder.posted((m) => m.method === "subscriptions/listen");
    // The SDK aborts its fetch once the cancel told it the subscription is over (so the recorder may not see the
    // body's end); what came on the stream is the acknowledgment and the teardown, and nothing after them.
    await waitFor(() => messagesOf(listen).length >= 2, 2000, "the teardown never came on the listen's stream");
    await sleep(200);
    assert.deepEqual(messagesOf(listen), [
      {
        jsonrpc: "2.0",
        method: "notifications/subscriptions/acknowledged",
        params: {
          _meta: { "io.modelcontextprotocol/subscriptionId": listen.body.id },
          notifications: { toolsListChanged: true },
        },
      },
      {
        jsonrpc: "2.0",
        method: "notifications/cancelled",
        params: { requestId: listen.body.id, reason: "subscription ended by the server" },
      },
    ]);
    assert.deepEqual(errors.slice(errorsBefore).map(String), [], "nothing the SDK could not place");
  });

  it("listen() closed by the client: the stream is closed, the server sends nothing more for it", async () => {
    const subscription = await withTimeout(client.listen({ toolsListChanged: true }), 5000, "listen() never acknowledged");
    await subscription.close();
    assert.equal(await subscription.closed, "local");
    const listens = recorder.posted((m) => m.method === "subscriptions/listen");
    const listen = listens.at(-1);
    await withTimeout(listen.ended, 2000, "the closed listen's exchange never ended");
    await sleep(500);
    assert.deepEqual(
      messagesOf(listen).map((m) => m.method ?? "result"),
      ["notifications/subscriptions/acknowledged"],
      "no teardown and no result after the client's own close",
    );
  });

  it("a short sleep completes, and the client reported no errors", async () => {
    const res = await withTimeout(client.callTool({ name: "sleep", arguments: { ms: 50 } }), 5000, "sleep 50 hung");
    assert.deepEqual(res.structuredContent, { slept: 50 });
    assert.deepEqual(errors.map(String), []);
  });
});
