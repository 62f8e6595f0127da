// lsp_server driven by vscode-jsonrpc (the JSON-RPC library under VS Code's LSP client).
// Cancellation goes through the library's own machinery: a CancellationToken passed to
// sendRequest makes it send `$/cancelRequest {id}` and keep waiting for the server's reply.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import rpc from "vscode-jsonrpc/node";
import { spawnServer, sleep, withTimeout, expectRejection } from "./helpers.mjs";

const {
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  CancellationTokenSource,
  ResponseError,
  ErrorCodes,
} = rpc;

// LSP's RequestCancelled (LSPErrorCodes.RequestCancelled in vscode-languageserver-protocol).
const REQUEST_CANCELLED = -32800;

describe("lsp_server via vscode-jsonrpc", () => {
  let server;
  let conn;
  const sent = []; // every JSON-RPC message the library wrote
  const received = []; // every JSON-RPC message the server wrote
  const connErrors = [];

  before(async () => {
    server = spawnServer("lsp_server");
    const reader = new StreamMessageReader(server.child.stdout);
    const writer = new StreamMessageWriter(server.child.stdin);
    // Record traffic without changing it.
    const write = writer.write.bind(writer);
    writer.write = (msg) => {
      sent.push(msg);
      return write(msg);
    };
    const listen = reader.listen.bind(reader);
    reader.listen = (cb) =>
      listen((msg) => {
        received.push(msg);
        cb(msg);
      });
    conn = createMessageConnection(reader, writer);
    conn.onError((e) => connErrors.push(e));
    conn.listen();
  });

  after(async () => {
    conn?.dispose();
    await server?.stop();
  });

  let initResult;

  it("initialize answers with capabilities and serverInfo", async () => {
    initResult = await withTimeout(
      conn.sendRequest("initialize", { processId: process.pid, rootUri: null, capabilities: {} }),
      5000,
      "initialize got no answer",
    );
    await conn.sendNotification("initialized", {});
    assert.deepEqual(Object.keys(initResult).sort(), ["capabilities", "serverInfo"]);
    assert.deepEqual(initResult.capabilities, {});
    assert.equal(initResult.serverInfo?.name, "tower-cancel-lsp-example");
  });

  it("serverInfo.version is 0.1.0", () => {
    assert.equal(initResult?.serverInfo?.version, "0.1.0");
  });

  it("a cancelled demo/sleep rejects with ResponseError -32800", async () => {
    const cts = new CancellationTokenSource();
    const started = Date.now();
    const pending = conn.sendRequest("demo/sleep", { ms: 10000 }, cts.token);
    setTimeout(() => cts.cancel(), 200);
    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, started, "demo/sleep {ms:10000} cancelled after 200 ms"),
      5000,
      "cancelled demo/sleep was not answered within 5 s",
    );
    assert.ok(error instanceof ResponseError, `expected a ResponseError, got ${error}`);
    assert.equal(error.code, REQUEST_CANCELLED);
    assert.equal(error.message, "Request cancelled");
    assert.ok(elapsedMs < 3000, `the cancel took ${elapsedMs} ms to be answered`);

    // The library (not this test) sent the cancel, with the request's id.
    const req = sent.find((m) => m.method === "demo/sleep" && m.params?.ms === 10000);
    assert.ok(req, "demo/sleep request not seen on the wire");
    const cancel = sent.find((m) => m.method === "$/cancelRequest");
    assert.deepEqual(cancel?.params, { id: req.id });
    // Exactly one reply for that id, the error.
    const replies = received.filter((m) => m.id === req.id);
    assert.equal(replies.length, 1, `replies for id ${req.id}: ${JSON.stringify(replies)}`);
    assert.deepEqual(replies[0].error, { code: REQUEST_CANCELLED, message: "Request cancelled" });
  });

  it("demo/stats shows the cancellation and nothing in flight", async () => {
    const stats = await withTimeout(conn.sendRequest("demo/stats", {}), 5000, "demo/stats got no answer");
    assert.ok(stats.started >= 1, `stats: ${JSON.stringify(stats)}`);
    assert.ok(stats.cancelled >= 1, `stats: ${JSON.stringify(stats)}`);
    assert.equal(stats.inFlight, 0, `stats: ${JSON.stringify(stats)}`);
  });

  it("a normal demo/sleep resolves with {slept}", async () => {
    const result = await withTimeout(conn.sendRequest("demo/sleep", { ms: 50 }), 5000, "demo/sleep {ms:50} hung");
    assert.deepEqual(result, { slept: 50 });
  });

  it("cancelling a token after completion leaves the normal result", async () => {
    const cts = new CancellationTokenSource();
    const result = await withTimeout(
      conn.sendRequest("demo/sleep", { ms: 50 }, cts.token),
      5000,
      "demo/sleep {ms:50} hung",
    );
    cts.cancel();
    await sleep(100);
    assert.deepEqual(result, { slept: 50 });
    const stats = await conn.sendRequest("demo/stats", {});
    assert.ok(stats.completed >= 2, `stats: ${JSON.stringify(stats)}`);
    assert.equal(stats.inFlight, 0, `stats: ${JSON.stringify(stats)}`);
  });

  it("an unknown request gets -32601", async () => {
    const { error } = await expectRejection(conn.sendRequest("demo/nope", {}), Date.now(), "demo/nope");
    assert.ok(error instanceof ResponseError, `expected a ResponseError, got ${error}`);
    assert.equal(error.code, ErrorCodes.MethodNotFound);
  });

  it("shutdown then exit ends the process with 0", async () => {
    assert.equal(await withTimeout(conn.sendRequest("shutdown"), 5000, "shutdown hung"), null);
    await conn.sendNotification("exit");
    const { code, signal } = await withTimeout(server.exited, 3000, "lsp_server did not exit after `exit`");
    assert.equal(signal, null);
    assert.equal(code, 0);
    assert.deepEqual(connErrors, []);
  });
});
