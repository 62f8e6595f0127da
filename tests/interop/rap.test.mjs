// rap_tool_server driven as a RAP runtime drives it, over plain HTTP: Node's fetch invokes the tools (with
// the bearer token), a callback server of node:http receives the tool results, and the rap_cancel binary (the
// runtime side of the cancellation, as a command) cancels a call on the server and on a URL that refuses
// connections, and is run against tool servers that answer 500 or never answer (its timeouts, no retry); a
// runtime interrupting a fan-out of 1000 calls POSTs their 1000 cancels at once, and each is answered 200 and
// honoured. The command lines of both binaries are the contract checked here.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { Agent, createServer, request as httpRequest } from "node:http";
import { createServer as createTcpServer } from "node:net";
import { binPath, withTimeout } from "./helpers.mjs";
import { spawnHttpServer, pollUntil } from "./http.mjs";

const TOKEN = "interop-s3cret";

/** A callback server on 127.0.0.1:0 that keeps every tool result POSTed to it. */
async function startCallbacks() {
  const results = [];
  const bad = [];
  const server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      try {
        results.push({ path: req.url, contentType: req.headers["content-type"], body: JSON.parse(body) });
        res.writeHead(200).end();
      } catch (error) {
        bad.push({ body, error: String(error) });
        res.writeHead(400).end();
      }
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/rap/results`,
    results,
    bad,
    /** The result of (thread, id) once it has arrived. */
    result(thread, id, ms = 5000) {
      return pollUntil(
        async () => results.find((r) => r.body.group_id === thread && r.body.id === id),
        (found) => found !== undefined,
        ms,
        `the tool result of ${thread}/${id}`,
      );
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** An http:// URL on which nothing listens: a port bound, then let go. */
async function refusingUrl() {
  const probe = createTcpServer();
  await new Promise((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  return `http://127.0.0.1:${port}`;
}

/** Runs a binary to its end: {code, stdout, stderr}. */
function run(name, args, ms = 10000) {
  return withTimeout(
    new Promise((resolve) => {
      execFile(binPath(name), args, { env: { ...process.env } }, (error, stdout, stderr) => {
        resolve({ code: error ? error.code : 0, signal: error?.signal, stdout, stderr });
      });
    }),
    ms,
    `${name} did not exit`,
  );
}

