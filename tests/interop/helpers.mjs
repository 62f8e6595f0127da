// Shared helpers for the interop tests: where the example binaries live, how to
// spawn them, how to stop them, and a line recorder for NDJSON traffic.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

const here = path.dirname(fileURLToPath(import.meta.url));

/** Directory holding lsp_server, acp_agent and mcp_server. */
export const BIN_DIR = path.resolve(
  process.env.TOWER_CANCEL_BIN_DIR ?? path.join(here, "..", "..", "target", "debug"),
);

export { sleep };

/**
 * The binary that stands for `name`: `INTEROP_SERVERS="lsp_server=lsp_server_tower_lsp,mcp_server=mcp_server_rmcp"`
 * runs the same suites, unchanged, against another server of the same contract (run.sh does so for the adapters).
 */
function standIn(name) {
  for (const pair of (process.env.INTEROP_SERVERS ?? "").split(",")) {
    const [from, to] = pair.split("=").map((s) => s.trim());
    if (from === name && to) return to;
  }
  return name;
}

/**
 * The params of an `elicitation/create`, as the contract states them: `{message, requestedSchema}`. A server on rmcp
 * 3.11 (the stand-ins) always adds two fields the protocol allows: `mode: "form"` (the form mode, the default one)
 * and a `_meta.progressToken`. Those two are checked for what they are and set aside; every other field is given
 * back, for the caller to compare exactly.
 */
export function elicitationParams(params) {
  const { mode, _meta, ...rest } = params;
  if (mode !== undefined) assert.equal(mode, "form", "the form mode");
  if (_meta !== undefined) assert.deepEqual(Object.keys(_meta), ["progressToken"], "no _meta but a progress token");
  return rest;
}

/** Resolves once `signal` has aborted (at once if it has). */
export function aborted(signal) {
  return new Promise((resolve) =>
    signal.aborted ? resolve() : signal.addEventListener("abort", resolve, { once: true }),
  );
}

/** Absolute path of an example binary (or its stand-in); throws a readable error when it is missing. */
export function binPath(name) {
  name = standIn(name);
  const exe = process.platform === "win32" ? `${name}.exe` : name;
  const p = path.join(BIN_DIR, exe);
  if (!existsSync(p)) {
    throw new Error(
      `example binary not found: ${p}\n` +
        `build it with \`cargo build -p examples --bins\` or set TOWER_CANCEL_BIN_DIR`,
    );
  }
  return p;
}

/**
 * Spawns an example server with piped stdio. stderr is logging only: it is kept
 * (last 64 KiB) for diagnostics, or passed through when INTEROP_SERVER_STDERR=inherit.
 */
export function spawnServer(name, args = []) {
  const inherit = process.env.INTEROP_SERVER_STDERR === "inherit";
  const child = spawn(binPath(name), args, {
    stdio: ["pipe", "pipe", inherit ? "inherit" : "pipe"],
    env: { ...process.env },
  });
  let stderr = "";
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (d) => {
    stderr = (stderr + d).slice(-65536);
  });
  // Writing to a child that already died must not crash the test process.
  child.stdin.on("error", () => {});
  const exited = new Promise((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
  });
  return {
    child,
    exited,
    stderr: () => stderr,
    /**
     * Ends the child: closes stdin, waits up to `graceMs`, then SIGKILL. If the child had
     * already died on its own with a failure (or panicked), its stderr tail is printed.
     */
    async stop(graceMs = 500) {
      if (child.exitCode !== null || child.signalCode !== null) {
        if (child.exitCode !== 0 || /panicked/.test(stderr)) {
          console.error(
            `[${name}] exited by itself (code ${child.exitCode}, signal ${child.signalCode}); stderr tail:\n` +
              stderr.slice(-4000),
          );
        }
        return exited;
      }
      child.stdin.end();
      const res = await Promise.race([exited, sleep(graceMs).then(() => null)]);
      if (res) return res;
      child.kill("SIGKILL");
      return exited;
    },
  };
}

/**
 * Splits a byte stream into NDJSON lines and records every parsed message.
 * `feed(chunk)` returns the complete lines (strings) seen in that chunk.
 */
