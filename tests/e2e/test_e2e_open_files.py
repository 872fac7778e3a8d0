"""tests/e2e/test_e2e_open_files.py — attnd within its open-file limit.

Every connection holds a descriptor. At start attnd raises its soft
RLIMIT_NOFILE as far as --max-connections needs; when the hard limit is
lower it lowers the connection cap, with a warning, keeping descriptors for
its own files (server/fdbudget.c):

- a low soft limit under a high hard one is raised, without a warning;
- a low hard limit lowers the cap (said at info level when the cap is the
  default, with a warning when it was asked for): connections past it wait in the listen
  backlog instead of failing accept() with EMFILE (which made
  libmicrohttpd log a warning for each try, and spin), and are served in
  turn once others close;
- with every connection the cap allows held open, one of them still
  appends to a journalled session while snapshots are rewritten, and the
  rows survive a restart;
- a limit too low for even one connection stops the start with a clear
  error (it used to abort inside libuv, or exit 1 without a word);
- a limit lowered under a running attnd (prlimit) makes accept() fail:
  that is said a line a second at most, naming the open-file limit
  (libmicrohttpd's two lines for every client that tried, one naming an
  option of its own, filled the log), and attnd serves once files are
  free again.
"""
import json
import os
import re
import resource
import shutil
import socket
import ssl
import tempfile
import time

import attnd_proc
from attnd_proc import Attnd, events, listening

D = 16
MAX_ROWS = 32768        # the journal test's session (--max-tokens' default)


def soft_limit(pid):
    with open(f"/proc/{pid}/limits") as f:
        line = next(x for x in f if x.startswith("Max open files"))
    return int(line.split()[3])


def greet(s, timeout):
    """s (a connected TCP socket) after an answer to GET /healthz within
    timeout, over TLS in an ATTND_E2E_TLS run; keep-alive keeps it open.
    None if it was not accepted by then."""
    try:
        s.settimeout(timeout)
        s = attnd_proc.suite_wrap(s)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        if s.recv(65536).startswith(b"HTTP/1.1 200"):
            return s
    except (socket.timeout, ssl.SSLError, OSError):
        pass
    s.close()
    return None


def dial(a):
    return socket.create_connection(("127.0.0.1", a.port), timeout=5)


def served(a, timeout):
    """A new connection that got an answer within timeout, or None."""
    return greet(dial(a), timeout)


def accept_trouble(a):
    """Log lines of accept() failing for want of descriptors, or of a
    connection accepted past the cap and closed."""
    return [e["msg"] for e in events(a) if "accepting" in e["msg"] or
            "resource limit" in e["msg"] or "connection limit" in e["msg"]]


def test_a_low_soft_limit_is_raised_for_the_connections():
    with Attnd(nofile=(64, 4096)) as a:
        ev = listening(a)
        assert ev["max_connections"] == "1000"
        files = int(ev["open_files"])
        assert 1000 < files <= 4096
        assert soft_limit(a.proc.pid) == files
        assert [e for e in events(a) if e["level"] != "info"] == []


# The reserve grows with the transport threads, whose default is the CPU
# count: two of each keep a limit of 64 roomy on any machine.
THREADS = ("--http-threads", "2", "--workers", "2")


def lowered(a):
    return [(e["level"], e["msg"]) for e in events(a) if "lowered to" in e["msg"]]


def quiet_but_lowered(a):
    """Lines above info other than the one saying the cap was lowered."""
    return [e for e in events(a) if e["level"] != "info" and "lowered to" not in e["msg"]]


def test_a_low_hard_limit_lowers_the_cap_and_the_rest_wait():
    with Attnd("--max-connections-per-ip", "1000", *THREADS, nofile=(64, 64)) as a:
        said = lowered(a)
        # even the default's: a cap lower than configured is worth a warning
        assert len(said) == 1 and said[0][0] == "warn", said
        assert "--max-connections 1000 lowered to" in said[0][1]
        assert quiet_but_lowered(a) == []
        cap = int(listening(a)["max_connections"])
        assert cap == int(re.search(r"lowered to (\d+)", said[0][1]).group(1))
        assert 5 <= cap < 64
        held = []
        while len(held) < cap:
            s = served(a, 5)
            assert s is not None, f"connection {len(held) + 1} of {cap} was not served"
            held.append(s)
        waiting = [dial(a) for _ in range(8)]
        assert greet(waiting[0], 1) is None, "a connection past the cap was served"
        time.sleep(0.5)
        assert accept_trouble(a) == []
        for s in held[:5]:
            s.close()
        # the backlog is first come, first served: waiting[0] (given up
        # above) and the next four take the five places
        late = [greet(s, 5) for s in waiting[1:5]]
        assert None not in late, "the waiting connections were not served"
        for s in held[5:] + waiting[5:] + late:
            s.close()
        time.sleep(0.3)
        assert a.get("/healthz").status == 200
        assert accept_trouble(a) == []