describe("rap_tool_server, invoked over HTTP and cancelled by rap_cancel", () => {
  let server;
  let callbacks;
  let nextStats = 1;

  /** POSTs to one of the server's endpoints; {status, headers, text}. */
  async function post(path, body, { token = TOKEN } = {}) {
    const headers = { "content-type": "application/json" };
    if (token) headers.authorization = `Bearer ${token}`;
    const res = await fetch(`${server.url}${path}`, { method: "POST", headers, body: JSON.stringify(body) });
    return { status: res.status, headers: res.headers, text: await res.text() };
  }

  /** POSTs `body` to `path` with the token through node:http's `agent` (a client's pool of connections). */
  function postWith(agent, path, body) {
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        `${server.url}${path}`,
        {
          method: "POST",
          agent,
          headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}` },
        },
        (res) => {
          let text = "";
          res.setEncoding("utf8");
          res.on("data", (chunk) => (text += chunk));
          res.on("end", () => resolve({ status: res.statusCode, text }));
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(JSON.stringify(body));
    });
  }

  /** POSTs an invocation as a runtime does; `token: null` sends none. */
  function invoke(thread, id, operation, args, { callId, token = TOKEN } = {}) {
    const invocation = {
      operation,
      arguments: args,
      id,
      call_id: callId ?? null,
      callback_url: callbacks.url,
      group_id: thread,
    };
    return post("/invoke", invocation, { token });
  }

  /** The `stats` tool's counters (its result's text is their JSON). */
  async function stats() {
    const id = `stats_${nextStats++}`;
    const res = await invoke("stats-thread", id, "stats", {});
    assert.equal(res.status, 200);
    const { body } = await callbacks.result("stats-thread", id);
    return JSON.parse(body.text);
  }

  before(async () => {
    // The callback server below is on 127.0.0.1, which the example refuses unless told.
    server = await spawnHttpServer("rap_tool_server", ["--token", TOKEN, "--allow-private-callbacks"]);
    callbacks = await startCallbacks();
  });

  after(async () => {
    await callbacks?.close();
    const exit = await server?.stop();
    assert.doesNotMatch(server?.stderr() ?? "", /panicked/);
    assert.equal(exit?.signal ?? "SIGTERM", "SIGTERM", "the server ended by SIGTERM");
    assert.deepEqual(callbacks?.bad ?? [], [], "every callback was a JSON body");
  });

  it("prints exactly one line with its base URL", () => {
    assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.deepEqual(server.stdout, [`listening on ${server.url}`]);
  });

  it("answers discovery without a token, and 401 to anything else without it", async () => {
    const res = await fetch(`${server.url}/.well-known/rap-toolset`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
    const toolset = await res.json();
    assert.equal(toolset.endpoint, `${server.url}/invoke`);
    assert.deepEqual(toolset.tools.map((t) => t.name), ["sleep", "stats"]);
    assert.deepEqual(toolset.tools[0].inputSchema.required, ["ms"]);

    const before = await stats();
    const noToken = await invoke("t-auth", "call_1", "sleep", { ms: 1 }, { token: null });
    assert.equal(noToken.status, 401);
    assert.equal(noToken.headers.get("www-authenticate"), "Bearer");
    const wrongToken = await invoke("t-auth", "call_1", "sleep", { ms: 1 }, { token: "not-it" });
    assert.equal(wrongToken.status, 401);
    const cancel = await post("/cancel_tool_call", { thread_id: "t-auth", tool_call_id: "call_1" }, { token: null });
    assert.equal(cancel.status, 401);
    // Nothing ran, nothing was sent.
    assert.deepEqual(await stats(), before);
    assert.equal(callbacks.results.filter((r) => r.body.group_id === "t-auth").length, 0);
  });

  it("a sleep is acknowledged at once and its result POSTed to the callback URL", async () => {
    const res = await invoke("t-1", "toolu_01", "sleep", { ms: 20 }, { callId: "call_p1" });
    assert.equal(res.status, 200);
    assert.equal(res.text, "");
    const result = await callbacks.result("t-1", "toolu_01");
    assert.equal(result.path, "/rap/results");
    assert.match(result.contentType ?? "", /^application\/json/);
    assert.deepEqual(result.body, {
      type: "tool_result",
      group_id: "t-1",
      id: "toolu_01",
      call_id: "call_p1",
      text: "slept 20 ms",
    });
  });

  it("1000 sleeps cancelled by one runtime at once all stop, and every cancel is answered 200", async () => {
    const CALLS = 1000;
    const thread = "t-burst";
    const ids = Array.from({ length: CALLS }, (_, n) => `toolu_burst_${n}`);
    const before = await stats();
    // The fan-out: 1000 sleeps in one thread (its bound on calls in flight), invoked 50 at a time.
    for (let first = 0; first < CALLS; first += 50) {
      const batch = ids.slice(first, first + 50);
      const statuses = await Promise.all(batch.map(async (id) => (await invoke(thread, id, "sleep", { ms: 60000 })).status));
      assert.deepEqual(statuses, batch.map(() => 200));
    }
    await pollUntil(stats, (s) => s.started === before.started + CALLS, 20000, "the 1000 sleeps started");

    // The runtime interrupts the thread: every cancel at once, as one client (its token, its host) through its
    // HTTP client's pool of keep-alive connections, so none waits for another's answer before it is sent.
    const runtime = new Agent({ keepAlive: true, maxSockets: 100 });
    try {
      const answers = await withTimeout(
        Promise.all(ids.map((id) => postWith(runtime, "/cancel_tool_call", { thread_id: thread, tool_call_id: id }))),
        20000,
        "the 1000 cancels were not all answered",
      );
      const notOk = answers.filter((answer) => answer.status !== 200 || answer.text !== "");
      assert.deepEqual(notOk, [], "every cancel is answered 200, with an empty body");
    } finally {
      runtime.destroy();
    }

    // A cancel past the rate limit would be answered 200 but do nothing: its sleep would run on.
    const after = await pollUntil(
      stats,
      (s) => s.cancelled === before.cancelled + CALLS && s.inFlight === 0,
      20000,
      `every sleep stopped (before: ${JSON.stringify(before)})`,
    );
    assert.equal(after.started, before.started + CALLS);
    assert.equal(after.completed, before.completed);
    assert.deepEqual(
      callbacks.results.filter((r) => r.body.group_id === thread),
      [],
      "a cancelled call sends no result",
    );
  });

  it("rap_cancel stops a sleep: 200 from the server, an error from a refusing URL, and no result", async () => {
    const before = await stats();
    const thread = "t-cancel";
    const call = "toolu_long";
    assert.equal((await invoke(thread, call, "sleep", { ms: 60000 })).status, 200);
    await pollUntil(stats, (s) => s.started === before.started + 1, 5000, "the sleep started");

    const refusing = await refusingUrl();
    const cancel = await run("rap_cancel", ["--token", TOKEN, "--thread", thread, "--call", call, server.url, refusing]);
    assert.equal(cancel.code, 0, `rap_cancel exited with ${cancel.code}: ${cancel.stderr}`);
    const lines = cancel.stdout.split("\n").filter((line) => line !== "");
    assert.equal(lines.length, 2, `one line per server: ${JSON.stringify(cancel.stdout)}`);
    // `URL OUTCOME ELAPSED ms[: DETAIL]`, in the order the servers were given.
    assert.match(lines[0], new RegExp(`^${escape(server.url)} 200 \\d+ ms$`));
    assert.match(lines[1], new RegExp(`^${escape(refusing)} error \\d+ ms: \\S`));

    const after = await pollUntil(
      stats,
      (s) => s.cancelled === before.cancelled + 1 && s.inFlight === 0,
      5000,
      `stats after the cancel (before: ${JSON.stringify(before)})`,
    );
    assert.equal(after.started, before.started + 1);
    assert.equal(after.completed, before.completed);
    const status = await post("/tool_call_status", { thread_id: thread, tool_call_id: call });
    assert.deepEqual(JSON.parse(status.text), { alive: false });
    // The stats result was sent after the call was over (inFlight 0): a result of the call would have come first.
    assert.deepEqual(
      callbacks.results.filter((r) => r.body.group_id === thread),
      [],
      "a cancelled call sends no result",
    );
  });
});

describe("rap_cancel against tool servers that fail or hang", () => {
  /** A node:http tool server that records every request and answers `status`, or never answers (`hang`). */
  async function toolServer(status, { hang = false } = {}) {
    const hits = [];
    const sockets = new Set();
    const server = createServer((req, res) => {
      let body = "";
      req.setEncoding("utf8");
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        hits.push({ method: req.method, path: req.url, authorization: req.headers.authorization, body });
        if (!hang) res.writeHead(status).end();
      });
    });
    server.on("connection", (socket) => {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    return {
      url: `http://127.0.0.1:${server.address().port}`,
      hits,
      close() {
        for (const socket of sockets) socket.destroy();
        return new Promise((resolve) => server.close(resolve));
      },
    };
  }

  /** Each server got exactly one POST of the cancel, with the token, and nothing more (no retry). */
  function gotOneCancel(servers, thread, call) {
    for (const server of servers) {
      assert.equal(server.hits.length, 1, `${server.url} got ${server.hits.length} requests`);
      const [hit] = server.hits;
      assert.equal(hit.method, "POST");
      assert.equal(hit.path, "/cancel_tool_call");
      assert.equal(hit.authorization, `Bearer ${TOKEN}`);
      assert.deepEqual(JSON.parse(hit.body), { thread_id: thread, tool_call_id: call });
    }
  }

  it("prints a 200, a 500 and a timeout after --timeout-ms, exits 0, and sends each server one POST", async () => {
    const servers = [await toolServer(200), await toolServer(500), await toolServer(0, { hang: true })];
    try {
      const [ok, failing, hanging] = servers;
      const args = ["--token", TOKEN, "--thread", "t-9", "--call", "c-9", "--timeout-ms", "300"];
      const cancel = await run("rap_cancel", [...args, ok.url, failing.url, hanging.url]);
      assert.equal(cancel.code, 0, `rap_cancel exited with ${cancel.code}: ${cancel.stderr}`);
      const lines = cancel.stdout.split("\n").filter((line) => line !== "");
      assert.equal(lines.length, 3, `one line per server: ${JSON.stringify(cancel.stdout)}`);
      assert.match(lines[0], new RegExp(`^${escape(ok.url)} 200 \\d+ ms$`));
      assert.match(lines[1], new RegExp(`^${escape(failing.url)} 500 \\d+ ms$`));
      const timedOut = lines[2].match(new RegExp(`^${escape(hanging.url)} timeout (\\d+) ms$`));
      assert.ok(timedOut, lines[2]);
      // Given up on at the flag's timeout, not before it, and not at the default's 2000 ms.
      const ms = Number(timedOut[1]);
      assert.ok(ms >= 300 && ms < 2000, `the hanging server was given up on after ${ms} ms`);
      // Nothing is retried, however each one answered: a while later each still has its one POST.
      await new Promise((resolve) => setTimeout(resolve, 500));
      gotOneCancel(servers, "t-9", "c-9");
    } finally {
      await Promise.all(servers.map((server) => server.close()));
    }
  });

  it("gives a hanging server 2000 ms when no --timeout-ms is given", async () => {
    const hanging = await toolServer(0, { hang: true });
    try {
      const cancel = await run("rap_cancel", ["--token", TOKEN, "--thread", "t", "--call", "c", hanging.url]);
      assert.equal(cancel.code, 0, `rap_cancel exited with ${cancel.code}: ${cancel.stderr}`);
      const timedOut = cancel.stdout.trim().match(new RegExp(`^${escape(hanging.url)} timeout (\\d+) ms$`));
      assert.ok(timedOut, cancel.stdout);
      assert.ok(Number(timedOut[1]) >= 2000, `given up on after ${timedOut[1]} ms`);
      gotOneCancel([hanging], "t", "c");
    } finally {
      await hanging.close();
    }
  });
});

/** `text` as a regular expression that matches it literally. */
function escape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
