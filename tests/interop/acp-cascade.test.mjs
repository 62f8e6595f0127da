// acp_agent's nested request, cancelled with the prompt that made it, as the real
// @agentclientprotocol/sdk client sees it.
//
// CONTRACT.md (acp_agent, session/prompt): the agent first sends the CLIENT
// `session/request_permission` and waits for the answer; if the prompt is cancelled meanwhile (by
// `$/cancel_request` for the prompt or by `session/cancel`) the agent sends the client
// `$/cancel_request {"requestId": <the permission request's id>}`.
//
// What the SDK (2.4.0) gives a client request handler, read from its dist:
// - A client implements `session/request_permission` with
//   `acp.client().onRequest(acp.methods.client.session.requestPermission, handler)`. The handler
//   gets ONE argument, a `ClientRequestContext` (dist/v1/stable/acp.d.ts: `ClientRequestHandler =
//   (context: ClientRequestContext<Params>) => MaybePromise<Response>`), whose fields are
//   `method`, `params`, `requestId` (the JSON-RPC id of the incoming request), `agent`, and
//   `signal: AbortSignal` ("AbortSignal for the current request, or the connection signal for
//   notifications"). The value it returns (or resolves to) is sent as the result.
// - Where that signal comes from (dist/core/jsonrpc.js): `toIncomingMessage` makes one
//   `AbortController` per incoming request and stores it in `this.incomingRequests` under the
//   request id; its signal becomes `responder.signal`, which `registerAppRequest`
//   (dist/core/app-handlers.js line 14: `handler(context(params, cx, responder.signal, ...))`)
//   passes on as `ctx.signal`. Every incoming notification first goes through
//   `handleProtocolNotification` (jsonrpc.js lines 735-748): for method `$/cancel_request`
//   (`CANCEL_REQUEST_METHOD`, line 1) it looks up `params.requestId` in `incomingRequests` and calls
//   `controller.abort(RequestError.requestCancelled({requestId}))`, so `ctx.signal` fires with a
//   reason that is a `RequestError` -32800 "Request cancelled" carrying `data: {requestId}`. The
//   controller is dropped when the handler has answered (`finishRequest`), so a late cancel is a
//   no-op. No capability is declared or checked for this.
// - The SDK does NOT answer the cancelled request by itself: the handler decides. If it throws, the
//   SDK answers with the error (`processIncomingMessage` -> `errorToRequestResult`; an AbortError
//   while the signal is aborted becomes -32800, a `RequestError` is sent as is). The handlers below
//   reject with `ctx.signal.reason`, so the client answers the cancelled permission request with
//   -32800 (the agent has given up on it by then; we only record that answer, we don't rely on it).
//
// Traffic is recorded both ways on one ordered log, the way acp.test.mjs records it (the bytes the
// SDK writes to the agent's stdin, the bytes the agent writes to stdout), so "after" below means
// "later on the wire as this process saw it".
import { describe, it, afterEach } from "node:test";
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { spawnServer, withTimeout, waitFor, expectRejection, NdjsonRecorder, sleep } from "./helpers.mjs";

const REQUEST_CANCELLED = -32800;
const CANCEL = acp.methods.protocol.cancelRequest; // "$/cancel_request"
const PERMISSION = acp.methods.client.session.requestPermission; // "session/request_permission"

/** The permission request acp_agent sends, as CONTRACT.md spells it (minus id and sessionId). */
function expectedPermissionParams(sessionId) {
  return {
    sessionId,
    toolCall: { toolCallId: "think-1", title: "Think for a while", kind: "think", status: "pending" },
    options: [
      { optionId: "allow", name: "Allow", kind: "allow_once" },
      { optionId: "reject", name: "Reject", kind: "reject_once" },
    ],
  };
}

/**
 * Spawns acp_agent and connects an SDK client whose `session/request_permission` handler is
 * `onPermission(ctx)`. Records every message both ways on `log` ({dir: "out"|"in", msg, line}).
 */
