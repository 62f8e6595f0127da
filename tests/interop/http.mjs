// Helpers for the tests of the HTTP example servers (mcp_http_server, jsonrpc_http_server, rap_tool_server, and
// abp_app, whose WebSocket starts as an HTTP upgrade):
// spawn one on a free port and learn its URL, and a fetch that records every exchange on the
// wire (what was POSTed, what came back, and how the response body ended).
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { binPath, sleep, withTimeout } from "./helpers.mjs";

/**
 * Spawns an HTTP example server with `--addr 127.0.0.1:0` (plus `args`) and waits for its one
 * stdout line `listening on <url>` (an endpoint's URL, `http://` or `ws://`, or a base URL
 * without a path, as rap_tool_server prints). stderr is logging only: it is kept (last 64 KiB) for
 * diagnostics, or passed through when INTEROP_SERVER_STDERR=inherit.
 */
export async function spawnHttpServer(name, args = []) {
  const inherit = process.env.INTEROP_SERVER_STDERR === "inherit";
  const child = spawn(binPath(name), ["--addr", "127.0.0.1:0", ...args], {
    stdio: ["ignore", "pipe", inherit ? "inherit" : "pipe"],
    env: { ...process.env },
  });
  let stderr = "";
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (d) => {
    stderr = (stderr + d).slice(-65536);
  });
  const exited = new Promise((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
  });
  const lines = createInterface({ input: child.stdout });
  const stdout = [];
  const first = new Promise((resolve, reject) => {
    lines.on("line", (line) => {
      stdout.push(line);
      if (stdout.length === 1) resolve(line);
    });
    exited.then(({ code, signal }) =>
      reject(new Error(`${name} exited before listening (code ${code}, signal ${signal}):\n${stderr}`)),
    );
  });
  const line = await withTimeout(first, 10000, `${name} printed no "listening on" line`);
  const match = /^listening on ((?:http|ws):\/\/127\.0\.0\.1:(\d+)(?:\/\S+)?)$/.exec(line);
  if (!match || match[2] === "0") {
    child.kill("SIGKILL");
    throw new Error(`${name}: unexpected first line ${JSON.stringify(line)}`);
  }
  return {
    child,
    url: match[1],
    /** Every line the server wrote to stdout (the contract: exactly one). */
    stdout,
    stderr: () => stderr,
    /** SIGTERM, then SIGKILL after `graceMs`. Resolves with how it exited. */
    async stop(graceMs = 2000) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        const res = await Promise.race([exited, sleep(graceMs).then(() => null)]);
        if (!res) child.kill("SIGKILL");
      } else if (/panicked/.test(stderr)) {
        console.error(`[${name}] exited by itself; stderr tail:\n${stderr.slice(-4000)}`);
      }
      return exited;
    },
  };
}

/**
 * A `fetch` that records each exchange: `{method, url, headers, body (parsed JSON or the text),
 * status, contentType, sessionId, text (the response body as read so far), aborted (the request's
 * signal fired), error (fetch rejected), ended}`. `ended` resolves when the response body ends:
 * `{how: "server-ended" | "error" | "no-body" | "no-response", at, error?}`. The body is teed, so
 * the caller reads it as usual.
 */
export class FetchRecorder {
  constructor() {
    this.exchanges = [];
    this.fetch = this.fetch.bind(this);
  }

  async fetch(input, init = {}) {
    let body = init.body;
    if (typeof body === "string") {
      try {
        body = JSON.parse(body);
      } catch {
        // kept as text
      }
    }
    const ex = {
      method: init.method ?? "GET",
      url: String(input),
      headers: Object.fromEntries(new Headers(init.headers ?? {}).entries()),
      body,
      status: undefined,
      contentType: undefined,
      sessionId: undefined,
      text: "",
      aborted: false,
      error: undefined,
      startedAt: Date.now(),
      ended: undefined,
    };
    let settle;
    ex.ended = new Promise((resolve) => (settle = resolve));
    this.exchanges.push(ex);
    init.signal?.addEventListener("abort", () => (ex.aborted = true), { once: true });
    let res;
    try {
      res = await fetch(input, init);
    } catch (error) {
      ex.error = error;
      settle({ how: "no-response", at: Date.now(), error });
      throw error;
    }
    ex.status = res.status;
    ex.contentType = res.headers.get("content-type") ?? undefined;
    ex.sessionId = res.headers.get("mcp-session-id") ?? undefined;
    if (!res.body) {
      settle({ how: "no-body", at: Date.now() });
      return res;
    }
    const [mine, theirs] = res.body.tee();
    (async () => {
      const reader = mine.getReader();
      const decoder = new TextDecoder();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return settle({ how: "server-ended", at: Date.now() });
          ex.text += decoder.decode(value, { stream: true });
        }
      } catch (error) {
        settle({ how: "error", at: Date.now(), error });
      }
    })();
    return new Response(theirs, { status: res.status, statusText: res.statusText, headers: res.headers });
  }

  /** The exchanges whose POSTed JSON-RPC message matches `predicate`. */
  posted(predicate) {
    return this.exchanges.filter((ex) => ex.method === "POST" && ex.body && typeof ex.body === "object" && predicate(ex.body));
  }
}

/** The JSON-RPC messages of an SSE body (its `data:` lines), or of a JSON body. */
export function messagesOf(ex) {
  if (ex.contentType?.startsWith("application/json")) {
    return ex.text ? [JSON.parse(ex.text)] : [];
  }
  return ex.text
    .split(/\r?\n/)
    .filter((line) => line.startsWith("data:"))
    .map((line) => line.slice(5).trim())
    .filter((data) => data !== "")
    .map((data) => JSON.parse(data));
}

/**
 * Polls `read()` (async) every 25 ms until `done(value)` holds; returns the last value. Rejects
 * after `ms` with the last value in the message. For effects that happen on the server after the
 * client has moved on (a handler stopped once its cancel arrived).
 */
export async function pollUntil(read, done, ms, what) {
  const deadline = Date.now() + ms;
  let value;
  for (;;) {
    value = await read();
    if (done(value)) return value;
    if (Date.now() >= deadline) {
      throw new Error(`${what}: not reached within ${ms} ms; last value ${JSON.stringify(value)}`);
    }
    await sleep(25);
  }
}
