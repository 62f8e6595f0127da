// Shared helpers for the interop tests: where the example binaries live, how to
// spawn them, how to stop them, and a line recorder for NDJSON traffic.
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

/** Absolute path of an example binary; throws a readable error when it is missing. */
export function binPath(name) {
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