function connectAgent(args, onPermission) {
  const server = spawnServer("acp_agent", args);
  const sent = new NdjsonRecorder();
  const received = new NdjsonRecorder();
  const log = [];
  const record = (recorder, dir, chunk) => {
    const before = recorder.messages.length;
    const lines = recorder.feed(chunk);
    recorder.messages.slice(before).forEach((msg, i) => log.push({ dir, msg, line: lines[i] }));
  };
  const stdin = server.child.stdin;
  const output = new WritableStream({
    write(chunk) {
      record(sent, "out", chunk);
      return new Promise((resolve, reject) => stdin.write(chunk, (err) => (err ? reject(err) : resolve())));
    },
    close() {
      stdin.end();
    },
  });
  const input = Readable.toWeb(server.child.stdout).pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        record(received, "in", chunk);
        controller.enqueue(chunk);
      },
    }),
  );
  const app = acp
    .client({ name: "tower-cancel-interop-cascade" })
    .onNotification(acp.methods.client.session.update, () => {})
    .onRequest(PERMISSION, onPermission);
  const connection = app.connect(acp.ndJsonStream(output, input));
  return { server, connection, agent: connection.agent, sent, received, log };
}

/**
 * A permission handler that never answers by itself: it waits for its request's abort signal and
 * then rejects with the signal's reason. `calls` records what it saw.
 */
function waitForAbortHandler() {
  const calls = [];
  let entered;
  const enteredPromise = new Promise((resolve) => (entered = resolve));
  const handler = (ctx) => {
    const call = { requestId: ctx.requestId, params: ctx.params, signal: ctx.signal, abortedAt: undefined, reason: undefined };
    calls.push(call);
    entered(call);
    return new Promise((_, reject) => {
      const onAbort = () => {
        call.abortedAt = Date.now();
        call.reason = ctx.signal.reason;
        reject(ctx.signal.reason);
      };
      if (ctx.signal.aborted) onAbort();
      else ctx.signal.addEventListener("abort", onAbort, { once: true });
    });
  };
  return { handler, calls, entered: enteredPromise };
}

async function initSession(h) {
  const init = await withTimeout(
    h.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} }),
    5000,
    "initialize got no answer",
  );
  assert.equal(init.protocolVersion, 1);
  const { sessionId } = await withTimeout(
    h.agent.request(acp.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] }),
    5000,
    "session/new got no answer",
  );
  assert.match(sessionId, /^sess-\d+$/);
  return sessionId;
}

/** Index in the log of the first entry matching `pred`, or -1. */
const indexOf = (log, pred) => log.findIndex((e) => pred(e.msg, e.dir));
const dump = (h) => h.log.map((e) => `${e.dir === "out" ? "->" : "<-"} ${e.line}`).join("\n");

/** The single permission request the agent sent, checked against CONTRACT.md and the handler's view. */
function checkPermissionRequest(h, call, sessionId) {
  const perms = h.received.messages.filter((m) => m.method === PERMISSION);
  assert.equal(perms.length, 1, `permission requests from the agent:\n${dump(h)}`);
  const perm = perms[0];
  assert.ok("id" in perm, `the agent's permission message has no id: ${JSON.stringify(perm)}`);
  assert.deepEqual(perm.params, expectedPermissionParams(sessionId));
  assert.equal(call.requestId, perm.id, "the handler's ctx.requestId is the id on the wire");
  assert.deepEqual(call.params, expectedPermissionParams(sessionId));
  return perm;
}

/** Asserts the agent sent exactly one `$/cancel_request`, for `permId`, after log index `afterIdx`. */
function checkAgentCancel(h, permId, afterIdx, afterWhat) {
  const agentCancels = h.log.filter((e) => e.dir === "in" && e.msg.method === CANCEL);
  assert.equal(agentCancels.length, 1, `$/cancel_request messages from the agent:\n${dump(h)}`);
  assert.deepEqual(agentCancels[0].msg, { jsonrpc: "2.0", method: CANCEL, params: { requestId: permId } }, `raw line: ${agentCancels[0].line}`);
  const cancelIdx = h.log.indexOf(agentCancels[0]);
  const permIdx = indexOf(h.log, (m, dir) => dir === "in" && m.method === PERMISSION);
  assert.ok(permIdx < cancelIdx, `the agent cancelled the permission request before sending it:\n${dump(h)}`);
  assert.ok(afterIdx >= 0 && afterIdx < cancelIdx, `the agent's cancel is not after ${afterWhat}:\n${dump(h)}`);
}