def test_an_asked_for_cap_that_does_not_fit_is_warned_of():
    with Attnd("--max-connections", "1000", *THREADS, nofile=(64, 64)) as a:
        said = lowered(a)
        assert len(said) == 1 and said[0][0] == "warn", said
        assert "raise the hard limit" in said[0][1]


def test_the_journal_keeps_its_files_with_every_connection_taken():
    sd = tempfile.mkdtemp(prefix="attnd-nofile-")
    try:
        _journal_with_every_connection_taken(sd)
    finally:
        shutil.rmtree(sd, ignore_errors=True)


def _journal_with_every_connection_taken(sd):
    flags = ("--state-dir", sd, "--fsync", "always", "--snapshot-min-bytes", "8k")
    rows = []
    with Attnd(*flags, "--max-connections-per-ip", "1000", *THREADS, nofile=(64, 64)) as a:
        cap = int(listening(a)["max_connections"])
        conn = attnd_proc.http_connection(a.port)   # the one that works
        conn.request("POST", "/v1/sessions",
                     body=f'{{"d_k":{D},"d_v":{D},"max_tokens":{MAX_ROWS}}}',
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 201
        sid = json.loads(r.read())["id"]
        held = [served(a, 5) for _ in range(cap - 1)]
        assert None not in held, "the cap's connections were not all served"
        # 8 rows of 16 floats a request, one each 5 ms (a fast machine
        # would fill the session otherwise): the journal passes 8 KiB many
        # times over, and the journal thread rewrites the snapshot each
        # second.
        deadline = time.monotonic() + 2.5
        n = 0
        while (time.monotonic() < deadline or n < 40) and (n + 1) * 8 <= MAX_ROWS:
            time.sleep(0.005)
            block = [[float((n * 8 + i) * D + j) for j in range(D)] for i in range(8)]
            body = json.dumps({"k": block, "v": block})
            conn.request("POST", f"/v1/sessions/{sid}/kv", body=body,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200, (n, r.status, r.read()[:300])
            r.read()
            rows += block
            n += 1
        conn.close()
        for s in held:
            s.close()
        assert a.logs().count(" written: ") >= 2, "no snapshot was rewritten"
        assert quiet_but_lowered(a) == []
    with Attnd(*flags) as b:
        r = b.get(f"/v1/sessions/{sid}/kv")
        assert r.status == 200, r
        assert r.json()["k"] == rows


def test_a_limit_too_low_for_one_connection_stops_the_start():
    a = Attnd(nofile=(16, 16), wait=False)
    try:
        assert a.proc.wait(timeout=10) == 2
        err = [e["msg"] for e in events(a) if e["level"] == "error"]
        assert len(err) == 1 and "the open-file limit (ulimit -n) is 16" in err[0], err
    finally:
        a.stop()


def test_accept_failing_under_a_lowered_limit_is_said_once_a_second():
    with Attnd("--http-threads", "2") as a:
        pid = a.proc.pid
        opened = len(os.listdir(f"/proc/{pid}/fd"))
        old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (opened, old[1]))  # none to spare
        socks = []
        try:
            for _ in range(40):
                socks.append(dial(a))
            time.sleep(0.5)
        finally:
            for s in socks:
                s.close()
            resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
        assert accept_trouble(a) == []         # not libmicrohttpd's, per try
        said = [e["msg"] for e in events(a) if e["msg"].startswith("cannot accept")]
        assert 1 <= len(said) <= 2, said
        assert "Too many open files" in said[0] and f"ulimit -n, is {opened};" in said[0], said
        s = served(a, 5)                        # files free again: served
        assert s is not None
        s.close()
