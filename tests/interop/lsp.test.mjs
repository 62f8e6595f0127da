// lsp_server driven by vscode-jsonrpc (the JSON-RPC library under VS Code's LSP client).
// Cancellation goes through the library's own machinery: a CancellationToken passed to
// sendRequest makes it send `$/cancelRequest {id}` and keep waiting for the server's reply.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import rpc from "vscode-jsonrpc/node";
import proto from "vscode-languageserver-protocol/node";
import { spawnServer, sleep, withTimeout, expectRejection, waitFor } from "./helpers.mjs";

const {
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  CancellationTokenSource,
  ResponseError,
  ErrorCodes,
} = rpc;

// The protocol package's WorkDoneProgress support: the progress type, the server's create request and the
// client's cancel notification, as VS Code's language client uses them.
const { WorkDoneProgress, WorkDoneProgressCreateRequest, WorkDoneProgressCancelNotification, LSPErrorCodes } = proto;

// LSP's RequestCancelled (LSPErrorCodes.RequestCancelled in vscode-languageserver-protocol).
const REQUEST_CANCELLED = -32800;

describe("lsp_server via vscode-jsonrpc", () => {
  let server;
  let conn;
  const sent = []; // every JSON-RPC message the library wrote
  const received = []; // every JSON-RPC message the server wrote
  const connErrors = [];
  // Server-created progress: every token the server asked to create, in order, and the `$/progress` values each
  // one got (registered before the create is answered, so that no value is missed).
  const created = [];
  const progressOf = new Map();
  let refuseNextCreate = false;

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
    conn.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
      created.push(token);
      if (refuseNextCreate) {
        refuseNextCreate = false;
        return new ResponseError(ErrorCodes.InternalError, "no progress here");
      }
      const values = [];
      progressOf.set(token, values);
      conn.onProgress(WorkDoneProgress.type, token, (value) => values.push(value));
      return null;
    });
    conn.listen();
  });

  after(async () => {
    conn?.dispose();
    await server?.stop();
  });

  let initResult;

  it("initialize answers with capabilities and serverInfo", async () => {
    initResult = await withTimeout(
      conn.sendRequest("initialize", {
        processId: process.pid,
        rootUri: null,
        // The client lets the server create progress tokens (window/workDoneProgress/create).
        capabilities: { window: { workDoneProgress: true } },
      }),
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

  // The n-th token the server asked to create (0-based), once it has.
  async function createdToken(n) {
    await waitFor(() => created.length > n, 5000, "the server sent no window/workDoneProgress/create");
    return created[n];
  }

  it("demo/progress creates a token, reports begin, a report per step and end, and answers {steps}", async () => {
    const before = created.length;
    const result = await withTimeout(
      conn.sendRequest("demo/progress", { steps: 3, intervalMs: 50 }),
      5000,
      "demo/progress {steps:3} hung",
    );
    assert.deepEqual(result, { steps: 3 });
    const token = await createdToken(before);
    // The create request as the server wrote it: a string token.
    const create = received.find((m) => m.method === "window/workDoneProgress/create" && m.params?.token === token);
    assert.equal(typeof create?.params?.token, "string", `create: ${JSON.stringify(create)}`);
    assert.deepEqual(Object.keys(create.params), ["token"]);
    const values = progressOf.get(token);
    await waitFor(() => values.at(-1)?.kind === "end", 2000, `no end: ${JSON.stringify(values)}`);
    assert.deepEqual(values, [
      { kind: "begin", title: "demo/progress", cancellable: true, percentage: 0 },
      { kind: "report", message: "step 1 of 3", percentage: 33 },
      { kind: "report", message: "step 2 of 3", percentage: 66 },
      { kind: "report", message: "step 3 of 3", percentage: 100 },
      { kind: "end" },
    ]);
  });

  it("window/workDoneProgress/cancel of the token stops demo/progress with -32800", async () => {
    const before = created.length;
    const started = Date.now();
    const pending = conn.sendRequest("demo/progress", { steps: 50, intervalMs: 100 });
    const token = await createdToken(before);
    const values = progressOf.get(token);
    await waitFor(() => values.some((v) => v.kind === "report"), 5000, "no report before the cancel");
    await conn.sendNotification(WorkDoneProgressCancelNotification.type, { token });
    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, started, "demo/progress cancelled by its token"),
      5000,
      "the cancelled demo/progress was not answered within 5 s",
    );
    assert.ok(error instanceof ResponseError, `expected a ResponseError, got ${error}`);
    assert.equal(error.code, LSPErrorCodes.RequestCancelled);
    assert.equal(error.message, "Request cancelled");
    assert.ok(elapsedMs < 5000 - 100, `the cancel took ${elapsedMs} ms to be answered`);

    // The progress ends: begin, the reports of the steps done, end.
    await waitFor(() => values.at(-1)?.kind === "end", 2000, `no end: ${JSON.stringify(values)}`);
    assert.equal(values[0].kind, "begin");
    assert.ok(values.length < 52, `every step ran: ${values.length} values`);
    assert.deepEqual(
      values.slice(1, -1).map((v) => v.kind),
      values.slice(1, -1).map(() => "report"),
    );
    // Exactly one reply, the error; the progress's end comes before it (async-lsp's stand-in sends its `end`
    // through async-lsp's own main loop, which the reply does not wait for: CONTRACT.md).
    const req = sent.find((m) => m.method === "demo/progress" && m.params?.steps === 50);
    const replies = received.filter((m) => m.id === req.id && m.method === undefined);
    assert.equal(replies.length, 1, `replies for id ${req.id}: ${JSON.stringify(replies)}`);
    assert.deepEqual(replies[0].error, { code: REQUEST_CANCELLED, message: "Request cancelled" });
    if (!(process.env.INTEROP_SERVERS ?? "").includes("lsp_server_async_lsp")) {
      const end = received.findIndex((m) => m.method === "$/progress" && m.params.token === token && m.params.value.kind === "end");
      assert.ok(end >= 0 && end < received.indexOf(replies[0]), "the end comes before the reply");
    }

    const stats = await withTimeout(conn.sendRequest("demo/stats", {}), 5000, "demo/stats got no answer");
    assert.ok(stats.cancelled >= 2, `stats: ${JSON.stringify(stats)}`);
    assert.equal(stats.inFlight, 0, `stats: ${JSON.stringify(stats)}`);
  });

  it("a token the client refuses gets no progress, and demo/progress still answers {steps}", async () => {
    const before = created.length;
    refuseNextCreate = true;
    const result = await withTimeout(
      conn.sendRequest("demo/progress", { steps: 2, intervalMs: 20 }),
      5000,
      "demo/progress {steps:2} hung",
    );
    assert.deepEqual(result, { steps: 2 });
    const token = await createdToken(before);
    await sleep(100);
    const progress = received.filter((m) => m.method === "$/progress" && m.params?.token === token);
    assert.deepEqual(progress, []);
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
