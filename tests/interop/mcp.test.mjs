// mcp_server driven by the official MCP TypeScript SDK (@modelcontextprotocol/sdk) Client.
//
// The SDK's StdioClientTransport hides what the server writes, so this file uses a tiny
// Transport of its own (the SDK's Transport interface: start/send/close plus the
// onmessage/onclose/onerror callbacks) that spawns the server, frames NDJSON both ways
// and records every message the server sent. That lets the test prove the MCP rule that a
// cancelled request gets NO reply at all.
//
// Cancellation in this SDK: `RequestOptions.signal`. Aborting it makes the SDK send
// `notifications/cancelled {requestId, reason}` and reject the call at once (with an
// McpError -32001 "RequestTimeout" wrapping the abort reason); any later reply would be
// ignored by the SDK, so the test checks the raw traffic instead.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import {
  McpError,
  ErrorCode,
  ElicitRequestSchema,
  CancelledNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import * as z from "zod";
import {
  spawnServer,
  sleep,
  withTimeout,
  waitFor,
  expectRejection,
  elicitationParams,
  aborted,
  NdjsonRecorder,
} from "./helpers.mjs";

/** A stdio Transport for the MCP SDK that records both directions. */
class RecordingStdioTransport {
  constructor(name, args = []) {
    this.name = name;
    this.args = args;
    this.server = undefined;
    this.fromServer = new NdjsonRecorder(); // every message the server wrote
    this.toServer = []; // every message the client sent
    this.closed = false;
    this.onmessage = undefined;
    this.onclose = undefined;
    this.onerror = undefined;
  }

  async start() {
    if (this.server) throw new Error("RecordingStdioTransport already started");
    this.server = spawnServer(this.name, this.args);
    const { child } = this.server;
    child.stdout.on("data", (chunk) => {
      const before = this.fromServer.messages.length;
      this.fromServer.feed(chunk);
      for (const msg of this.fromServer.messages.slice(before)) {
        if (msg.unparsable !== undefined) {
          this.onerror?.(new Error(`server wrote a non-JSON line: ${msg.unparsable}`));
        } else {
          this.onmessage?.(msg);
        }
      }
    });
    child.on("error", (e) => this.onerror?.(e));
    child.on("exit", () => this._closed());
  }

  async send(message) {
    if (!this.server || this.closed) throw new Error("transport not connected");
    this.toServer.push(message);
    const line = JSON.stringify(message) + "\n";
    await new Promise((resolve, reject) =>
      this.server.child.stdin.write(line, (err) => (err ? reject(err) : resolve())),
    );
  }

  async close() {
    await this.server?.stop();
    this._closed();
  }

  _closed() {
    if (this.closed) return;
    this.closed = true;
    this.onclose?.();
  }
}

