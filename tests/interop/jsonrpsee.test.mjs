// jsonrpsee_server (a jsonrpsee server under tower-cancel-jsonrpsee) driven by Node's own fetch and by the `ws`
// package: JSON-RPC over HTTP POST and over WebSocket on one port. A WebSocket that closes, an aborted fetch and a
// `$/cancelRequest` on the same WebSocket stop the handler; the cancel and a timeout are answered -32800.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { withTimeout, expectRejection } from "./helpers.mjs";
import { spawnHttpServer, pollUntil } from "./http.mjs";

const CANCELLED = { code: -32800, message: "Request cancelled" };

/** A WebSocket to `url` whose text frames are parsed and queued, read one at a time with `next()`. */
async function openSocket(url) {
  const socket = new WebSocket(url);
  const queued = [];
  const waiting = [];
  socket.on("message", (data) => {
    const message = JSON.parse(data.toString());
    const waiter = waiting.shift();
    if (waiter) waiter(message);
    else queued.push(message);
  });
  await withTimeout(new Promise((resolve, reject) => {
    socket.once("open", resolve);
    socket.once("error", reject);
  }), 5000, "the WebSocket did not open");
  return {
    socket,
    send: (message) => socket.send(JSON.stringify({ jsonrpc: "2.0", ...message })),
    next: () => withTimeout(
      queued.length ? Promise.resolve(queued.shift()) : new Promise((resolve) => waiting.push(resolve)),
      5000,
      "no reply on the WebSocket",
    ),
    close: () => socket.close(),
  };
}

function servedBy(args) {
  const state = { server: undefined, nextId: 1 };
  before(async () => {
    state.server = await spawnHttpServer("jsonrpsee_server", args);
  });
  after(async () => {
    const exit = await state.server?.stop();
    assert.doesNotMatch(state.server?.stderr() ?? "", /panicked/);
    assert.equal(exit?.signal ?? "SIGTERM", "SIGTERM", "the server ended by SIGTERM");
  });
  return state;
}

describe("jsonrpsee_server via fetch and ws", () => {
  const state = servedBy([]);

  async function rpc(method, params, init = {}) {
    const res = await fetch(state.server.url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: state.nextId++, method, params }),
      ...init,
    });
    return { status: res.status, body: JSON.parse(await res.text()) };
  }

  async function stats() {
    const { body } = await withTimeout(rpc("demo/stats"), 5000, "demo/stats hung");
    return body.result;
  }

  const wsUrl = () => state.server.url.replace(/^http:/, "ws:");

  it("prints exactly one line, and answers over HTTP and over WebSocket on that port", async () => {
    assert.deepEqual(state.server.stdout, [`listening on ${state.server.url}`]);
    assert.match(state.server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    const id = state.nextId;
    const res = await withTimeout(rpc("demo/sleep", { ms: 20 }), 5000, "demo/sleep hung");
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, { jsonrpc: "2.0", id, result: { slept: 20 } });
    const ws = await openSocket(wsUrl());
    ws.send({ id: 1, method: "demo/sleep", params: { ms: 5 } });
    assert.deepEqual(await ws.next(), { jsonrpc: "2.0", id: 1, result: { slept: 5 } });
    ws.send({ id: 2, method: "demo/nope" });
    assert.equal((await ws.next()).error.code, -32601);
    ws.close();
  });

  it("a fetch aborted mid-call stops the handler", async () => {
    const before = await stats();
    const ac = new AbortController();
    const started = Date.now();
    setTimeout(() => ac.abort(), 200);
    const { error } = await withTimeout(
      expectRejection(rpc("demo/sleep", { ms: 60000 }, { signal: ac.signal }), started, "aborted demo/sleep"),
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
    assert.equal(after.completed, before.completed);
  });

  it("$/cancelRequest on the same WebSocket stops the call, answered -32800", async () => {
    const before = await stats();
    const ws = await openSocket(wsUrl());
    ws.send({ id: 7, method: "demo/sleep", params: { ms: 60000 } });
    await pollUntil(stats, (s) => s.started === before.started + 1, 3000, "the call started");
    ws.send({ method: "$/cancelRequest", params: { id: 7 } });
    assert.deepEqual(await ws.next(), { jsonrpc: "2.0", id: 7, error: CANCELLED });
    const after = await pollUntil(stats, (s) => s.inFlight === 0, 3000, "nothing in flight");
    assert.equal(after.cancelled, before.cancelled + 1);
    ws.close();
  });

  it("a cancel that comes before its call makes it answered -32800 without running", async () => {
    const before = await stats();
    const ws = await openSocket(wsUrl());
    // In one batch, read in order: the cancel is taken before its call is. (Sent as two messages, jsonrpsee
    // would run each on a task of its own, in either order.)
    ws.socket.send(JSON.stringify([
      { jsonrpc: "2.0", method: "$/cancelRequest", params: { id: "early" } },
      { jsonrpc: "2.0", id: "early", method: "demo/sleep", params: { ms: 60000 } },
    ]));
    assert.deepEqual(await ws.next(), [{ jsonrpc: "2.0", id: "early", error: CANCELLED }]);
    const after = await stats();
    assert.equal(after.started, before.started, "the call never ran");
    ws.close();
  });

  it("a WebSocket that closes stops its calls", async () => {
    const before = await stats();
    const ws = await openSocket(wsUrl());
    ws.send({ id: 1, method: "demo/sleep", params: { ms: 60000 } });
    ws.send({ id: 2, method: "demo/sleep", params: { ms: 60000 } });
    await pollUntil(stats, (s) => s.started === before.started + 2, 3000, "both calls started");
    ws.close();
    const after = await pollUntil(
      stats,
      (s) => s.cancelled === before.cancelled + 2 && s.inFlight === 0,
      3000,
      "both handlers stopped",
    );
    assert.equal(after.completed, before.completed);
  });
});

describe("jsonrpsee_server --timeout-ms 200", () => {
  const state = servedBy(["--timeout-ms", "200"]);

  it("a call past the timeout is stopped and answered -32800", async () => {
    const ws = await openSocket(state.server.url.replace(/^http:/, "ws:"));
    ws.send({ id: 1, method: "demo/sleep", params: { ms: 60000 } });
    assert.deepEqual(await ws.next(), { jsonrpc: "2.0", id: 1, error: CANCELLED });
    ws.close();
    const res = await fetch(state.server.url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "demo/stats" }),
    });
    const { result } = JSON.parse(await res.text());
    assert.equal(result.cancelled, 1);
    assert.equal(result.inFlight, 0);
  });
});
