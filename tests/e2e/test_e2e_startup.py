"""What attnd says when it starts: a default start-up, --http-threads 1 and a
restore of sessions print nothing above info; a restore that had to drop
something warns. A start with nothing changed since the drain's snapshot
keeps it (no file written), a start after changes writes one and says why. --warm-up runs its requests before attnd listens, so the
first requests of its shape fault in fewer pages; one that cannot run
stops the start. --host :: takes IPv4 clients as well as IPv6 ones."""
import array
import base64
import glob
import json
import os
import random
import resource
import shutil
import signal
import socket
import sys
import tempfile
import time

import pytest

from attnd_proc import BIN, Attnd, events


def levels(d):
    return [(e["level"], e["msg"]) for e in events(d)]


def loud(d):
    return [(lv, m) for lv, m in levels(d) if lv != "info"]


def test_start_up_is_quiet_with_one_or_more_http_threads():
    for flags in ((), ("--http-threads", "1"), ("--http-threads", "2")):
        with Attnd(*flags) as d:
            assert d.get("/healthz").status == 200
            assert loud(d) == [], (flags, loud(d))


def test_restoring_sessions_logs_at_info_unless_something_is_skipped():
    sd = tempfile.mkdtemp(prefix="attnd-startup-")
    try:
        with Attnd("--state-dir", sd) as d:
            r = d.post("/v1/sessions", {"d_k": 2, "d_v": 2})
            assert r.status == 201, r
            sid = r.json()["id"]
        with Attnd("--state-dir", sd) as d:
            assert d.get(f"/v1/sessions/{sid}").status == 200
            assert loud(d) == [], loud(d)
            assert any("restored" in m for _, m in levels(d))
        journals = sorted(glob.glob(os.path.join(sd, "journal.*")))
        assert journals, os.listdir(sd)
        with open(journals[-1], "ab") as f:
            f.write(b"\x01not a record at all, a torn tail" * 4)
        with Attnd("--state-dir", sd) as d:
            assert d.get(f"/v1/sessions/{sid}").status == 200
            warned = [m for lv, m in levels(d) if lv == "warn"]
            assert any("dropped" in m for m in warned), levels(d)
    finally:
        shutil.rmtree(sd, ignore_errors=True)


def _state_files(sd):
    """Each file of sd but LOCK: its inode, size and modification time."""
    out = {}
    for name in os.listdir(sd):
        if name != "LOCK":
            st = os.stat(os.path.join(sd, name))
            out[name] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def test_a_start_after_a_drain_keeps_its_snapshot():
    """The drain writes a snapshot; the next start, with nothing changed
    since, reads it and writes none (before, it wrote the same sessions
    into a new snapshot before listening: seconds for a large state): the
    state directory holds the same files, untouched, and the log says the
    snapshot was kept. A start after a change (then kill -9) writes one and
    says why."""
    sd = tempfile.mkdtemp(prefix="attnd-keep-")
    try:
        with Attnd("--state-dir", sd) as a:
            sid = a.post("/v1/sessions", {"d_k": 2, "d_v": 2}).json()["id"]
            r = a.post(f"/v1/sessions/{sid}/kv", {"k": [[1, 2], [3, 4]], "v": [[5, 6], [7, 8]]})
            assert r.status == 200, r
            kv = a.get(f"/v1/sessions/{sid}/kv").body
            assert a.stop() == 0
        drained = _state_files(sd)
        assert sorted(drained) == ["journal.0000000000000002", "snapshot.0000000000000002"], \
            drained
        with Attnd("--state-dir", sd) as b:
            assert _state_files(sd) == drained          # listening, nothing written
            msgs = [m for _, m in levels(b)]
            kept = [m for m in msgs if " kept: " in m]
            assert len(kept) == 1 and "snapshot 0000000000000002 kept: 1 sessions" in kept[0], \
                msgs
            assert not any(" written" in m for m in msgs), msgs
            assert loud(b) == [], loud(b)
            assert b.get(f"/v1/sessions/{sid}/kv").body == kv
            r = b.post(f"/v1/sessions/{sid}/kv", {"k": [[0, 1]], "v": [[1, 0]]})
            assert r.status == 200, r
            b.proc.send_signal(signal.SIGKILL)
            b.proc.wait(timeout=10)
        with Attnd("--state-dir", sd) as c:
            msgs = [m for _, m in levels(c)]
            assert any("a new snapshot is written at start: records in the journal since "
                       "snapshot.0000000000000002: " in m for m in msgs), msgs
            assert any("snapshot 0000000000000003 written: 1 sessions" in m for m in msgs), msgs
            assert c.get(f"/v1/sessions/{sid}").json()["length"] == 3
    finally:
        shutil.rmtree(sd, ignore_errors=True)


