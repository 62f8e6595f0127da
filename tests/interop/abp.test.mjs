// abp_app driven by a JavaScript ABP agent written from the spec on top of the `ws` package, as a browser-side
// agent would talk to it: envelopes {type, id, timestamp, payload} over one WebSocket, callIds from
// crypto.randomUUID(), and an AbortSignal that sends capabilities/cancel. Every payload the app sends is checked.
import { describe, it, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import WebSocket from "ws";
import { binPath, withTimeout } from "./helpers.mjs";
import { pollUntil, spawnHttpServer } from "./http.mjs";

const APP = {
  id: "tower-cancel-abp-example",
  name: "tower-cancel ABP example",
};

/** Spawns abp_app on 127.0.0.1:0 (plus `args`); its one stdout line must be `listening on ws://ADDR/abp`. */
async function spawnAbpApp(args = []) {
  const app = await spawnHttpServer("abp_app", args);
  if (!/^ws:\/\/127\.0\.0\.1:\d+\/abp$/.test(app.url)) {
    await app.stop();
    throw new Error(`abp_app: unexpected URL ${JSON.stringify(app.url)}`);
  }
  return app;
}

/**
 * An ABP agent from the spec: one WebSocket, one session. Replies are matched to what was sent by envelope id;
 * every envelope received is kept in `received`, in order, so a test can check what came and in which order.
 */
class AbpAgent {
  static async connect(url) {
    const ws = new WebSocket(url);
    await withTimeout(
      new Promise((resolve, reject) => {
        ws.once("open", resolve);
        ws.once("error", reject);
      }),
      5000,
      `no WebSocket to ${url}`,
    );
    return new AbpAgent(ws);
  }

  constructor(ws) {
    this.ws = ws;
    /** Every envelope received, in order (a frame that is not JSON as {unparsable: text}). */
    this.received = [];
    /** Envelope id -> {resolve, reject} of what waits for its reply. */
    this.replies = new Map();
    /** Waiters for any envelope: {match, resolve}. */
    this.waiters = [];
    this.session = undefined;
    this.closed = new Promise((resolve) => ws.once("close", resolve));
    ws.on("message", (data) => this.#receive(data.toString("utf8")));
    ws.on("close", () => {
      for (const { reject } of this.replies.values()) reject(new Error("the WebSocket closed"));
      this.replies.clear();
    });
    // An error is followed by close, which fails what waits.
    ws.on("error", () => {});
  }

  #receive(text) {
    let envelope;
    try {
      envelope = JSON.parse(text);
    } catch {
      envelope = { unparsable: text };
    }
    this.received.push(envelope);
    const waiting = envelope.id !== undefined ? this.replies.get(envelope.id) : undefined;
    if (waiting) {
      this.replies.delete(envelope.id);
      waiting.resolve(envelope);
    }
    for (const waiter of [...this.waiters]) {
      if (waiter.match(envelope)) {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        waiter.resolve(envelope);
      }
    }
  }

  /** Sends an envelope; returns its id. */
  send(type, payload, id = crypto.randomUUID()) {
    this.ws.send(JSON.stringify({ type, id, timestamp: Date.now(), payload }));
    return id;
  }

  /** The reply to envelope `id` (the first envelope back that carries it). */
  reply(id, ms = 10000) {
    const replied = new Promise((resolve, reject) => this.replies.set(id, { resolve, reject }));
    return withTimeout(replied, ms, `no reply to envelope ${id}`);
  }

  /** Sends an envelope and resolves with its reply. */
  request(type, payload, ms) {
    const id = crypto.randomUUID();
    const replied = this.reply(id, ms);
    this.send(type, payload, id);
    return replied;
  }

  /** The next envelope received that `match`es (set up before what triggers it). */
  next(match, ms = 5000) {
    const found = new Promise((resolve) => this.waiters.push({ match, resolve }));
    return withTimeout(found, ms, "no matching envelope came");
  }

  async initialize() {
    const reply = await this.request("initialize", {
      agent: { name: "interop-js-agent", version: "1.0.0" },
      protocolVersion: "0.1",
      features: { notifications: false, progress: false, elicitation: false },
    });
    assert.equal(reply.type, "initialize-result", JSON.stringify(reply));
    this.session = reply.payload;
    return reply;
  }

  /**
   * Calls `capability`. `signal` aborts it: a capabilities/cancel naming its callId is sent, and the call resolves
   * once both the acknowledgment and the call's result came. `timeout` goes in options.timeout (the app enforces
   * it). `callIdAt: "top"` puts the callId at the top of the payload instead of in options.
   * Resolves with {callId, envelopeId, result, ack}: the call-result's payload and the cancel-result's (if any).
   */
  async call(capability, params, { signal, timeout, callId = crypto.randomUUID(), callIdAt = "options", reason } = {}) {
    const options = callIdAt === "top" ? {} : { callId };
    if (timeout !== undefined) options.timeout = timeout;
    const payload = { capability, params };
    if (Object.keys(options).length > 0) payload.options = options;
    if (callIdAt === "top") payload.callId = callId;
    const envelopeId = crypto.randomUUID();
    const replied = this.reply(envelopeId);
    let acked;
    const onAbort = () => {
      acked = this.cancel(callId, reason ?? "aborted by the agent");
    };
    this.send("capabilities/call", payload, envelopeId);
    if (signal?.aborted) onAbort();
    else signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const reply = await replied;
      assert.equal(reply.type, "capabilities/call-result", JSON.stringify(reply));
      return { callId, envelopeId, result: reply.payload, ack: acked ? await acked : undefined };
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Sends capabilities/cancel for `callId`; resolves with the cancel-result's payload. */
  async cancel(callId, reason) {
    const reply = await this.request("capabilities/cancel", reason === undefined ? { callId } : { callId, reason });
    assert.equal(reply.type, "capabilities/cancel-result", JSON.stringify(reply));
    return reply.payload;
  }

  /** The app's counters (the stats capability's data). */
  async stats() {
    const { result } = await this.call("stats", {});
    assert.equal(result.success, true, JSON.stringify(result));
    return result.data;
  }

  close() {
    this.ws.close();
    return withTimeout(this.closed, 5000, "the WebSocket did not close");
  }
}

/** The payload with its `message` checked (a non-empty string) and left out, to compare the rest exactly. */
function withoutMessage({ message, ...rest }) {
  assert.equal(typeof message, "string");
  assert.notEqual(message, "");
  return rest;
}

describe("abp_app driven by a JavaScript agent over ws", () => {
  let app;
  /** Every agent opened, closed after each test. */
  let agents = [];

  async function connect() {
    const agent = await AbpAgent.connect(app.url);
    agents.push(agent);
    return agent;
  }

  async function session() {
    const agent = await connect();
    await agent.initialize();
    return agent;
  }

  /** Polls `agent`'s stats until `done(stats)`; bounded. */
  function statsUntil(agent, done, what) {
    return pollUntil(() => agent.stats(), done, 5000, what);
  }

  before(async () => {
    app = await spawnAbpApp();
  });

  afterEach(async () => {
    await Promise.all(agents.map((agent) => (agent.ws.readyState === WebSocket.CLOSED ? null : agent.close())));
    agents = [];
  });

  after(async () => {
    const exit = await app?.stop();
    assert.doesNotMatch(app?.stderr() ?? "", /panicked/);
    assert.equal(exit?.signal ?? "SIGTERM", "SIGTERM", "the app ended by SIGTERM");
  });

  it("prints exactly one line with its WebSocket URL", () => {
    assert.match(app.url, /^ws:\/\/127\.0\.0\.1:\d+\/abp$/);
    assert.deepEqual(app.stdout, [`listening on ${app.url}`]);
  });

  it("initialize is answered with the session, the app and its capabilities, under the initialize's id", async () => {
    const agent = await connect();
    const id = crypto.randomUUID();
    const replied = agent.reply(id);
    agent.send(
      "initialize",
      { agent: { name: "interop-js-agent", version: "1.0.0" }, protocolVersion: "0.1", features: { progress: false } },
      id,
    );
    const reply = await replied;
    assert.equal(reply.type, "initialize-result");
    assert.equal(reply.id, id);
    assert.equal(typeof reply.timestamp, "number");
    const { sessionId, app: info, ...rest } = reply.payload;
    assert.match(sessionId, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.deepEqual({ id: info.id, name: info.name }, APP);
    assert.match(info.version, /^\d+\.\d+\.\d+/);
    assert.deepEqual(rest, {
      protocolVersion: "0.1",
      capabilities: [
        { name: "sleep", available: true },
        { name: "stats", available: true },
      ],
      features: { notifications: false, progress: false, elicitation: false },
    });
    // Each WebSocket is a session of its own.
    const other = await session();
    assert.notEqual(other.session.sessionId, sessionId);
  });

  it("a call or a cancel before initialize is refused with NOT_INITIALIZED", async () => {
    const agent = await connect();
    const callId = crypto.randomUUID();
    const { envelopeId, result } = await agent.call("sleep", { ms: 5 }, { callId });
    assert.equal(agent.received.at(-1).id, envelopeId, "the call-result carries the call's envelope id");
    assert.equal(result.success, false);
    assert.deepEqual({ ...result, error: withoutMessage(result.error) }, {
      success: false,
      error: { code: "NOT_INITIALIZED", retryable: true },
    });
    const ack = await agent.cancel(callId, "before initialize");
    assert.deepEqual({ ...ack, error: withoutMessage(ack.error) }, {
      callId,
      cancelled: false,
      error: { code: "NOT_INITIALIZED", retryable: true },
    });
    // The session goes on: once initialized, calls run.
    await agent.initialize();
    const again = await agent.call("sleep", { ms: 5 });
    assert.deepEqual(again.result, { success: true, data: { slept: 5 } });
  });

  it("an aborted call is acknowledged before its cancelled call-result, and its handler stops", async () => {
    const agent = await session();
    const before = await agent.stats();
    const abort = new AbortController();
    const calling = agent.call("sleep", { ms: 60000 }, { signal: abort.signal, reason: "user pressed stop" });
    // Abort only once the sleep runs on the app.
    await statsUntil(agent, (s) => s.inFlight === before.inFlight + 1, "the sleep running");
    abort.abort();
    const { callId, envelopeId, result, ack } = await calling;
    assert.deepEqual(ack, { callId, cancelled: true });
    assert.deepEqual(result, {
      success: false,
      cancelled: true,
      error: { code: "CANCELLED", message: "Operation cancelled", retryable: false },
    });
    const ackAt = agent.received.findIndex((e) => e.type === "capabilities/cancel-result" && e.payload.callId === callId);
    const resultAt = agent.received.findIndex((e) => e.type === "capabilities/call-result" && e.id === envelopeId);
    assert.ok(ackAt >= 0 && resultAt >= 0);
    assert.ok(ackAt < resultAt, `the cancel-result (#${ackAt}) comes before the call-result (#${resultAt})`);
    // The call-result is sent once the handler is gone: nothing left running.
    assert.deepEqual(await agent.stats(), {
      started: before.started + 1,
      completed: before.completed,
      cancelled: before.cancelled + 1,
      inFlight: 0,
    });
  });

  it("a cancel is answered as the call's lifecycle decided: completed, unknown, cancelled (each time)", async () => {
    const agent = await session();
    const done = await agent.call("sleep", { ms: 5 });
    assert.deepEqual(done.result, { success: true, data: { slept: 5 } });
    assert.deepEqual(await agent.cancel(done.callId), {
      callId: done.callId,
      cancelled: false,
      reason: "Operation already completed",
    });

    const unknown = crypto.randomUUID();
    assert.deepEqual(await agent.cancel(unknown, "never called"), {
      callId: unknown,
      cancelled: false,
      reason: "Operation not found",
    });

    const before = await agent.stats();
    const sent = crypto.randomUUID();
    const calling = agent.call("sleep", { ms: 60000 }, { callId: sent });
    await statsUntil(agent, (s) => s.inFlight === before.inFlight + 1, "the sleep running");
    // Three cancels back to back: the first stops it, the others find it cancelled already.
    const acks = await Promise.all([1, 2, 3].map((n) => agent.cancel(sent, `cancel #${n}`)));
    assert.deepEqual(acks, [1, 2, 3].map(() => ({ callId: sent, cancelled: true })));
    const { result } = await calling;
    assert.deepEqual(result, {
      success: false,
      cancelled: true,
      error: { code: "CANCELLED", message: "Operation cancelled", retryable: false },
    });
    // After its result too: remembered as cancelled.
    assert.deepEqual(await agent.cancel(sent), { callId: sent, cancelled: true });
    const results = agent.received.filter((e) => e.type === "capabilities/call-result" && e.payload.cancelled);
    assert.equal(results.length, 1, "one call-result for the call, whatever the cancels");
  });

  it("a cancel of callId x before any call x is not found, and a later call x runs normally", async () => {
    // One WebSocket delivers in order: a cancel cannot overtake its call, so "not found" is all it is.
    const agent = await session();
    const before = await agent.stats();
    assert.deepEqual(await agent.cancel("x", "before its call"), {
      callId: "x",
      cancelled: false,
      reason: "Operation not found",
    });
    const { callId, result } = await agent.call("sleep", { ms: 5 }, { callId: "x" });
    assert.equal(callId, "x");
    assert.deepEqual(result, { success: true, data: { slept: 5 } });
    assert.deepEqual(await agent.stats(), {
      started: before.started + 1,
      completed: before.completed + 1,
      cancelled: before.cancelled,
      inFlight: 0,
    });
    // Known now: a cancel of it says it completed.
    assert.deepEqual(await agent.cancel("x"), {
      callId: "x",
      cancelled: false,
      reason: "Operation already completed",
    });
  });

  it("options.timeout stops the call: cancelled, with code TIMEOUT", async () => {
    const agent = await session();
    const before = await agent.stats();
    const { result, ack } = await agent.call("sleep", { ms: 60000 }, { timeout: 100 });
    assert.equal(ack, undefined, "no cancel was sent");
    assert.deepEqual(result, {
      success: false,
      cancelled: true,
      error: { code: "TIMEOUT", message: "Operation timed out", retryable: true },
    });
    const after = await agent.stats();
    assert.equal(after.cancelled, before.cancelled + 1);
    assert.equal(after.inFlight, 0);
  });

  it("a callId at the top of the payload names the call for cancels", async () => {
    const agent = await session();
    const done = await agent.call("sleep", { ms: 5 }, { callIdAt: "top" });
    assert.deepEqual(done.result, { success: true, data: { slept: 5 } });
    assert.deepEqual(await agent.cancel(done.callId), {
      callId: done.callId,
      cancelled: false,
      reason: "Operation already completed",
    });

    const before = await agent.stats();
    const abort = new AbortController();
    const calling = agent.call("sleep", { ms: 60000 }, { callIdAt: "top", signal: abort.signal });
    await statsUntil(agent, (s) => s.inFlight === before.inFlight + 1, "the sleep running");
    abort.abort();
    const { callId, result, ack } = await calling;
    assert.deepEqual(ack, { callId, cancelled: true });
    assert.deepEqual(result, {
      success: false,
      cancelled: true,
      error: { code: "CANCELLED", message: "Operation cancelled", retryable: false },
    });
  });

  it("bad envelopes get an error envelope, and the session goes on", async () => {
    const agent = await session();

    let came = agent.next((e) => e.type === "error");
    agent.ws.send("not json");
    let error = await came;
    assert.equal("id" in error, false, "no id to answer");
    assert.deepEqual(withoutMessage(error.payload), { code: "INVALID_MESSAGE", retryable: false });
    assert.match(error.payload.message, /^not JSON/);

    const id = crypto.randomUUID();
    came = agent.reply(id);
    agent.send("notifications/something", { hello: true }, id);
    error = await came;
    assert.equal(error.type, "error");
    assert.deepEqual(withoutMessage(error.payload), { code: "NOT_IMPLEMENTED", retryable: false });

    const again = await agent.request("initialize", {
      agent: { name: "interop-js-agent", version: "1.0.0" },
      protocolVersion: "0.1",
    });
    assert.equal(again.type, "error");
    assert.deepEqual(withoutMessage(again.payload), { code: "ALREADY_INITIALIZED", retryable: false });

    const { result } = await agent.call("sleep", { ms: 5 });
    assert.deepEqual(result, { success: true, data: { slept: 5 } });
    const missing = await agent.call("sleep", { seconds: 1 });
    assert.deepEqual({ ...missing.result, error: withoutMessage(missing.result.error) }, {
      success: false,
      error: { code: "INVALID_PARAMS", retryable: false },
    });
    const unknown = await agent.call("fly", {});
    assert.deepEqual({ ...unknown.result, error: withoutMessage(unknown.result.error) }, {
      success: false,
      error: { code: "UNKNOWN_CAPABILITY", retryable: false },
    });
  });

  it("closing the socket mid-call stops the call", async () => {
    const watcher = await session();
    const before = await watcher.stats();
    // One agent closes its WebSocket politely, the other drops the TCP connection.
    const polite = await session();
    const abrupt = await session();
    const politeCall = polite.call("sleep", { ms: 60000 }).catch((e) => e);
    const abruptCall = abrupt.call("sleep", { ms: 60000 }).catch((e) => e);
    await statsUntil(watcher, (s) => s.inFlight === before.inFlight + 2, "both sleeps running");
    await polite.close();
    abrupt.ws.terminate();
    await withTimeout(abrupt.closed, 5000, "terminate did not close");
    // Whatever the app managed to send before its side closed, the calls end on the agent side.
    await Promise.all([politeCall, abruptCall]);
    // A fresh connection sees them stopped.
    const fresh = await session();
    const after = await statsUntil(fresh, (s) => s.inFlight === 0, "the closed sessions' calls stopped");
    assert.deepEqual(after, {
      started: before.started + 2,
      completed: before.completed,
      cancelled: before.cancelled + 2,
      inFlight: 0,
    });
  });

  it("abp_agent --url drives it: the acknowledgment, the cancelled result, a timeout, stats, shutdown", async () => {
    const watcher = await session();
    const before = await watcher.stats();
    const run = spawnSync(binPath("abp_agent"), ["--url", app.url], { encoding: "utf8", timeout: 30000 });
    assert.equal(run.status, 0, `abp_agent failed: ${run.stderr}`);
    const lines = run.stdout.trimEnd().split("\n");
    assert.equal(lines.length, 6, run.stdout);
    assert.match(lines[0], /^connected: session \S+ with tower-cancel-abp-example \S+ \(protocol 0\.1\), capabilities sleep, stats$/);
    const [, ackId, ack] = /^cancelled sleep (\S+): acknowledgment (.*)$/.exec(lines[1]);
    assert.deepEqual(JSON.parse(ack), { callId: ackId, cancelled: true });
    const [, resultId, result] = /^cancelled sleep (\S+): result (.*)$/.exec(lines[2]);
    assert.equal(resultId, ackId);
    assert.deepEqual(JSON.parse(result), {
      success: false,
      cancelled: true,
      error: { code: "CANCELLED", message: "Operation cancelled", retryable: false },
    });
    const [, timedOut] = /^timed-out sleep \S+: result (.*)$/.exec(lines[3]);
    assert.deepEqual(JSON.parse(timedOut), {
      success: false,
      cancelled: true,
      error: { code: "TIMEOUT", message: "Operation timed out", retryable: true },
    });
    assert.match(lines[4], /^stats: \{.*\}$/);
    assert.equal(lines[5], "shut down");
    // Both sleeps were stopped on the app, nothing left running.
    assert.deepEqual(await watcher.stats(), {
      started: before.started + 2,
      completed: before.completed,
      cancelled: before.cancelled + 2,
      inFlight: 0,
    });
  });
});
