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
import { McpError, ErrorCode } from "@modelcontextprotocol/sdk/types.js";
import { spawnServer, sleep, withTimeout, expectRejection, NdjsonRecorder } from "./helpers.mjs";

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

  it("tools/list has sleep and stats", async () => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, ["progress", "sleep", "stats"]);
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
