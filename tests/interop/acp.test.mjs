// acp_agent driven by the official ACP TypeScript SDK (@agentclientprotocol/sdk).
//
// SDK 2.4.0 no longer has ClientSideConnection: clients are built with `client()` and
// `connect(ndJsonStream(...))`, then call the agent through `connection.agent`
// (`request(method, params, options)` / `notify(...)`; extension methods such as
// `_demo/sleep` go through the same `request`).
//
// Per-request cancellation in this SDK: `SendRequestOptions.cancellationSignal` (an
// AbortSignal). Aborting it sends `$/cancel_request {"requestId": <id>}`
// (dist/core/jsonrpc.js: `const CANCEL_REQUEST_METHOD = "$/cancel_request"`) and keeps
// waiting for the agent's reply; with `stopWaitingOnCancel: true` it rejects at once with
// -32800 and drops the late reply. No capability is declared or checked. That is the
// CURRENT ACP dialect, so the agent is spawned WITHOUT `--draft` (the draft dialect's
// `$/cancelRequest {id}` is not something this SDK sends).
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { spawnServer, sleep, withTimeout, expectRejection, NdjsonRecorder } from "./helpers.mjs";

const REQUEST_CANCELLED = -32800;

/** Spawns acp_agent and connects an SDK client to it, recording the bytes both ways. */
function connectAgent(args = []) {
  const server = spawnServer("acp_agent", args);
  const sent = new NdjsonRecorder();
  const received = new NdjsonRecorder();
  const stdin = server.child.stdin;
  const output = new WritableStream({
    write(chunk) {
      sent.feed(chunk);
      return new Promise((resolve, reject) => stdin.write(chunk, (err) => (err ? reject(err) : resolve())));
    },
    close() {
      stdin.end();
    },
  });
  const input = Readable.toWeb(server.child.stdout).pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        received.feed(chunk);
        controller.enqueue(chunk);
      },
    }),
  );
  const app = acp
    .client({ name: "tower-cancel-interop" })
    // The agent may stream session/update notifications; accept and ignore them.
    .onNotification(acp.methods.client.session.update, () => {});
  const connection = app.connect(acp.ndJsonStream(output, input));
  return { server, connection, agent: connection.agent, sent, received };
}

/** Polls `_demo/stats` until `predicate` holds of it (a hang guard, not a timing); gives the stats. */
async function waitForStats(h, predicate, msg) {
  const deadline = Date.now() + 5000;
  for (;;) {
    const stats = await h.agent.request("_demo/stats", {});
    if (predicate(stats)) return stats;
    if (Date.now() >= deadline) throw new Error(`${msg}: ${JSON.stringify(stats)}`);
    await sleep(20);
  }
}

/** The id the SDK gave to the (first) request with this method and matching params. */
function requestIdOf(recorder, method, pred = () => true) {
  const m = recorder.messages.find((x) => x.method === method && "id" in x && pred(x.params));
  assert.ok(m, `no ${method} request on the wire; sent: ${recorder.lines.join("\n")}`);
  return m.id;
}

