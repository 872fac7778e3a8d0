#!/usr/bin/env python3
"""tests/bench/load_driver.py — a bounded mixed-load driver for attnd.

Threads, each with one keep-alive http.client connection, send a mix of
stateless attention requests, session decode steps (append one K/V row and
attend; roll the session back to empty when it reaches --window rows, so the
cache stays bounded), session reads, health probes, and ~5% malformed
requests, until a deadline. Every answer is classified: 2xx, the expected 4xx
for a malformed request, an unexpected 4xx, 5xx, or a connection error.

Used by tests/e2e/test_e2e_load.py; also runnable by hand:
    python3 tests/bench/load_driver.py --port 8080 --seconds 60 --threads 4

Also holds the /proc helpers the reliability tests share (RSS, open fds).
Only loopback addresses are ever targeted.
"""
import argparse
import http.client
import json
import os
import random
import threading
import time


def _connection(port):
    """HTTP, or HTTPS without verification in an ATTND_E2E_TLS run (loopback)."""
    if os.environ.get("ATTND_E2E_TLS") == "1":
        import ssl
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ctx)
    return http.client.HTTPConnection("127.0.0.1", port, timeout=30)

D = 16          # d_k = d_v of the load requests
HEADS = 2       # query heads of the load sessions (kv_heads 1)


def rss_kib(pid):
    """Resident set size of pid in KiB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def sanitized(pid):
    """True when pid runs under ASan/TSan (their allocators hold freed memory
    in quarantine, so resident memory says nothing about leaks there)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read()
    except OSError:
        return False
    return "libasan" in maps or "libtsan" in maps or "libclang_rt" in maps


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_fds(pid, limit, timeout=5.0):
    """Wait until pid has at most `limit` fds; returns the last count."""
    deadline = time.time() + timeout
    n = fd_count(pid)
    while n > limit and time.time() < deadline:
        time.sleep(0.05)
        n = fd_count(pid)
    return n


def _mat(rng, rows, cols):
    return [[round(rng.uniform(-1, 1), 4) for _ in range(cols)] for _ in range(rows)]


MALFORMED = [
    (b'{"q":[[1,0]],"k":[[1,0]]', "invalid_json"),
    (b'{"q":[[1,0]],"k":[[1,0],[0,1]],"v":[[1,2],[3]]}', "ragged_matrix"),
    (b'{"q":[[1,0]],"k":[[1,0,0]],"v":[[1,2]]}', "shape_mismatch"),
    (b'{"q":[[1,"x"]],"k":[[1,0]],"v":[[1,2]]}', "invalid_field"),
    (b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"q":[[1,0]]}', "duplicate_key"),
    (b'{"q":[],"k":[[1,0]],"v":[[1,2]]}', "empty_matrix"),
    (b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"softmax":"nope"}', "invalid_field"),
]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_kind = {}           # kind -> count
        self.status = {}            # status -> count
        self.errors = []            # first few problems, for the report
        self.requests = 0
        self.conn_errors = 0
        self.server_errors = 0
        self.unexpected = 0

    def add(self, kind, status, problem=None):
        with self.lock:
            self.requests += 1
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
            self.status[status] = self.status.get(status, 0) + 1
            if status == "conn":
                self.conn_errors += 1
            elif isinstance(status, int) and status >= 500:
                self.server_errors += 1
            if problem:
                self.unexpected += 1
                if len(self.errors) < 20:
                    self.errors.append(problem)

    def summary(self):
        return {"requests": self.requests, "conn_errors": self.conn_errors,
                "server_errors": self.server_errors, "unexpected": self.unexpected,
                "by_kind": self.by_kind,
                "status": {str(k): v for k, v in self.status.items()},
                "errors": self.errors}