export class NdjsonRecorder {
  constructor() {
    this.buf = "";
    this.decoder = new TextDecoder();
    /** Parsed messages, in order. Lines that are not JSON are kept as {unparsable: line}. */
    this.messages = [];
    /** Raw lines, in order. */
    this.lines = [];
  }
  feed(chunk) {
    this.buf += typeof chunk === "string" ? chunk : this.decoder.decode(chunk, { stream: true });
    const out = [];
    let nl;
    while ((nl = this.buf.indexOf("\n")) >= 0) {
      const line = this.buf.slice(0, nl).replace(/\r$/, "");
      this.buf = this.buf.slice(nl + 1);
      if (line.trim() === "") continue;
      this.lines.push(line);
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        msg = { unparsable: line };
      }
      this.messages.push(msg);
      out.push(line);
    }
    return out;
  }
}

/** Rejects with `msg` if `promise` has not settled within `ms`. */
export function withTimeout(promise, ms, msg) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(msg ?? `timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

/** Polls `predicate` every 20 ms until it is truthy; rejects with `msg` after `ms`. */
export async function waitFor(predicate, ms, msg) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() >= deadline) throw new Error(msg ?? `condition not met within ${ms} ms`);
    await sleep(20);
  }
}

/** Awaits `promise`, expecting a rejection; returns {error, elapsedMs}. Fails if it resolves. */
export async function expectRejection(promise, startedAt, what) {
  try {
    const value = await promise;
    throw Object.assign(new Error(`${what}: expected a rejection, got ${JSON.stringify(value)}`), {
      notRejected: true,
    });
  } catch (error) {
    if (error?.notRejected) throw error;
    return { error, elapsedMs: Date.now() - startedAt };
  }
}

/**
 * A stdio Transport for the MCP SDK (`@modelcontextprotocol/sdk`: start/send/close plus the
 * onmessage/onclose/onerror callbacks) that spawns an example server, frames NDJSON both
 * ways and records both directions, so a test can assert the raw traffic (e.g. that a
 * cancelled request got no reply at all).
 *
 * - `fromServer`: an NdjsonRecorder holding every line / message the server wrote.
 * - `toServer`: every message the client sent.
 * - `log`: both directions in order, as `{dir: "in" | "out", at: Date.now(), msg, line?}`
 *   (`line` is the raw server line, for byte-exact checks).
 *
 * By default the messages of one stdout chunk are handed to `onmessage` back to back, as the
 * SDK's own StdioClientTransport does. With `{oneMessagePerTask: true}` each message is handed
 * over in its own macrotask (setImmediate, order kept), as a transport that gets one message
 * per event (WebSocket, SSE) would. That matters for progress: the SDK (1.32.2) runs
 * notification handlers in a microtask but responses synchronously, so a progress
 * notification that arrives in the same chunk as the result is dropped ("Received a progress
 * notification for an unknown token", modelcontextprotocol/typescript-sdk#2580).
 */
export class RecordingStdioTransport {
  constructor(name, args = [], { oneMessagePerTask = false } = {}) {
    this.name = name;
    this.args = args;
    this.oneMessagePerTask = oneMessagePerTask;
    this.server = undefined;
    this.fromServer = new NdjsonRecorder();
    this.toServer = [];
    this.log = [];
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
      const lines = this.fromServer.feed(chunk);
      const at = Date.now();
      this.fromServer.messages.slice(before).forEach((msg, i) => {
        this.log.push({ dir: "in", at, msg, line: lines[i] });
        const deliver = () => {
          if (msg.unparsable !== undefined) {
            this.onerror?.(new Error(`server wrote a non-JSON line: ${msg.unparsable}`));
          } else {
            this.onmessage?.(msg);
          }
        };
        if (this.oneMessagePerTask) setImmediate(deliver);
        else deliver();
      });
    });
    child.on("error", (e) => this.onerror?.(e));
    // After the messages still queued for delivery, when delivering one per task.
    child.on("exit", () => (this.oneMessagePerTask ? setImmediate(() => this._closed()) : this._closed()));
  }

  async send(message) {
    if (!this.server || this.closed) throw new Error("transport not connected");
    this.toServer.push(message);
    this.log.push({ dir: "out", at: Date.now(), msg: message });
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
