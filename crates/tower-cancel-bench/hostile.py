"""Hostile clients against the example servers, as the attacks of BENCHMARKS.md's "Hostile clients" section.

    cargo build --release -p examples --bins
    python3 crates/tower-cancel-bench/hostile.py jsonrpc mcp rap_invocations half_header slowloris abp_flood

Each attack runs against a fresh server process (the release build of its example binary, on a free loopback
port) and prints what a client saw (the statuses) and what the server kept (its RSS, read from /proc). Linux only;
`half_header` needs an open-file limit above 19 000 (`ulimit -n`).
"""
import json, os, pathlib, select, socket, subprocess, sys, threading, time, http.client

BIN = pathlib.Path(__file__).resolve().parents[2] / "target" / "release"

def start(name, *args):
    p = subprocess.Popen([f"{BIN}/{name}", "--addr", "127.0.0.1:0", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    port = int(line.rsplit(":", 1)[1].split("/")[0])
    return p, port

def rss(p):
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    return -1

def hwm(p):
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) // 1024

def post(port, path, body, headers=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    h.update(headers or {})
    c.request("POST", path, body, h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data

def slowloris():
    """1000 connections each dripping a request head, a byte a second: how many the server closed, and when."""
    p, port = start("jsonrpc_http_server")
    head = b"POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Drip: " + b"a" * 100
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(1000)]
    closed = {}
    t0 = time.time()
    for i in range(len(head)):
        if time.time() - t0 > 40:
            break
        for n, c in enumerate(socks):
            if n in closed:
                continue
            try:
                c.send(head[i:i + 1])
                readable, _, _ = select.select([c], [], [], 0)
                if readable and c.recv(1) == b"":
                    closed[n] = time.time() - t0
            except OSError:
                closed[n] = time.time() - t0
        s0 = time.time(); st = post(port, "/rpc", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "demo/stats"}))[0]
        normal = 1000 * (time.time() - s0)
        time.sleep(max(0, 1 - (time.time() - t0 - i)))
    times = sorted(closed.values())
    print(f"jsonrpc_http_server: 1000 connections dripping a head a byte a second for 40 s: {len(closed)} closed by the server"
          + (f", between {times[0]:.1f} and {times[-1]:.1f} s" if times else "")
          + f"; a normal request at the end: {st} in {normal:.0f} ms")
    for c in socks: c.close()
    p.kill()

def rap_invocations():
    """30 000 `sleep` invocations of a minute, 300 threads of 100 calls, as fast as one client sends them."""
    p, port = start("rap_tool_server", "--token", "s3cret", "--allow-private-callbacks")
    before = rss(p)
    codes = {}
    lock = threading.Lock()
    def runtime(thread):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for n in range(100):
            body = json.dumps({"operation": "sleep", "arguments": {"ms": 60_000}, "id": f"c{n}", "call_id": None,
                               "callback_url": "http://127.0.0.1:9/results", "group_id": f"t{thread}"})
            c.request("POST", "/invoke", body, {"content-type": "application/json", "authorization": "Bearer s3cret"})
            r = c.getresponse(); r.read()
            with lock: codes[r.status] = codes.get(r.status, 0) + 1
        c.close()
    t0 = time.time()
    for chunk in range(0, 300, 50):
        ts = [threading.Thread(target=runtime, args=(t,)) for t in range(chunk, chunk + 50)]
        for t in ts: t.start()
        for t in ts: t.join()
    took = time.time() - t0
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    s0 = time.time(); c.request("GET", "/.well-known/rap-toolset"); st = c.getresponse().status; normal = 1000 * (time.time() - s0)
    print(f"rap_tool_server: 30000 invocations in {took:.1f} s: {codes}; discovery then: {st} in {normal:.0f} ms; "
          f"RSS {before} -> {rss(p)} MiB (peak {hwm(p)})")
    p.kill()

def jsonrpc():
    p, port = start("jsonrpc_http_server")
    before = rss(p)
    batch = json.dumps([{"id": n, "method": "a"} for n in range(100_000)])
    results = []
    def one():
        results.append(post(port, "/rpc", batch)[:1] + (len(post.__name__),))
    t0 = time.time()
    threads = [threading.Thread(target=lambda: results.append(post(port, "/rpc", batch))) for _ in range(32)]
    for t in threads: t.start()
    # a normal request while they run
    s0 = time.time(); st = post(port, "/rpc", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "demo/stats"})); s1 = time.time()
    for t in threads: t.join()
    statuses = sorted({r[0] for r in results}); sizes = sorted({len(r[2]) for r in results})
    print(f"jsonrpc: 32 POSTs of a 100000-request batch: statuses {statuses}, reply sizes {sizes} bytes, "
          f"RSS {before} -> peak {hwm(p)} MiB, after {rss(p)} MiB; demo/stats meanwhile {st[0]} in {1000*(s1-s0):.0f} ms")
    p.kill()