class Worker(threading.Thread):
    def __init__(self, port, deadline, stats, seed, window, malformed_rate):
        super().__init__(daemon=True)
        self.port = port
        self.deadline = deadline
        self.stats = stats
        self.rng = random.Random(seed)
        self.window = window
        self.malformed_rate = malformed_rate
        self.conn = None
        self.sid = None
        self.length = 0

    def _call(self, method, path, body=None):
        """Returns (status, body bytes) or raises OSError/HTTPException."""
        if self.conn is None:
            self.conn = _connection(self.port)
        hdrs = {}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
            if not isinstance(body, bytes):
                body = json.dumps(body).encode()
        try:
            self.conn.request(method, path, body=body, headers=hdrs)
            r = self.conn.getresponse()
            data = r.read()
            if (r.getheader("Connection") or "").lower() == "close":
                self.conn.close()
                self.conn = None
            return r.status, data
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise

    def _do(self, kind, method, path, body=None, want=(200,), want_code=None):
        try:
            status, data = self._call(method, path, body)
        except (OSError, http.client.HTTPException) as e:
            self.stats.add(kind, "conn", f"{kind} {method} {path}: {type(e).__name__}: {e}")
            return None, None
        problem = None
        if status not in want:
            problem = f"{kind} {method} {path}: {status} {data[:200]!r}"
        elif want_code is not None:
            try:
                code = json.loads(data)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = None
            if code != want_code:
                problem = f"{kind}: code {code!r}, expected {want_code!r}"
        self.stats.add(kind, status, problem)
        return status, data

    def _ensure_session(self):
        if self.sid is not None:
            return True
        status, data = self._do("session_create", "POST", "/v1/sessions",
                                {"d_k": D, "d_v": D, "heads": HEADS, "kv_heads": 1,
                                 "max_tokens": self.window + 8}, want=(201,))
        if status != 201:
            return False
        self.sid = json.loads(data)["id"]
        self.length = 0
        return True

    def stateless(self):
        n, L = self.rng.randint(1, 8), self.rng.randint(1, 32)
        body = {"q": _mat(self.rng, n, D), "k": _mat(self.rng, L, D), "v": _mat(self.rng, L, D)}
        if self.rng.random() < 0.3:
            body["causal"] = True
        if self.rng.random() < 0.2:
            body["softmax"] = "softmax1"
        self._do("stateless", "POST", "/v1/attention", body)

    def decode(self):
        if not self._ensure_session():
            return
        if self.length >= self.window:
            status, _ = self._do("truncate", "POST", f"/v1/sessions/{self.sid}/truncate",
                                 {"length": 0})
            if status == 200:
                self.length = 0
            return
        body = {"q": [_mat(self.rng, 1, D) for _ in range(HEADS)],
                "k": [_mat(self.rng, 1, D)], "v": [_mat(self.rng, 1, D)],
                "causal": True, "return": ["output"]}
        status, _ = self._do("decode", "POST", f"/v1/sessions/{self.sid}/attention", body)
        if status == 200:
            self.length += 1

    def read(self):
        if self.sid is not None and self.rng.random() < 0.5:
            self._do("session_get", "GET", f"/v1/sessions/{self.sid}")
        else:
            self._do("healthz", "GET", "/healthz")

    def malformed(self):
        body, code = self.rng.choice(MALFORMED)
        self._do("malformed", "POST", "/v1/attention", body,
                 want=(400, 422), want_code=code)

    def run(self):
        while time.time() < self.deadline:
            x = self.rng.random()
            if x < self.malformed_rate:
                self.malformed()
            elif x < 0.45:
                self.stateless()
            elif x < 0.90:
                self.decode()
            else:
                self.read()
        if self.sid is not None:
            self._do("session_delete", "DELETE", f"/v1/sessions/{self.sid}", want=(204,))
        if self.conn is not None:
            self.conn.close()


def run_load(port, seconds, threads=4, seed=1, window=48, malformed_rate=0.05):
    """Run the mix for `seconds`; returns the Stats."""
    stats = Stats()
    deadline = time.time() + seconds
    workers = [Worker(port, deadline, stats, seed * 1000 + i, window, malformed_rate)
               for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(seconds + 60)
    return stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--pid", type=int, help="attnd's pid, to report RSS and fds")
    args = ap.parse_args()
    before = rss_kib(args.pid) if args.pid else None
    stats = run_load(args.port, args.seconds, args.threads)
    out = stats.summary()
    out["rps"] = round(stats.requests / args.seconds, 1)
    if args.pid:
        out["rss_kib_before"] = before
        out["rss_kib_after"] = rss_kib(args.pid)
        out["fds"] = fd_count(args.pid)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