def _asan(path):
    with open(path, "rb") as f:
        return b"__asan_init" in f.read()


def test_a_snapshot_larger_than_the_address_space_is_read_a_record_at_a_time():
    """A snapshot far larger than the address space attnd may take (under
    RLIMIT_AS, as in a container with a memory limit) is read a record at a
    time, not mapped whole: attnd starts and restores the session; the
    snapshot is made that large by a hole at its end, which reads as bytes
    after its end record (a warn line: not whole), and it is kept as a copy.
    (Before, mapping it failed with ENOMEM and attnd did not start.)"""
    if _asan(BIN):
        pytest.skip("AddressSanitizer reserves more address space than the limit")
    sd = tempfile.mkdtemp(prefix="attnd-large-")
    try:
        with Attnd("--state-dir", sd) as a:
            sid = a.post("/v1/sessions", {"d_k": 2, "d_v": 2}).json()["id"]
            r = a.post(f"/v1/sessions/{sid}/kv", {"k": [[1, 2], [3, 4]], "v": [[5, 6], [7, 8]]})
            assert r.status == 200, r
            assert a.stop() == 0
        snapshot = os.path.join(sd, "snapshot.0000000000000002")
        size = os.path.getsize(snapshot)
        os.truncate(snapshot, size + (64 << 30))

        def small_address_space():
            resource.setrlimit(resource.RLIMIT_AS, (32 << 30, resource.RLIM_INFINITY))
        with Attnd("--state-dir", sd, preexec=small_address_space) as b:
            assert b.get(f"/v1/sessions/{sid}").json()["length"] == 2
            warned = [m for lv, m in levels(b) if lv == "warn"]
            end = size - (16 + 20)      # the end record: frame and payload
            assert any(f"1 records kept, 0 dropped; it is not whole: {64 << 30} bytes after "
                       f"its end record at byte {end}, not read" in m
                       for m in warned), levels(b)
            assert any("snapshot.0000000000000002: a copy is kept as" in m
                       for m in warned), levels(b)
    finally:
        shutil.rmtree(sd, ignore_errors=True)


# ---- --warm-up ------------------------------------------------------------------

WARM_SHAPE = (512, 2048, 64)        # n, L, d: a base64 body of 1.5 MB