describe("acp_agent via @agentclientprotocol/sdk (current dialect, $/cancel_request)", () => {
  let h;
  let sessionId;

  before(() => {
    h = connectAgent();
  });

  after(async () => {
    h?.connection.close();
    await h?.server.stop();
  });

  it("initialize", async () => {
    const res = await withTimeout(
      h.agent.request(acp.methods.agent.initialize, {
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: {},
      }),
      5000,
      "initialize got no answer",
    );
    assert.equal(res.protocolVersion, 1);
    assert.deepEqual(res.agentCapabilities, {
      loadSession: false,
      promptCapabilities: { image: false, audio: false, embeddedContext: false },
    });
    assert.deepEqual(res.authMethods, []);
  });

  it("session/new", async () => {
    const res = await withTimeout(
      h.agent.request(acp.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] }),
      5000,
      "session/new got no answer",
    );
    assert.match(res.sessionId, /^sess-\d+$/);
    sessionId = res.sessionId;
  });

  it("_demo/sleep aborted via cancellationSignal rejects with -32800 from the agent", async () => {
    const ac = new AbortController();
    const started = Date.now();
    const pending = h.agent.request("_demo/sleep", { ms: 10000 }, { cancellationSignal: ac.signal });
    setTimeout(() => ac.abort(), 200);
    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, started, "_demo/sleep {ms:10000} aborted after 200 ms"),
      5000,
      "aborted _demo/sleep was not answered within 5 s",
    );
    assert.ok(error instanceof acp.RequestError, `expected a RequestError, got ${error}`);
    assert.equal(error.code, REQUEST_CANCELLED);
    assert.ok(elapsedMs < 3000, `the cancel took ${elapsedMs} ms to be answered`);

    // On the wire: the SDK sent `$/cancel_request {requestId}` and the agent answered -32800.
    const id = requestIdOf(h.sent, "_demo/sleep", (p) => p?.ms === 10000);
    const cancels = h.sent.messages.filter((m) => m.method === "$/cancel_request");
    assert.deepEqual(cancels.map((m) => m.params), [{ requestId: id }]);
    const replies = h.received.messages.filter((m) => m.id === id);
    assert.equal(replies.length, 1, `replies for id ${id}: ${JSON.stringify(replies)}`);
    assert.equal(replies[0].error?.code, REQUEST_CANCELLED);
    assert.equal(replies[0].error?.message, "Request cancelled");
  });

  it("_demo/stats shows it cancelled and nothing in flight", async () => {
    // Polled: acp_agent_sdk's handler runs in a task spawned on the SDK's connection, which stops when it sees
    // its RequestCancellation, fired just after the stack answered -32800 (acp_agent's stops before the answer).
    const stats = await waitForStats(
      h,
      (s) => s.cancelled >= 1 && s.inFlight === 0,
      "the cancelled sleep was not counted cancelled, or something is still in flight",
    );
    assert.ok(stats.started >= 1, `stats: ${JSON.stringify(stats)}`);
  });

  it("stopWaitingOnCancel rejects at once and the agent still cancels the work", async () => {
    const before = await h.agent.request("_demo/stats", {});
    const ac = new AbortController();
    const started = Date.now();
    const pending = h.agent.request(
      "_demo/sleep",
      { ms: 9000 },
      { cancellationSignal: ac.signal, stopWaitingOnCancel: true },
    );
    await sleep(200);
    ac.abort();
    const { error, elapsedMs } = await expectRejection(pending, started, "_demo/sleep with stopWaitingOnCancel");
    assert.ok(error instanceof acp.RequestError, `expected a RequestError, got ${error}`);
    assert.equal(error.code, REQUEST_CANCELLED);
    assert.ok(elapsedMs < 1000, `rejection took ${elapsedMs} ms`);

    // The agent still answers the request once (the SDK drops it quietly).
    const id = requestIdOf(h.sent, "_demo/sleep", (p) => p?.ms === 9000);
    const deadline = Date.now() + 3000;
    while (!h.received.messages.some((m) => m.id === id) && Date.now() < deadline) await sleep(20);
    const replies = h.received.messages.filter((m) => m.id === id);
    assert.equal(replies.length, 1, `replies for id ${id}: ${JSON.stringify(replies)}`);
    assert.equal(replies[0].error?.code, REQUEST_CANCELLED);

    // Polled for acp_agent_sdk's spawned handler, as above; exactly one more cancelled, nothing in flight.
    const after = await waitForStats(
      h,
      (s) => s.cancelled >= before.cancelled + 1 && s.inFlight === 0,
      `the sleep was not counted cancelled (before ${JSON.stringify(before)})`,
    );
    assert.equal(after.cancelled, before.cancelled + 1, `before ${JSON.stringify(before)} after ${JSON.stringify(after)}`);
  });

  it("session/prompt aborted via cancellationSignal rejects with -32800", async () => {
    const ac = new AbortController();
    const started = Date.now();
    const pending = h.agent.request(
      acp.methods.agent.session.prompt,
      { sessionId, prompt: [{ type: "text", text: "take your time" }] },
      { cancellationSignal: ac.signal },
    );
    setTimeout(() => ac.abort(), 200);
    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, started, "session/prompt aborted after 200 ms"),
      5000,
      "aborted session/prompt was not answered within 5 s",
    );
    assert.ok(error instanceof acp.RequestError, `expected a RequestError, got ${error}`);
    assert.equal(error.code, REQUEST_CANCELLED);
    assert.ok(elapsedMs < 2000, `the cancel took ${elapsedMs} ms to be answered (prompt runs 3000 ms)`);
  });

  it("session/prompt then session/cancel resolves with stopReason cancelled", async () => {
    const started = Date.now();
    const pending = h.agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "never mind" }],
    });
    await sleep(200);
    await h.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    const res = await withTimeout(pending, 5000, "session/prompt did not end after session/cancel");
    assert.equal(res.stopReason, "cancelled");
    const elapsedMs = Date.now() - started;
    assert.ok(elapsedMs < 2000, `session/cancel took ${elapsedMs} ms to end the prompt (prompt runs 3000 ms)`);
  });

  it("session/cancel ends the prompt, stops the session's _demo/sleep calls, and another session's sleep runs on", async () => {
    const other = (await h.agent.request(acp.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] }))
      .sessionId;
    assert.notEqual(other, sessionId);
    const before = await h.agent.request("_demo/stats", {});
    const started = Date.now();
    const prompt = h.agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "stop everything" }],
    });
    const sleeps = [10001, 10002].map((ms) => h.agent.request("_demo/sleep", { ms, sessionId }));
    const otherSleep = h.agent.request("_demo/sleep", { ms: 1500, sessionId: other });
    // The prompt and the three sleeps are running.
    await waitForStats(h, (s) => s.started === before.started + 4, "the prompt and the sleeps did not start");

    // The SDK's session cancel: a notification, `session/cancel {sessionId}`.
    await h.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    const res = await withTimeout(prompt, 5000, "session/prompt did not end after session/cancel");
    assert.equal(res.stopReason, "cancelled");
    for (const pending of sleeps) {
      const { error, elapsedMs } = await withTimeout(
        expectRejection(pending, started, "_demo/sleep of the cancelled session"),
        5000,
        "a _demo/sleep of the cancelled session was not answered",
      );
      assert.ok(error instanceof acp.RequestError, `expected a RequestError, got ${error}`);
      assert.equal(error.code, REQUEST_CANCELLED);
      assert.equal(error.message, "Request cancelled");
      assert.ok(elapsedMs < 5000, `the sleep took ${elapsedMs} ms to be answered (it sleeps 10 s)`);
    }
    // On the wire: exactly one answer each, and no request cancel was sent for them (the session's was enough).
    for (const ms of [10001, 10002]) {
      const id = requestIdOf(h.sent, "_demo/sleep", (p) => p?.ms === ms);
      const replies = h.received.messages.filter((m) => m.id === id);
      assert.equal(replies.length, 1, `replies for id ${id}: ${JSON.stringify(replies)}`);
      assert.equal(replies[0].error?.code, REQUEST_CANCELLED);
      assert.ok(
        !h.sent.messages.some((m) => m.method === "$/cancel_request" && m.params?.requestId === id),
        `the client sent a request cancel for ${id}`,
      );
    }

    // The other session's sleep runs on to its end.
    assert.deepEqual(await withTimeout(otherSleep, 5000, "the other session's _demo/sleep hung"), { slept: 1500 });
    // The prompt and both sleeps stopped (their handlers dropped), the other sleep completed, nothing in flight.
    const after = await waitForStats(
      h,
      (s) => s.cancelled === before.cancelled + 3 && s.inFlight === 0,
      "the cancelled handlers did not stop",
    );
    assert.equal(after.completed, before.completed + 1, `before ${JSON.stringify(before)} after ${JSON.stringify(after)}`);
  });

  it("a session/cancel with nothing in flight is forgotten: the next prompt runs", async () => {
    await h.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    const res = await withTimeout(
      h.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "again" }] }),
      8000,
      "the prompt after a stray session/cancel did not end",
    );
    assert.equal(res.stopReason, "end_turn");
  });

  it("a normal _demo/sleep resolves with {slept}", async () => {
    const res = await withTimeout(h.agent.request("_demo/sleep", { ms: 50 }), 5000, "_demo/sleep {ms:50} hung");
    assert.deepEqual(res, { slept: 50 });
    const stats = await h.agent.request("_demo/stats", {});
    assert.equal(stats.inFlight, 0, `stats: ${JSON.stringify(stats)}`);
    assert.ok(stats.completed >= 1, `stats: ${JSON.stringify(stats)}`);
  });
});

describe("acp_agent session/prompt with the ActiveSession helper", () => {
  let h;
  before(() => {
    h = connectAgent(["--prompt-ms", "300"]);
  });
  after(async () => {
    h?.connection.close();
    await h?.server.stop();
  });

  it("an uncancelled prompt ends with end_turn", async () => {
    await h.agent.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {},
    });
    const session = await h.agent.buildSession(process.cwd()).start();
    try {
      const res = await withTimeout(session.prompt("hello"), 5000, "session/prompt hung");
      assert.equal(res.stopReason, "end_turn");
    } finally {
      session.dispose();
    }
  });
});