describe("mcp_server via @modelcontextprotocol/sdk Client", () => {
  let transport;
  let client;
  const clientErrors = [];

  before(async () => {
    transport = new RecordingStdioTransport("mcp_server");
    client = new Client({ name: "tower-cancel-interop", version: "0.0.0" }, { capabilities: {} });
    client.onerror = (e) => clientErrors.push(e);
    await withTimeout(client.connect(transport), 5000, "initialize got no answer");
  });

  after(async () => {
    await client?.close().catch(() => {});
    await transport?.server?.stop();
  });

  it("initialize negotiated with the server", () => {
    assert.equal(client.getServerVersion()?.name, "tower-cancel-mcp-example");
    assert.deepEqual(client.getServerCapabilities(), { tools: {} });
    const init = transport.toServer.find((m) => m.method === "initialize");
    const reply = transport.fromServer.messages.find((m) => m.id === init.id);
    // The server echoes the client's version when it knows it, else answers 2025-06-18.
    assert.ok(
      [init.params.protocolVersion, "2025-06-18"].includes(reply.result.protocolVersion),
      `protocolVersion: asked ${init.params.protocolVersion}, got ${reply.result.protocolVersion}`,
    );
  });

  it("serverInfo.version is 0.1.0", () => {
    assert.equal(client.getServerVersion()?.version, "0.1.0");
  });

  it("tools/list has confirm, progress, sleep and stats", async () => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, ["confirm", "progress", "sleep", "stats"]);
    const sleepTool = tools.find((t) => t.name === "sleep");
    assert.equal(sleepTool.inputSchema.type, "object");
    assert.equal(sleepTool.inputSchema.properties?.ms?.type, "integer");
  });

  it("an aborted tools/call rejects and the server never answers it", async () => {
    const ac = new AbortController();
    const started = Date.now();
    const pending = client.callTool({ name: "sleep", arguments: { ms: 10000 } }, undefined, {
      signal: ac.signal,
    });
    setTimeout(() => ac.abort("user pressed stop"), 200);
    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, started, "tools/call sleep {ms:10000} aborted after 200 ms"),
      5000,
      "aborted tools/call did not reject",
    );
    assert.ok(error instanceof McpError, `expected an McpError, got ${error}`);
    assert.equal(error.code, ErrorCode.RequestTimeout); // the SDK's local code for abort/timeout
    assert.ok(elapsedMs < 1000, `rejection took ${elapsedMs} ms`);

    // The SDK sent notifications/cancelled for that request id.
    const req = transport.toServer.find((m) => m.method === "tools/call" && m.params?.arguments?.ms === 10000);
    assert.ok(req, "tools/call request not seen on the wire");
    const cancel = transport.toServer.find((m) => m.method === "notifications/cancelled");
    assert.equal(cancel?.params?.requestId, req.id);

    // MCP: the cancelled request gets no reply at all, now or later.
    await sleep(500);
    const replies = transport.fromServer.messages.filter((m) => m.id === req.id);
    assert.deepEqual(replies, [], `server replied to cancelled request ${req.id}: ${JSON.stringify(replies)}`);
  });

  it("the stats tool shows one cancelled and nothing in flight", async () => {
    const res = await withTimeout(client.callTool({ name: "stats", arguments: {} }), 5000, "stats hung");
    const stats = res.structuredContent;
    assert.equal(stats.cancelled, 1, `stats: ${JSON.stringify(stats)}`);
    assert.equal(stats.inFlight, 0, `stats: ${JSON.stringify(stats)}`);
    assert.equal(stats.started, 1, `stats: ${JSON.stringify(stats)}`);
    assert.equal(stats.completed, 0, `stats: ${JSON.stringify(stats)}`);
    // The text content is the same JSON.
    assert.equal(res.content?.[0]?.type, "text");
    assert.deepEqual(JSON.parse(res.content[0].text), stats);
  });

  it("a short sleep succeeds with structuredContent {slept}", async () => {
    const res = await withTimeout(
      client.callTool({ name: "sleep", arguments: { ms: 50 } }),
      5000,
      "tools/call sleep {ms:50} hung",
    );
    assert.deepEqual(res.structuredContent, { slept: 50 });
    assert.deepEqual(res.content, [{ type: "text", text: "slept 50 ms" }]);
    assert.notEqual(res.isError, true);
  });

  it("ping works and the SDK saw no stray or unknown replies", async () => {
    await client.ping();
    // e.g. "Received a response for an unknown message ID" would land here.
    assert.deepEqual(clientErrors.map(String), []);
    const bad = transport.fromServer.messages.filter((m) => m.unparsable !== undefined || m.jsonrpc !== "2.0");
    assert.deepEqual(bad, []);
  });
});

/**
 * `confirm {action}`: the server asks the client with `elicitation/create` (through the SDK Client's elicitation
 * handler), and answers what it said. Cancelling the tool call while the question is open cancels the question:
 * the server sends `notifications/cancelled` naming it, and the SDK aborts the handler's signal.
 */
