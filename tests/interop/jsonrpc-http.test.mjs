// jsonrpc_http_server driven by Node's own fetch (undici): plain JSON-RPC over HTTP POST, where a
// client that hangs up (an aborted fetch closes its connection) cancels its request.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { withTimeout, expectRejection } from "./helpers.mjs";
import { spawnHttpServer, pollUntil } from "./http.mjs";

describe("jsonrpc_http_server via fetch", () => {
  let server;
  let nextId = 1;

  /** POSTs one JSON-RPC request; resolves with {status, contentType, body}. */
  async function rpc(method, params, init = {}) {
    const res = await fetch(server.url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: nextId++, method, params }),
      ...init,
    });
    const text = await res.text();
    return { status: res.status, contentType: res.headers.get("content-type"), body: text ? JSON.parse(text) : undefined };
  }

  async function stats() {
    const { body } = await withTimeout(rpc("demo/stats"), 5000, "demo/stats hung");
    return body.result;
  }

  before(async () => {
    server = await spawnHttpServer("jsonrpc_http_server");
  });

  after(async () => {
    const exit = await server?.stop();
    assert.doesNotMatch(server?.stderr() ?? "", /panicked/);
    assert.equal(exit?.signal ?? "SIGTERM", "SIGTERM", "the server ended by SIGTERM");
  });

  it("prints exactly one line, and the Router's other route answers", async () => {
    assert.deepEqual(server.stdout, [`listening on ${server.url}`]);
    assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+\/rpc$/);
    const health = await fetch(new URL("/health", server.url));
    assert.equal(health.status, 200);
    assert.equal(await health.text(), "ok");
  });

  it("a request is answered with its reply as JSON", async () => {
    const id = nextId;
    const res = await withTimeout(rpc("demo/sleep", { ms: 50 }), 5000, "demo/sleep hung");
    assert.equal(res.status, 200);
    assert.match(res.contentType ?? "", /^application\/json/);
    assert.deepEqual(res.body, { jsonrpc: "2.0", id, result: { slept: 50 } });
  });

  it("an unknown method gets -32601, and GET gets 405", async () => {
    const res = await rpc("demo/nope");
    assert.equal(res.status, 200);
    assert.equal(res.body.error.code, -32601);
    const get = await fetch(server.url);
    assert.equal(get.status, 405);
  });

  it("a fetch aborted mid-request cancels it: the handler stops", async () => {
    const before = await stats();
    const ac = new AbortController();
    const started = Date.now();
    setTimeout(() => ac.abort(), 200);
    const { error } = await withTimeout(
      expectRejection(rpc("demo/sleep", { ms: 10000 }, { signal: ac.signal }), started, "aborted demo/sleep"),
      5000,
      "the aborted fetch did not reject",
    );
    assert.equal(error.name, "AbortError");
    const after = await pollUntil(
      stats,
      (s) => s.cancelled === before.cancelled + 1 && s.inFlight === 0,
      3000,
      `demo/stats after the abort (before: ${JSON.stringify(before)})`,
    );
    assert.equal(after.started, before.started + 1);
    assert.equal(after.completed, before.completed);
  });
});