def mcp():
    p, port = start("mcp_http_server")
    before = rss(p)
    st, h, _ = post(port, "/mcp", json.dumps({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"m","version":"0"}}}))
    sid = h.get("mcp-session-id") or h.get("Mcp-Session-Id")
    # 5000 sleep POSTs, each hung up after 400 ms
    statuses = {}
    lock = threading.Lock()
    def hang(n):
        body = json.dumps({"jsonrpc":"2.0","id":n,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000}}})
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall((f"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                   f"Mcp-Session-Id: {sid}\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        s.settimeout(0.4)
        try:
            head = s.recv(64).decode(errors="replace")
            code = head.split(" ")[1] if head.startswith("HTTP/1.1") else "none"
        except socket.timeout:
            code = "(running, hung up)"
        s.close()
        with lock: statuses[code] = statuses.get(code, 0) + 1
    for chunk in range(0, 5000, 250):
        ts = [threading.Thread(target=hang, args=(n,)) for n in range(chunk, chunk + 250)]
        for t in ts: t.start()
        for t in ts: t.join()
    time.sleep(0.5)
    print(f"mcp: 5000 sleep POSTs in one session, each hung up after 400 ms: {statuses}; RSS {before} -> {rss(p)} MiB (peak {hwm(p)})")
    # initialize flood
    t0 = time.time(); codes = {}
    for n in range(10_000):
        st, h, _ = post(port, "/mcp", json.dumps({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"f","version":"0"}}}))
        codes[st] = codes.get(st, 0) + 1
    t1 = time.time()
    st, h, _ = post(port, "/mcp", json.dumps({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"new","version":"0"}}}))
    print(f"mcp: 10000 initialize in {t1-t0:.1f} s: {codes}; a new client after them: {st}; RSS {rss(p)} MiB")
    p.kill()


def ws_open(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /abp HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert b" 101 " in head, head
    return s

def ws_frame(opcode, payload):
    mask = b"\x01\x02\x03\x04"
    n = len(payload)
    hdr = bytes([0x80 | opcode])
    if n < 126: hdr += bytes([0x80 | n])
    elif n < 65536: hdr += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else: hdr += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))

def abp_flood():
    p, port = start("abp_app")
    before = rss(p)
    s = ws_open(port)
    s.settimeout(1)
    ping = ws_frame(0x9, b"x" * 125)
    burst = ping * 400
    t0 = time.time(); sent = 0; closed_at = None; peak = 0
    while time.time() - t0 < 45:
        try:
            s.sendall(burst); sent += 400
        except (socket.timeout, OSError) as e:
            if isinstance(e, socket.timeout):
                time.sleep(0.1)
            else:
                closed_at = time.time() - t0
                break
        peak = max(peak, rss(p))
    # another agent meanwhile
    o = ws_open(port); o.close()
    print(f"abp: one agent floods 125-byte pings and never reads: {sent} pings written; "
          f"closed by the server after {closed_at and round(closed_at, 1)} s; RSS {before} -> peak {peak} MiB, after {rss(p)} MiB")
    p.kill()

def half_header():
    for name, path in (("jsonrpc_http_server", "/rpc"), ("abp_app", None)):
        p, port = start(name)
        socks = []
        for _ in range(19_000):
            try:
                c = socket.create_connection(("127.0.0.1", port))
                c.sendall(b"POST /rpc HTTP/1.1\r\nHost: x\r\nContent-")
                socks.append(c)
            except OSError as e:
                break
        time.sleep(1)
        t0 = time.time()
        if path:
            st = post(port, path, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "demo/stats"}), timeout=60)[0]
        else:
            ws_open(port).close(); st = 101
        t1 = time.time()
        print(f"{name}: {len(socks)} connections with half a request header; then a normal request: {st} in {1000*(t1-t0):.0f} ms; RSS {rss(p)} MiB")
        for c in socks: c.close()
        p.kill()

if __name__ == "__main__":
    for row in sys.argv[1:]:
        globals()[row]()