describe("mcp_server confirm: the SDK client answers the server's elicitation/create", () => {
  let transport;
  let client;
  const clientErrors = [];
  // What the elicitation handler does with the next question: an answer, or wait for its abort signal.
  let answer = { action: "accept", content: {} };
  const asked = [];

  before(async () => {
    transport = new RecordingStdioTransport("mcp_server");
    client = new Client({ name: "tower-cancel-interop", version: "0.0.0" }, { capabilities: { elicitation: {} } });
    client.onerror = (e) => clientErrors.push(e);
    client.setRequestHandler(ElicitRequestSchema, async (request, extra) => {
      const question = { params: request.params, id: extra.requestId, signal: extra.signal };
      asked.push(question);
      if (answer !== "wait") return answer;
      await aborted(extra.signal);
      return { action: "cancel" };
    });
    await withTimeout(client.connect(transport), 5000, "initialize got no answer");
  });

  after(async () => {
    await client?.close().catch(() => {});
    await transport?.server?.stop();
  });

  async function stats() {
    const res = await withTimeout(client.callTool({ name: "stats", arguments: {} }), 5000, "stats hung");
    return res.structuredContent;
  }

  it("accepted: the question is the contract's, and the tool answers confirmed", async () => {
    answer = { action: "accept", content: {} };
    const res = await withTimeout(
      client.callTool({ name: "confirm", arguments: { action: "deploy" } }),
      5000,
      "confirm hung",
    );
    assert.deepEqual(res.content, [{ type: "text", text: "confirmed" }]);
    assert.equal(asked.length, 1);
    assert.deepEqual(elicitationParams(asked[0].params), {
      message: "Allow deploy?",
      requestedSchema: { type: "object", properties: {} },
    });
    // On the wire: the server's request, then the client's answer to that id.
    const question = transport.fromServer.messages.find((m) => m.method === "elicitation/create");
    assert.equal(question.id, asked[0].id);
    const reply = transport.toServer.find((m) => m.id === question.id && m.result);
    assert.equal(reply.result.action, "accept");
  });

  it("declined: the tool answers declined", async () => {
    answer = { action: "decline" };
    const res = await withTimeout(
      client.callTool({ name: "confirm", arguments: { action: "drop the table" } }),
      5000,
      "confirm hung",
    );
    assert.deepEqual(res.content, [{ type: "text", text: "declined" }]);
    assert.equal(asked.at(-1).params.message, "Allow drop the table?");
  });

  it("cancelled while asked: the server cancels the question, the handler's signal fires, no reply", async () => {
    answer = "wait";
    const before = await stats();
    const ac = new AbortController();
    const started = Date.now();
    const pending = client.callTool({ name: "confirm", arguments: { action: "reboot" } }, undefined, {
      signal: ac.signal,
    });
    await waitFor(() => asked.length === 3, 5000, "the server never asked");
    const question = asked[2];
    ac.abort("user pressed stop");
    await withTimeout(expectRejection(pending, started, "the aborted confirm"), 5000, "the aborted call did not reject");
    await withTimeout(
      aborted(question.signal),
      5000,
      "the elicitation handler's abort signal never fired",
    );
    // The server's cancel names the question's id.
    const cancel = transport.fromServer.messages.find(
      (m) => m.method === "notifications/cancelled" && m.params?.requestId === question.id,
    );
    assert.ok(cancel, "no notifications/cancelled for the elicitation");
    assert.equal(cancel.params.reason, "parent request cancelled");
    // The tool call got no reply, and counts as cancelled.
    const call = transport.toServer.find((m) => m.method === "tools/call" && m.params?.arguments?.action === "reboot");
    await sleep(300);
    assert.deepEqual(transport.fromServer.messages.filter((m) => m.id === call.id), []);
    const after = await stats();
    assert.equal(after.cancelled, before.cancelled + 1, JSON.stringify(after));
    assert.equal(after.inFlight, 0, JSON.stringify(after));
    // The SDK sent no answer to the cancelled question.
    assert.deepEqual(transport.toServer.filter((m) => m.id === question.id && !m.method), []);
  });

  it("the SDK reported no errors", () => {
    assert.deepEqual(clientErrors.map(String), []);
  });
});