def _minor_faults(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def _bodies(n, L, d):
    """The float32 request of this shape as base64 JSON and as OIP v2 binary
    (its body and the length of its JSON header)."""
    rng = random.Random(7)
    raw = {name: array.array("f", (rng.uniform(-1, 1) for _ in range(rows * d))).tobytes()
           for name, rows in (("q", n), ("k", L), ("v", L))}
    if sys.byteorder != "little":
        raise AssertionError("the bodies below are little-endian")
    b64 = json.dumps({
        **{name: {"shape": [len(raw[name]) // 4 // d, d], "dtype": "float32",
                  "data": base64.b64encode(raw[name]).decode()} for name in ("q", "k", "v")},
        "dtype": "float32", "encoding": "base64", "return": ["output"]}).encode()
    header = json.dumps({
        "inputs": [{"name": name, "shape": [len(raw[name]) // 4 // d, d], "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw[name])}}
                   for name in ("q", "k", "v")],
        "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
    return b64, (header + raw["q"] + raw["k"] + raw["v"], len(header))


def _first_requests(*flags):
    """Page faults of attnd's first v2 and first base64 request (in that
    order, so the v2 one finds nothing a client left), and its log. One
    worker (two pool threads) and one transport thread: fewer first uses
    of a thread, whose own faults are not what is measured."""
    b64, (v2, v2_json) = _bodies(*WARM_SHAPE)
    with Attnd("--workers", "1", "--http-threads", "1", *flags) as d:
        faults = []
        for path, body, headers in (
                ("/v2/models/attention/infer", v2,
                 {"Content-Type": "application/octet-stream",
                  "Inference-Header-Content-Length": str(v2_json)}),
                ("/v1/attention", b64, {"Content-Type": "application/json"})):
            f0 = _minor_faults(d.proc.pid)
            r = d.post(path, body, headers=headers)
            faults.append(_minor_faults(d.proc.pid) - f0)
            assert r.status == 200, r
        return faults, events(d)


def test_warm_up_readies_the_first_requests_of_its_shape():
    """The first requests after start fault in fewer pages after --warm-up:
    their bodies, tensors and answers find blocks the warm-up left. The
    daemon logs each shape warmed, at info, with how many pool threads ran
    it (all of them), before it listens."""
    cold, _ = _first_requests()
    warm, log = _first_requests("--warm-up",
                                "%dx%dx%d,2x16x32x8,2x16x32x8:bfloat16" % WARM_SHAPE)
    # v2: a 1.1 MB body and 1 MB of k and v; base64: 1.5 MB, and the blocks
    # the v2 request left
    assert cold[0] > 300 and cold[1] > 150, cold
    assert warm[0] < cold[0] / 2 and warm[1] < cold[1] / 2, (cold, warm)
    msgs = [e["msg"] for e in log]
    warmed = [e for e in log if e["msg"] == "warmed up"]
    # both shapes, at info, each run on the three pool threads of one worker
    assert [(e["level"], e["shape"], e["threads"]) for e in warmed] == [
        ("info", "%dx%dx%d" % WARM_SHAPE, "3"), ("info", "2x16x32x8", "3"),
        ("info", "2x16x32x8:bfloat16", "3")], warmed
    assert msgs.index("warmed up") < msgs.index("listening"), msgs


def test_warm_up_that_cannot_run_stops_the_start():
    """A shape that does not parse, or one over the limits, is a flag to fix:
    attnd says which and exits 2 before it listens; the environment twin
    works like the flag."""
    import subprocess
    from attnd_proc import BIN
    for flags, env, said in (
            (["--warm-up", "64x64"], {}, "invalid --warm-up '64x64'"),
            (["--warm-up", "1x1x1,0x2x2"], {}, "invalid --warm-up"),
            (["--warm-up", "64x64x64:int8"], {}, "each optionally :float64"),
            ([], {"ATTND_WARM_UP": "64x64x64x64x64"}, "invalid value of ATTND_WARM_UP"),
            (["--warm-up", "64x64x64", "--max-elements", "1000"], {},
             "--warm-up 64x64x64: its 12288 input numbers are over --max-elements 1000"),
            (["--warm-up", "300x300x64", "--max-body-bytes", "100k"], {},
             "--warm-up 300x300x64: base64 JSON: its body of"),
            (["--warm-up", "200x200x64:float64", "--max-body-bytes", "300k"], {},
             "--warm-up 200x200x64:float64: base64 JSON: its body of")):
        p = subprocess.run([BIN, "--port", "0", *flags], capture_output=True, text=True,
                           env=dict(os.environ, **env), timeout=30)
        assert p.returncode == 2, (flags, p.returncode, p.stdout, p.stderr)
        assert said in p.stdout + p.stderr, (flags, p.stdout, p.stderr)
        assert "listening" not in p.stdout, p.stdout


def _wait_for_warming_up(d):
    """Until attnd logs that its warm-up starts (its signal handlers are in
    place by then)."""
    deadline = time.time() + 30
    while not any(e["msg"] == "warming up" for e in events(d)):
        assert d.proc.poll() is None and time.time() < deadline, d.logs()
        time.sleep(0.01)


def test_a_signal_in_the_warm_up_stops_the_start_cleanly():
    """SIGTERM or SIGINT while --warm-up runs: attnd stops after the request
    in hand, says so, and exits 0 without listening (nothing was accepted,
    so nothing is lost), as a drain ends. The shapes make a warm-up of
    seconds on two pool threads; the signal follows its first line."""
    shapes = "4096x4096x128:float64,4096x4096x128,2048x2048x128:float64,2048x2048x128"
    for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        d = Attnd("--workers", "1", "--warm-up", shapes, wait=False)
        with d:
            _wait_for_warming_up(d)
            d.signal(sig)
            assert d.wait(timeout=30) == 0, d.logs()
            log = events(d)
            msgs = [e["msg"] for e in log]
            assert [(e["shapes"], e["threads"]) for e in log if e["msg"] == "warming up"] == [
                (shapes, "3")], msgs
            assert f"{name} during the warm-up: stopping before listening" in msgs, msgs
            assert any(m.startswith("warm-up stopped after ") for m in msgs), msgs
            assert "listening" not in msgs and msgs[-1] == "stopped (exit 0)", msgs
            assert not os.path.exists(d.port_file)
            assert [e for e in log if e["level"] != "info"] == [], d.logs()


def test_a_second_signal_in_the_warm_up_exits_at_once():
    """A second signal while the warm-up finishes its request in hand exits
    1 at once, as in a drain. Two different signals, sent together, so the
    kernel cannot merge them into one. No log line marks the moment a
    request is in hand, so the test waits 0.2 s into the first turn."""
    d = Attnd("--workers", "1", "--warm-up", "4096x4096x128:float64,4096x4096x128",
              wait=False)
    with d:
        _wait_for_warming_up(d)
        # into the first thread's turn (two turns of about 0.4 s here), so
        # a request is in hand when the signals land
        time.sleep(0.2)
        assert d.proc.poll() is None, d.logs()
        d.signal(signal.SIGTERM)
        d.signal(signal.SIGINT)
        assert d.wait(timeout=30) == 1, d.logs()
        warned = [e["msg"] for e in events(d) if e["level"] == "warn"]
        assert len(warned) == 1 and warned[0].startswith("second SIG"), d.logs()
        assert warned[0].endswith(" during the warm-up: exiting now"), d.logs()
        assert not os.path.exists(d.port_file)


def _healthz(host, port):
    """The status line of GET /healthz over a plain connection to host."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect((host, port))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return s.recv(64).split(b"\r\n")[0]


def test_host_unspecified_ipv6_takes_ipv4_clients_too():
    """--host :: listens on both families (as ::ffff:a.b.c.d for IPv4), as
    a dual-stack server does; --host ::1 is that address alone."""
    if os.environ.get("ATTND_E2E_TLS"):
        return                          # plain sockets here
    with Attnd("--host", "::") as d:
        assert _healthz("127.0.0.1", d.port) == b"HTTP/1.1 200 OK"
        assert _healthz("::1", d.port) == b"HTTP/1.1 200 OK"
    with Attnd("--host", "::1", wait=False) as d:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(d.port_file) as f:
                    d.port = int(f.read().strip())
                assert _healthz("::1", d.port) == b"HTTP/1.1 200 OK"
                break
            except (OSError, ValueError):
                time.sleep(0.05)
        else:
            raise AssertionError("no answer on ::1")
        try:
            _healthz("127.0.0.1", d.port)
            raise AssertionError("::1 took an IPv4 client")
        except ConnectionRefusedError:
            pass


def test_a_signal_while_the_sessions_are_restored_stops_the_start_cleanly():
    """SIGTERM while --state-dir's sessions are read (a 256 MB session: a
    second or so): attnd finishes reading, says so, and exits 0 without
    listening, its state untouched. (Before, the signal came before its
    handlers: outside a container it killed the process, and as a
    container's PID 1 it was dropped and attnd went on to serve.)"""
    sd = tempfile.mkdtemp(prefix="attnd-restore-signal-")
    try:
        heads, d, rows, chunk = 8, 128, 32768, 4096
        with Attnd("--state-dir", sd, "--max-body-bytes", "64m", "--max-elements", "16m",
                   "--max-tokens", str(rows), "--max-cache-bytes", "1g") as a:
            r = a.post("/v1/sessions", {"d_k": d, "d_v": d, "heads": heads,
                                        "dtype": "float32", "max_tokens": rows})
            assert r.status == 201, r
            sid = r.json()["id"]
            block = base64.b64encode(array.array("f", [0.25] * (heads * chunk * d))
                                     .tobytes()).decode()
            t = {"shape": [heads, chunk, d], "dtype": "float32", "data": block}
            for _ in range(rows // chunk):
                r = a.post(f"/v1/sessions/{sid}/kv", {"k": t, "v": t})
                assert r.status == 200, r
            assert a.stop() == 0
        b = Attnd("--state-dir", sd, "--max-tokens", str(rows), "--max-cache-bytes", "1g",
                  wait=False)
        with b:
            deadline = time.time() + 30
            while not any(e["msg"].startswith("sessions: restoring from") for e in events(b)):
                assert b.proc.poll() is None and time.time() < deadline, b.logs()
                time.sleep(0.005)
            b.signal(signal.SIGTERM)
            assert b.wait(timeout=60) == 0, b.logs()
            msgs = [e["msg"] for e in events(b)]
            assert "SIGTERM while the sessions were restored: stopping before listening" \
                in msgs, msgs
            assert msgs.index("SIGTERM while the sessions were restored: stopping before "
                              "listening") > msgs.index("sessions restored from %s: 1" % sd)
            assert "listening" not in msgs and msgs[-1] == "stopped (exit 0)", msgs
            assert not os.path.exists(b.port_file)
        with Attnd("--state-dir", sd, "--max-tokens", str(rows), "--max-cache-bytes", "1g") as c:
            r = c.get(f"/v1/sessions/{sid}")
            assert r.status == 200 and r.json()["length"] == rows, r
    finally:
        shutil.rmtree(sd, ignore_errors=True)