/** The handler's signal fired with the SDK's -32800 reason for exactly that request id. */
function checkHandlerAborted(call, permId) {
  assert.equal(call.signal.aborted, true, "the requestPermission handler's ctx.signal did not fire");
  assert.ok(call.reason instanceof acp.RequestError, `abort reason: ${call.reason}`);
  assert.equal(call.reason.code, REQUEST_CANCELLED);
  assert.deepEqual(call.reason.data, { requestId: permId });
}

/** The client's answer to the cancelled permission request: the handler's rejection, -32800. */
async function checkClientAnsweredCancelled(h, permId) {
  await waitFor(
    () => h.sent.messages.some((m) => m.id === permId && !("method" in m)),
    2000,
    `the client never answered permission request ${permId}:\n${dump(h)}`,
  );
  const answers = h.sent.messages.filter((m) => m.id === permId && !("method" in m));
  assert.equal(answers.length, 1, `client answers to ${permId}: ${JSON.stringify(answers)}`);
  assert.equal(answers[0].error?.code, REQUEST_CANCELLED, `client answer: ${JSON.stringify(answers[0])}`);
}

async function statsShowNothingInFlight(h) {
  const stats = await withTimeout(h.agent.request("_demo/stats", {}), 5000, "_demo/stats got no answer");
  assert.equal(stats.inFlight, 0, `stats: ${JSON.stringify(stats)}`);
  return stats;
}