/**
 * `subscriptions/listen` with `--subscription-ms 300`: the server ends each subscription after 300 ms and says so
 * with `notifications/cancelled` naming the listen request, which is the subscription's end (no result follows).
 * One the client cancels first gets no teardown. (The SDK 1.x Client, of the 2025 revisions, knows no
 * subscriptions: it sends the request as it sends any, and its own cancel handler is replaced with one that
 * records the teardowns; a 2026 client such as the SDK 2.x takes the teardown as the end of its listen.)
 */
describe("mcp_server --subscription-ms 300: the server tears its subscriptions down", () => {
  let transport;
  let client;
  const teardowns = [];
  const acks = [];
  const clientErrors = [];
  const Listened = z.object({ resultType: z.string() }).passthrough();

  before(async () => {
    transport = new RecordingStdioTransport("mcp_server", ["--subscription-ms", "300"]);
    client = new Client({ name: "tower-cancel-interop", version: "0.0.0" }, { capabilities: {} });
    client.onerror = (e) => clientErrors.push(e);
    client.setNotificationHandler(CancelledNotificationSchema, (n) => {
      teardowns.push(n.params);
    });
    client.fallbackNotificationHandler = async (n) => {
      if (n.method === "notifications/subscriptions/acknowledged") acks.push(n.params);
    };
    await withTimeout(client.connect(transport), 5000, "initialize got no answer");
  });

  after(async () => {
    await client?.close().catch(() => {});
    await transport?.server?.stop();
  });

  it("acknowledged, then after 300 ms the teardown naming the listen, and nothing after it", async () => {
    const started = Date.now();
    const ac = new AbortController();
    const pending = client
      .request({ method: "subscriptions/listen", params: { notifications: { toolsListChanged: true } } }, Listened, {
        signal: ac.signal,
      })
      .catch((error) => ({ error }));
    await waitFor(() => teardowns.length === 1, 5000, "the subscription was never torn down");
    const elapsed = Date.now() - started;
    assert.ok(elapsed >= 290, `ended after ${elapsed} ms`);
    const listen = transport.toServer.find((m) => m.method === "subscriptions/listen");
    assert.deepEqual(acks, [
      { _meta: { "io.modelcontextprotocol/subscriptionId": listen.id }, notifications: { toolsListChanged: true } },
    ]);
    assert.deepEqual(teardowns, [{ requestId: listen.id, reason: "subscription ended by the server" }]);
    // On the wire: the acknowledgment, then the teardown, and no result after it.
    await sleep(300);
    const order = transport.fromServer.messages
      .filter((m) => m.id === listen.id || m.params?.requestId === listen.id || m.params?._meta)
      .map((m) => m.method ?? "result");
    assert.deepEqual(order, ["notifications/subscriptions/acknowledged", "notifications/cancelled"]);
    // This SDK does not know the teardown ends its request: it gives up on it itself.
    ac.abort("torn down");
    assert.ok((await pending).error, "the listen request never got a result");
  });

  it("a subscription the client cancels gets no teardown and no result", async () => {
    const ac = new AbortController();
    const pending = client.request(
      { method: "subscriptions/listen", params: { notifications: {} } },
      Listened,
      { signal: ac.signal },
    );
    await waitFor(() => acks.length === 2, 5000, "never acknowledged");
    ac.abort("done listening");
    await pending.catch(() => {});
    const listens = transport.toServer.filter((m) => m.method === "subscriptions/listen");
    const id = listens[1].id;
    const cancel = transport.toServer.find((m) => m.method === "notifications/cancelled" && m.params.requestId === id);
    assert.ok(cancel, "the SDK sent its cancel");
    // Past the server's 300 ms: nothing more for that listen.
    await sleep(600);
    assert.deepEqual(teardowns.length, 1, JSON.stringify(teardowns));
    assert.deepEqual(transport.fromServer.messages.filter((m) => m.id === id), []);
    assert.deepEqual(clientErrors.map(String), []);
  });
});