describe("acp_agent: cancelling session/prompt cancels its session/request_permission on the SDK client", () => {
  let h;
  afterEach(async (t) => {
    // INTEROP_DUMP=1 prints each test's traffic (-> client to agent, <- agent to client).
    if (h && process.env.INTEROP_DUMP) console.log(`# ${t.name}\n${dump(h)}`);
    h?.connection.close();
    await h?.server.stop();
    h = undefined;
  });

  it("$/cancel_request for the prompt: the handler's abort signal fires, the prompt rejects with -32800", async () => {
    const perm = waitForAbortHandler();
    h = connectAgent([], perm.handler);
    const sessionId = await initSession(h);

    const ac = new AbortController();
    const started = Date.now();
    const pending = h.agent.request(
      acp.methods.agent.session.prompt,
      { sessionId, prompt: [{ type: "text", text: "ask first" }] },
      { cancellationSignal: ac.signal },
    );
    const call = await withTimeout(perm.entered, 5000, `the permission handler was never entered:\n${dump(h)}`);
    assert.equal(call.signal.aborted, false, "the handler's signal was aborted on entry");
    ac.abort();

    const { error, elapsedMs } = await withTimeout(
      expectRejection(pending, started, "session/prompt aborted while the permission request is pending"),
      5000,
      "the aborted session/prompt was not answered within 5 s",
    );
    assert.ok(error instanceof acp.RequestError, `expected a RequestError, got ${error}`);
    assert.equal(error.code, REQUEST_CANCELLED);
    assert.ok(elapsedMs < 2500, `the cancel took ${elapsedMs} ms to be answered (the prompt works 3000 ms)`);

    // The handler's signal: it fired because the agent's $/cancel_request arrived.
    await waitFor(() => call.signal.aborted, 2000, `the handler's ctx.signal never fired:\n${dump(h)}`);
    assert.equal(perm.calls.length, 1);
    const permReq = checkPermissionRequest(h, call, sessionId);
    checkHandlerAborted(call, permReq.id);

    // On the wire: the prompt's id, the client's cancel for it, then the agent's cancel for the permission request.
    const promptId = h.sent.messages.find((m) => m.method === acp.methods.agent.session.prompt && "id" in m)?.id;
    assert.notEqual(promptId, undefined, `no session/prompt on the wire:\n${dump(h)}`);
    const clientCancels = h.sent.messages.filter((m) => m.method === CANCEL);
    assert.deepEqual(clientCancels.map((m) => m.params), [{ requestId: promptId }]);
    const clientCancelIdx = indexOf(h.log, (m, dir) => dir === "out" && m.method === CANCEL);
    checkAgentCancel(h, permReq.id, clientCancelIdx, "the client's $/cancel_request for the prompt");
    const promptReplies = h.received.messages.filter((m) => m.id === promptId && !("method" in m));
    assert.equal(promptReplies.length, 1, `replies for the prompt: ${JSON.stringify(promptReplies)}`);
    assert.equal(promptReplies[0].error?.code, REQUEST_CANCELLED);
    assert.equal(promptReplies[0].error?.message, "Request cancelled");

    await checkClientAnsweredCancelled(h, permReq.id);
    // The prompt's handler counts itself cancelled as it is dropped; asked until it shows (a hang guard of 2 s).
    let stats = await statsShowNothingInFlight(h);
    const asked = Date.now();
    while (stats.cancelled < 1 && Date.now() - asked < 2000) {
      await sleep(20);
      stats = await statsShowNothingInFlight(h);
    }
    assert.ok(stats.cancelled >= 1, `stats: ${JSON.stringify(stats)}`);
  });

  it("session/cancel: the prompt resolves with stopReason cancelled and the handler's abort signal fires", async () => {
    const perm = waitForAbortHandler();
    h = connectAgent([], perm.handler);
    const sessionId = await initSession(h);

    const started = Date.now();
    const pending = h.agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "ask first, then never mind" }],
    });
    const call = await withTimeout(perm.entered, 5000, `the permission handler was never entered:\n${dump(h)}`);
    assert.equal(call.signal.aborted, false, "the handler's signal was aborted on entry");
    await h.agent.notify(acp.methods.agent.session.cancel, { sessionId });

    const res = await withTimeout(pending, 5000, `session/prompt did not end after session/cancel:\n${dump(h)}`);
    assert.equal(res.stopReason, "cancelled");
    const elapsedMs = Date.now() - started;
    assert.ok(elapsedMs < 2500, `session/cancel took ${elapsedMs} ms to end the prompt (the prompt works 3000 ms)`);

    await waitFor(() => call.signal.aborted, 2000, `the handler's ctx.signal never fired:\n${dump(h)}`);
    assert.equal(perm.calls.length, 1);
    const permReq = checkPermissionRequest(h, call, sessionId);
    checkHandlerAborted(call, permReq.id);

    // On the wire: the client sent no $/cancel_request at all; the agent's one follows session/cancel.
    assert.deepEqual(h.sent.messages.filter((m) => m.method === CANCEL), [], `client sent a $/cancel_request:\n${dump(h)}`);
    const sessionCancelIdx = indexOf(
      h.log,
      (m, dir) => dir === "out" && m.method === acp.methods.agent.session.cancel && !("id" in m),
    );
    checkAgentCancel(h, permReq.id, sessionCancelIdx, "the client's session/cancel notification");

    await checkClientAnsweredCancelled(h, permReq.id);
    await statsShowNothingInFlight(h);
  });

  it("a permission answered at once (allow): the prompt ends with end_turn and nothing is cancelled", async () => {
    const calls = [];
    h = connectAgent(["--prompt-ms", "100"], (ctx) => {
      calls.push({ requestId: ctx.requestId, params: ctx.params, signal: ctx.signal });
      return { outcome: { outcome: "selected", optionId: "allow" } };
    });
    const sessionId = await initSession(h);

    const started = Date.now();
    const res = await withTimeout(
      h.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "go ahead" }] }),
      5000,
      `session/prompt hung:\n${dump(h)}`,
    );
    assert.equal(res.stopReason, "end_turn");
    const elapsedMs = Date.now() - started;
    assert.ok(elapsedMs >= 100 && elapsedMs < 2500, `the prompt took ${elapsedMs} ms (works 100 ms)`);

    assert.equal(calls.length, 1, `permission handler calls: ${calls.length}`);
    const permReq = checkPermissionRequest(h, calls[0], sessionId);
    assert.equal(calls[0].signal.aborted, false, "the handler's signal fired although nothing was cancelled");
    const answers = h.sent.messages.filter((m) => m.id === permReq.id && !("method" in m));
    assert.deepEqual(answers, [{ jsonrpc: "2.0", id: permReq.id, result: { outcome: { outcome: "selected", optionId: "allow" } } }]);

    // The stats round trip also lets anything the agent sent before it reach the log.
    const stats = await statsShowNothingInFlight(h);
    assert.ok(stats.completed >= 1, `stats: ${JSON.stringify(stats)}`);
    assert.deepEqual(
      h.log.filter((e) => e.msg.method === CANCEL),
      [],
      `a $/cancel_request was sent:\n${dump(h)}`,
    );
  });
});
