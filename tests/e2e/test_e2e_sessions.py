"""tests/e2e/test_e2e_sessions.py — sessions (the KV cache) on the real daemon.

- Decoding through a session equals the stateless /v1/attention on the full
  K/V bit for bit in float64 (JSON numbers and base64 bytes), over a prefill
  and several decode steps, with GQA, q/k/v biases, RoPE and ALiBi on.
- Truncate and fork are isolated from each other; forks share pages (no
  bytes added by a fork, a write copies one page, bytes/shared_bytes, the
  parent deleted first leaves the forks answering as it did).
- Capacity: reject (503 capacity_exhausted + Retry-After, reads keep
  working) and lru (the least recently used idle session goes).
- TTL: an idle session expires (404), one in use does not.
- Restart with --state-dir: the same requests give the same bytes.
- HEAD on a session, its rows and its export is GET's answer without the
  body: the same status, Content-Type and Content-Length (an export's
  counted, not built), 404 for an unknown session, 401 without the key;
  a 405's Allow lists HEAD beside GET.
"""
import base64
import os
import random
import shutil
import signal
import struct
import tempfile
import time

import pytest

from attnd_proc import Attnd, events

OPTS = {"bias": {"q": [0.25, -0.5, 1.0, 0.0], "k": [[3, -2, 0.5, 1], [0, 1, -1, 2]],
                 "v": [1, -1, 0.5]},
        "rope": {"base": 10000, "pairs": "interleaved"}, "alibi": True}


def _mat(rng, rows, cols):
    return [[rng.uniform(-2, 2) for _ in range(cols)] for _ in range(rows)]


def _without_elapsed(body):
    j = body if isinstance(body, dict) else None
    j = dict(j)
    j["meta"] = {k: v for k, v in j["meta"].items() if k != "elapsed_us"}
    return j


def _create(d, spec):
    r = d.post("/v1/sessions", spec)
    assert r.status == 201, r
    sid = r.json()["id"]
    assert r.headers["location"] == f"/v1/sessions/{sid}"
    return sid


def test_decode_equals_stateless_bit_for_bit(attnd):
    rng = random.Random(1)
    h, h_kv, d_k, d_v = 4, 2, 4, 3
    sid = _create(attnd, {"d_k": d_k, "d_v": d_v, "heads": h, "kv_heads": h_kv, **OPTS})
    K = [[] for _ in range(h_kv)]
    V = [[] for _ in range(h_kv)]
    for step, m in enumerate([5, 1, 1, 2, 1, 1]):        # prefill, then decode
        k = [_mat(rng, m, d_k) for _ in range(h_kv)]
        v = [_mat(rng, m, d_v) for _ in range(h_kv)]
        q = [_mat(rng, m, d_k) for _ in range(h)]
        for g in range(h_kv):
            K[g] += k[g]
            V[g] += v[g]
        enc = "base64" if step % 2 else "json"
        a = attnd.post(f"/v1/sessions/{sid}/attention",
                       {"q": q, "k": k, "v": v, "causal": True, "encoding": enc})
        b = attnd.post("/v1/attention", {"q": q, "k": K, "v": V, "causal": True,
                                         "encoding": enc, **OPTS})
        assert a.status == 200 and b.status == 200, (a, b)
        ja, jb = a.json(), b.json()
        assert ja["meta"]["L"] == len(K[0]) and ja["meta"]["n"] == m
        for key in ("scores", "weights", "output"):
            assert ja[key] == jb[key], f"step {step}: {key} differs"
        assert _without_elapsed(ja) == _without_elapsed(jb)
    # the cache holds the prepared rows of every step
    r = attnd.get(f"/v1/sessions/{sid}")
    assert r.json()["length"] == 11
    # a query-only step against the whole cache, with an attn_bias over it
    q = [_mat(rng, 1, d_k) for _ in range(h)]
    ab = [[rng.uniform(-1, 1) for _ in range(11)]]
    a = attnd.post(f"/v1/sessions/{sid}/attention", {"q": q, "attn_bias": ab})
    b = attnd.post("/v1/attention", {"q": q, "k": K, "v": V, "attn_bias": ab, **OPTS})
    assert a.status == 200 and b.status == 200
    assert _without_elapsed(a.json()) == _without_elapsed(b.json())


def test_float32_session_matches_float32_stateless(attnd):
    rng = random.Random(2)
    sid = _create(attnd, {"d_k": 2, "d_v": 2, "dtype": "float32", "rope": True})
    K, V = [], []
    for _ in range(3):
        k, v, q = _mat(rng, 1, 2), _mat(rng, 1, 2), _mat(rng, 1, 2)
        K += k
        V += v
        a = attnd.post(f"/v1/sessions/{sid}/attention", {"q": q, "k": k, "v": v})
        b = attnd.post("/v1/attention", {"q": q, "k": K, "v": V, "dtype": "float32",
                                         "rope": True})
        assert a.status == 200 and b.status == 200
        assert _without_elapsed(a.json()) == _without_elapsed(b.json())


def test_truncate_and_fork_are_isolated(attnd):
    sid = _create(attnd, {"d_k": 1, "d_v": 1})
    assert attnd.post(f"/v1/sessions/{sid}/kv",
                      {"k": [[1], [2], [3]], "v": [[4], [5], [6]]}).status == 200
    f = attnd.post(f"/v1/sessions/{sid}/fork", {})
    assert f.status == 201, f
    fid = f.json()["id"]
    assert f.headers["location"] == f"/v1/sessions/{fid}" and fid != sid
    r = attnd.post(f"/v1/sessions/{sid}/truncate", {"length": 1})
    assert r.status == 200 and r.json()["length"] == 1
    assert attnd.post(f"/v1/sessions/{fid}/kv", {"k": [[7]], "v": [[8]]}).status == 200
    assert attnd.post(f"/v1/sessions/{sid}/kv", {"k": [[9]], "v": [[9]],
                                                 "expected_length": 1}).status == 200
    assert attnd.get(f"/v1/sessions/{sid}/kv").json()["k"] == [[1], [9]]
    assert attnd.get(f"/v1/sessions/{fid}/kv").json()["k"] == [[1], [2], [3], [7]]
    assert attnd.request("DELETE", f"/v1/sessions/{sid}").status == 204
    r = attnd.get(f"/v1/sessions/{sid}")
    assert r.status == 404 and r.json()["error"]["code"] == "session_not_found"
    assert attnd.get(f"/v1/sessions/{fid}").json()["length"] == 4


def test_conflicts_and_full(attnd):
    sid = _create(attnd, {"d_k": 1, "d_v": 1, "max_tokens": 2})
    r = attnd.post(f"/v1/sessions/{sid}/kv", {"k": [[1]], "v": [[1]], "expected_length": 3})
    assert r.status == 409 and r.json()["error"]["code"] == "length_conflict"
    assert r.json()["error"]["path"] == "/expected_length"
    r = attnd.post(f"/v1/sessions/{sid}/kv", {"k": [[1], [2], [3]], "v": [[1], [2], [3]]})
    assert r.status == 409 and r.json()["error"]["code"] == "session_full"
    assert attnd.get(f"/v1/sessions/{sid}").json()["length"] == 0


def test_capacity_reject_policy():
    # float64, d_k = d_v = 1: 16 bytes a row; 320 bytes = 20 rows
    with Attnd("--max-sessions", "2", "--max-cache-bytes", "320") as d:
        a = _create(d, {"d_k": 1, "d_v": 1})
        b = _create(d, {"d_k": 1, "d_v": 1})
        r = d.post("/v1/sessions", {"d_k": 1, "d_v": 1})
        assert r.status == 503 and r.json()["error"]["code"] == "capacity_exhausted"
        assert r.headers.get("retry-after") == "1"
        assert d.post(f"/v1/sessions/{a}/kv", {"k": [[1]] * 15, "v": [[1]] * 15}).status == 200
        r = d.post(f"/v1/sessions/{b}/kv", {"k": [[1]] * 10, "v": [[1]] * 10})
        assert r.status == 503 and r.headers.get("retry-after") == "1", r
        assert d.get(f"/v1/sessions/{b}").json()["length"] == 0       # all or nothing
        # reads keep working
        assert d.post(f"/v1/sessions/{a}/attention", {"q": [[1]]}).status == 200
        assert d.get(f"/v1/sessions/{a}/kv").status == 200
        assert d.request("DELETE", f"/v1/sessions/{a}").status == 204
        assert d.post(f"/v1/sessions/{b}/kv", {"k": [[1]] * 10, "v": [[1]] * 10}).status == 200


def test_capacity_lru_policy():
    with Attnd("--max-sessions", "2", "--cache-policy", "lru") as d:
        a = _create(d, {"d_k": 1, "d_v": 1})
        b = _create(d, {"d_k": 1, "d_v": 1})
        assert d.post(f"/v1/sessions/{a}/kv", {"k": [[1]], "v": [[1]]}).status == 200
        c = _create(d, {"d_k": 1, "d_v": 1})                # b is least recently used
        assert d.get(f"/v1/sessions/{b}").status == 404
        assert d.get(f"/v1/sessions/{a}").status == 200
        assert d.get(f"/v1/sessions/{c}").status == 200
        m = d.get("/metrics").body.decode()
        assert any(line.startswith("attnd_session_evictions_total") and
                   float(line.split()[-1]) >= 1 for line in m.splitlines()), m


def test_ttl_expiry(attnd):
    # The TTL leaves 1.3 s of room past the 0.2 s between uses (0.4 s left
    # 0.2 s, which one request over TLS on a busy CPU can take); the uses
    # go on past the TTL, so only they keep busy alive.
    ttl = 1.5
    idle = _create(attnd, {"d_k": 1, "d_v": 1, "ttl_s": ttl})
    busy = _create(attnd, {"d_k": 1, "d_v": 1, "ttl_s": ttl})
    info = attnd.get(f"/v1/sessions/{idle}").json()
    assert 0 < info["expires_in_s"] <= ttl
    for _ in range(9):                      # used every 0.2 s: stays alive
        time.sleep(0.2)
        assert attnd.get(f"/v1/sessions/{busy}").status == 200
    r = attnd.get(f"/v1/sessions/{idle}")
    assert r.status == 404 and r.json()["error"]["code"] == "session_not_found"
    assert attnd.post(f"/v1/sessions/{idle}/kv", {"k": [[1]], "v": [[1]]}).status == 404


def _b64(vals):
    return base64.b64encode(struct.pack("<%dd" % len(vals), *vals)).decode()


def test_restart_with_state_dir_gives_same_bytes():
    sd = tempfile.mkdtemp(prefix="attnd-sess-state-")
    rng = random.Random(3)
    try:
        specs = [{"d_k": 4, "d_v": 2, "heads": 2, "kv_heads": 1, **{k: v for k, v in OPTS.items()
                                                                     if k != "bias"}},
                 {"d_k": 2, "d_v": 2, "dtype": "float32", "softmax": "softmax1",
                  "bias": {"k": [3, -2]}}]
        ids = []
        with Attnd("--state-dir", sd) as d:
            for spec in specs:
                sid = _create(d, spec)
                h_kv = spec.get("kv_heads", 1)
                k = {"shape": [h_kv, 3, spec["d_k"]], "dtype": "float64",
                     "data": _b64([rng.uniform(-1, 1) for _ in range(h_kv * 3 * spec["d_k"])])}
                v = [_mat(rng, 3, spec["d_v"]) for _ in range(h_kv)]
                assert d.post(f"/v1/sessions/{sid}/kv", {"k": k, "v": v}).status == 200
                ids.append((sid, spec))
            queries = {sid: [_mat(rng, 2, spec["d_k"]) for _ in range(spec.get("heads", 1))]
                       for sid, spec in ids}

            def snap(dd):
                out = {}
                for sid, _ in ids:
                    kv = dd.get(f"/v1/sessions/{sid}/kv")
                    att = dd.post(f"/v1/sessions/{sid}/attention",
                                  {"q": queries[sid], "causal": True, "encoding": "base64"})
                    assert kv.status == 200 and att.status == 200, (kv, att)
                    out[sid] = (kv.body, _without_elapsed(att.json()))
                return out
            before = snap(d)
            d.signal(signal.SIGTERM)
            assert d.wait(timeout=20) == 0
        names = sorted(n for n in os.listdir(sd) if n != "LOCK")
        assert len(names) == 2 and names[0].startswith("journal.") and \
            names[1] == "snapshot." + names[0].split(".")[1], names
        with Attnd("--state-dir", sd) as d:
            assert snap(d) == before
            # decoding continues where it stopped
            sid, spec = ids[0]
            r = d.post(f"/v1/sessions/{sid}/kv", {"k": [_mat(rng, 1, 4)], "v": [_mat(rng, 1, 2)],
                                                  "expected_length": 3})
            assert r.status == 200 and r.json()["length"] == 4
            # a corrupt snapshot keeps the records before the damage, says
            # so in the log, and never crashes
            d.signal(signal.SIGTERM)
            assert d.wait(timeout=20) == 0
        snap_name = [n for n in os.listdir(sd) if n.startswith("snapshot.")][0]
        path = os.path.join(sd, snap_name)
        size = os.path.getsize(path)
        last = size - (16 + 20)               # the last session's record ends here,
        with open(path, "r+b") as f:          # before the end record: inside it
            f.seek(last - 40)
            b = f.read(1)
            f.seek(last - 40)
            f.write(bytes([b[0] ^ 0xFF]))
        with open(os.path.join(sd, "junk.sess"), "wb") as f:
            f.write(b"ATTNDSES\x01")
        with Attnd("--state-dir", sd) as d:
            found = [d.get(f"/v1/sessions/{sid}").status for sid, _ in ids]
            assert sorted(found) == [200] * (len(ids) - 1) + [404], found
            logs = d.logs()
            assert f"{len(ids) - 1} records kept, 1 dropped" in logs, logs[-2000:]
            assert "skipping" in logs and "junk.sess" in logs, logs[-2000:]
    finally:
        shutil.rmtree(sd, ignore_errors=True)


def _metric(d, name):
    for line in d.get("/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} missing from /metrics")


def test_ttl_sweep_timer_expires_without_a_lookup():
    with Attnd() as d:
        keep = _create(d, {"d_k": 1, "d_v": 1})
        # ttl 1 s: the append must come within it of the create, and the two
        # scrapes before the first sweep after it (0.2 s was about one
        # request's time over TLS on a busy CPU)
        gone = _create(d, {"d_k": 1, "d_v": 1, "ttl_s": 1})
        assert d.post(f"/v1/sessions/{gone}/kv", {"k": [[1]] * 4, "v": [[1]] * 4}).status == 200
        assert _metric(d, "attnd_sessions") == 2
        assert _metric(d, "attnd_kv_cache_bytes") > 0
        deadline = time.time() + 5
        while time.time() < deadline and _metric(d, "attnd_session_expirations_total") < 1:
            time.sleep(0.1)
        assert _metric(d, "attnd_session_expirations_total") == 1
        assert _metric(d, "attnd_sessions") == 1
        assert _metric(d, "attnd_kv_cache_bytes") == 0
        assert d.get(f"/v1/sessions/{keep}").status == 200
        assert d.get(f"/v1/sessions/{gone}").status == 404


def test_forks_share_pages_and_survive_their_parent():
    # float64, d_k = d_v = 8: 128 bytes a row; 200 rows = 3 full pages + 8 rows
    with Attnd("--cache-policy", "lru") as d:
        rng = random.Random(7)
        sid = _create(d, {"d_k": 8, "d_v": 8})
        k, v = _mat(rng, 200, 8), _mat(rng, 200, 8)
        assert d.post(f"/v1/sessions/{sid}/kv", {"k": k, "v": v}).status == 200
        one = _metric(d, "attnd_kv_cache_bytes")
        assert one >= 200 * 128
        q = {"q": _mat(rng, 1, 8)}
        want = d.post(f"/v1/sessions/{sid}/attention", q).json()["output"]
        forks = [d.post(f"/v1/sessions/{sid}/fork", {}).json()["id"] for _ in range(3)]
        forks.append(d.post(f"/v1/sessions/{forks[0]}/fork", {}).json()["id"])  # fork of a fork
        assert _metric(d, "attnd_kv_cache_bytes") == one          # no row copied
        g = d.get(f"/v1/sessions/{forks[3]}").json()
        assert g["bytes"] == 0 and g["shared_bytes"] == one
        # one fork writes: it copies only its shared last page
        assert d.post(f"/v1/sessions/{forks[1]}/kv", {"k": _mat(rng, 1, 8),
                                                       "v": _mat(rng, 1, 8)}).status == 200
        g = d.get(f"/v1/sessions/{forks[1]}").json()
        assert 0 < g["bytes"] <= 64 * 128 and g["shared_bytes"] == 192 * 128
        assert _metric(d, "attnd_kv_cache_bytes") == one + g["bytes"]
        # the parent deleted first: the forks answer as it did
        assert d.request("DELETE", f"/v1/sessions/{sid}").status == 204
        for f in (forks[0], forks[2], forks[3]):
            assert d.post(f"/v1/sessions/{f}/attention", q).json()["output"] == want
        assert _metric(d, "attnd_kv_cache_bytes") == one + g["bytes"]
        for f in forks:
            assert d.request("DELETE", f"/v1/sessions/{f}").status == 204
        assert _metric(d, "attnd_kv_cache_bytes") == 0


def test_forks_and_lowered_limits_lose_nothing_across_restarts(tmp_path):
    """A parent and three forks fit --max-cache-bytes 1m because forks
    share the parent's pages. After kill -9 the journal brings them back as
    forks; the start then writes a snapshot, which holds each session
    whole, and the next starts read that: the forks share their pages
    again (before, two of the four were dropped without a word, and the
    next snapshot made it final). A restart with --max-sessions lowered
    keeps every session too, and says so."""
    rng = random.Random(5)
    sd = str(tmp_path / "state")
    flags = ("--state-dir", sd, "--max-cache-bytes", "1m", "--fsync", "always")
    rows = _mat(rng, 512, 64)                   # 512 rows x 128 float64: 512 KiB
    with Attnd(*flags) as d:
        sid = _create(d, {"d_k": 64, "d_v": 64})
        assert d.post(f"/v1/sessions/{sid}/kv", {"k": rows, "v": rows}).status == 200
        ids = [sid] + [d.post(f"/v1/sessions/{sid}/fork", {}).json()["id"] for _ in range(3)]
        assert d.metric("attnd_kv_cache_bytes") == 524288
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    for restart in range(3):
        extra = ("--max-sessions", "2") if restart == 2 else ()
        with Attnd(*flags, *extra) as d:
            for i in ids:
                r = d.get(f"/v1/sessions/{i}")
                assert r.status == 200 and r.json()["length"] == 512, (restart, i, r)
            assert d.metric("attnd_kv_cache_bytes") == 524288, restart
            assert ("every one is kept" in d.logs()) == (restart == 2), restart
            d.signal(signal.SIGTERM)
            assert d.wait(timeout=20) == 0


def test_a_lowered_max_tokens_keeps_larger_sessions_and_says_so(tmp_path):
    """A restart with --max-tokens lowered below the max_tokens of restored
    sessions kept them without a word, let them grow to their own
    max_tokens and fork into new sessions over the limit, while the same
    replica refused the import of their exports. Now, as for a lowered
    --max-sessions: a warning names how many and the limit, every session
    is kept (a journal's appends past the limit replayed too) and answers
    as before, takes rows only up to the limit (409 session_full naming
    --max-tokens), is not forked here (422 limit_exceeded, as its import),
    and its export imports on a replica whose limit allows it; a later
    start with the limit raised again lets it grow to its own max_tokens."""
    rng = random.Random(11)
    sd = str(tmp_path / "state")
    flags = ("--state-dir", sd, "--fsync", "always")
    rows = _mat(rng, 50, 2)
    octet = {"Content-Type": "application/octet-stream"}
    with Attnd(*flags, "--max-tokens", "100") as d:
        big = _create(d, {"d_k": 2, "d_v": 2})                    # max_tokens 100
        assert d.post(f"/v1/sessions/{big}/kv", {"k": rows, "v": rows}).status == 200
        mid = _create(d, {"d_k": 2, "d_v": 2, "max_tokens": 60})
        assert d.post(f"/v1/sessions/{mid}/kv", {"k": rows[:10], "v": rows[:10]}).status == 200
        small = _create(d, {"d_k": 2, "d_v": 2, "max_tokens": 30})
        d.proc.send_signal(signal.SIGKILL)      # the appends come back from the journal
        d.proc.wait(10)
    with Attnd(*flags, "--max-tokens", "40") as d:
        warns = [e["msg"] for e in events(d) if e["level"] == "warn" and "token" in e["msg"]]
        assert len(warns) == 1 and "2 with a max_tokens over 40 rows, the largest 100" in \
            warns[0] and "1 of them hold 40 rows already" in warns[0], warns
        q = {"q": rows[:1], "return": ["output"]}
        want = d.post(f"/v1/sessions/{big}/attention", q)
        assert want.status == 200, want
        for sid, length, max_tokens in ((big, 50, 100), (mid, 10, 60), (small, 0, 30)):
            g = d.get(f"/v1/sessions/{sid}").json()
            assert (g["length"], g["max_tokens"]) == (length, max_tokens), g
        # rows: up to the replica's limit, whichever way they come
        for body in ({"k": rows[:1], "v": rows[:1]}, dict(q, k=rows[:1], v=rows[:1])):
            path = "kv" if "q" not in body else "attention"
            r = d.post(f"/v1/sessions/{big}/{path}", body)
            assert r.status == 409 and r.json()["error"]["code"] == "session_full", r
            assert "--max-tokens of 40" in r.json()["error"]["message"], r
        assert d.post(f"/v1/sessions/{mid}/kv", {"k": rows[:30], "v": rows[:30]}).status == 200
        r = d.post(f"/v1/sessions/{mid}/kv", {"k": rows[:1], "v": rows[:1]})
        assert r.status == 409 and "--max-tokens of 40" in r.json()["error"]["message"], r
        assert d.post(f"/v1/sessions/{small}/kv", {"k": rows[:30], "v": rows[:30]}).status == 200
        r = d.post(f"/v1/sessions/{small}/kv", {"k": rows[:1], "v": rows[:1]})
        assert r.status == 409 and "its max_tokens of 30" in r.json()["error"]["message"], r
        # forks: a new session over the limit is refused as an import is
        for sid in (big, mid):
            r = d.post(f"/v1/sessions/{sid}/fork", {})
            assert r.status == 422 and r.json()["error"]["code"] == "limit_exceeded", r
            assert "--max-tokens (40)" in r.json()["error"]["message"], r
        assert d.post(f"/v1/sessions/{small}/fork", {}).status == 201
        exported = d.get(f"/v1/sessions/{big}/export")
        assert exported.status == 200, exported
        r = d.post("/v1/sessions/import", exported.body, headers=octet)
        assert r.status == 422 and r.json()["error"]["code"] == "limit_exceeded", r
        # a truncate gives room back, up to the limit
        assert d.post(f"/v1/sessions/{big}/truncate", {"length": 30}).status == 200
        assert d.post(f"/v1/sessions/{big}/kv", {"k": rows[:10], "v": rows[:10]}).status == 200
        assert d.post(f"/v1/sessions/{big}/kv", {"k": rows[:1], "v": rows[:1]}).status == 409
        d.signal(signal.SIGTERM)
        assert d.wait(timeout=20) == 0
    with Attnd("--max-tokens", "100") as other:
        r = other.post("/v1/sessions/import", exported.body, headers=octet)
        assert r.status == 201 and r.json()["length"] == 50, r
        out = other.post(f"/v1/sessions/{r.json()['id']}/attention", q)
        assert out.json()["output"] == want.json()["output"], out
    with Attnd(*flags, "--max-tokens", "100") as d:
        assert not [e for e in events(d) if e["level"] == "warn" and "token" in e["msg"]]
        r = d.post(f"/v1/sessions/{big}/kv", {"k": rows[:30], "v": rows[:30]})
        assert r.status == 200 and r.json()["length"] == 70, r
        assert d.post(f"/v1/sessions/{big}/fork", {}).status == 201


# README, Quick start: the members of a session object that are not create options
NOT_OPTIONS = ("id", "length", "bytes", "shared_bytes", "expires_in_s", "held")


@pytest.mark.parametrize("spec", [
    {"d_k": 2, "d_v": 2},
    {"d_k": 4, "d_v": 2, "heads": 2, "kv_heads": 1, "dtype": "float16", "softmax": "sink",
     "sink_logit": [0.1, 0.2], "rope": {"base": 10000, "pairs": "half"}, "kv_dtype": "int8",
     "softcap": 30},
    {"d_k": 2, "d_v": 2, "dtype": "float32", "window": {"left": 4, "sinks": 1}, "ttl_s": 60},
    {"d_k": 2, "d_v": 2, "bias": {"q": [0.1, -0.2], "v": [3, 0.7]}, "alibi": True},
    {"d_k": 4, "d_v": 2, "heads": 2, "kv_heads": 1, "dtype": "float32",
     "bias": {"k": [0.1, 0.2, -1e-7, 3], "q": [[0.3, 1, 2, 3], [4, 5, 6, 7.5]]},
     "alibi": {"slopes": [0.5, 0.125]}},
    {"d_k": 2, "d_v": 2, "dtype": "bfloat16", "bias": {"k": [0.1, 3]}},
], ids=["plain", "half_model", "rolling", "bias_alibi", "bias_f32_heads", "bias_bf16"])
def test_a_session_object_without_its_state_creates_the_same_session(attnd, spec):
    sid = _create(attnd, spec)
    rows = [[1, 0]] * 3 if spec["d_k"] == 2 else [[[1, 0, 0, 0]] * 3]
    vals = [[1, 0]] * 3 if spec["d_k"] == 2 else [[[1, 0]] * 3]
    assert attnd.post(f"/v1/sessions/{sid}/kv", {"k": rows, "v": vals}).status == 200
    obj = attnd.get(f"/v1/sessions/{sid}").json()
    assert attnd.post("/v1/sessions", obj).status == 422          # id is no option
    back = {k: v for k, v in obj.items() if k not in NOT_OPTIONS}
    r = attnd.post("/v1/sessions", back)
    assert r.status == 201, r
    again = {k: v for k, v in r.json().items() if k not in NOT_OPTIONS}
    assert again == back
    # the object shows bias and alibi as created (float32 in its shortest digits)
    if spec.get("dtype") in (None, "float64", "float32"):
        assert obj["bias"] == spec.get("bias") and obj["alibi"] == spec.get("alibi", False)
    # and the session sent back computes as the first
    q = {"q": rows[:1] if spec["d_k"] == 2 else [[[1, 0, 0, 0]]] * spec["heads"],
         "return": ["output"]}
    for s in (sid, r.json()["id"]):
        if s != sid:
            assert attnd.post(f"/v1/sessions/{s}/kv", {"k": rows, "v": vals}).status == 200
        out = attnd.post(f"/v1/sessions/{s}/attention", q)
        assert out.status == 200, out
        if s == sid:
            first = out.json()["output"]
    assert out.json()["output"] == first


def test_head_on_session_routes_is_get_without_the_body():
    key = {"Authorization": "Bearer head-test-key"}
    with Attnd("--api-key", "head-test-key") as a:
        r = a.post("/v1/sessions", {"d_k": 4, "d_v": 3, "heads": 2, "kv_heads": 1,
                                    "dtype": "float32", "kv_dtype": "int8",
                                    "bias": {"k": [0.5, 0, -1, 2]}}, headers=key)
        assert r.status == 201, r
        sid = r.json()["id"]
        rng = random.Random(7)
        rows = [_mat(rng, 70, 4)]
        vals = [_mat(rng, 70, 3)]
        assert a.post(f"/v1/sessions/{sid}/kv", {"k": rows, "v": vals}, headers=key).status == 200
        for suffix in ("", "/kv", "/export"):
            path = f"/v1/sessions/{sid}{suffix}"
            g = a.get(path, headers=key)
            h = a.request("HEAD", path, headers=key)
            assert g.status == h.status == 200, (path, h)
            assert h.body == b"", path
            assert h.headers["content-type"] == g.headers["content-type"], (path, h.headers)
            if suffix:                  # the object's expires_in_s moves
                assert int(h.headers["content-length"]) == len(g.body), (path, h.headers)
            else:
                assert abs(int(h.headers["content-length"]) - len(g.body)) <= 4, h.headers
            # without the key: GET's 401, its challenge and no body
            g = a.get(path)
            h = a.request("HEAD", path)
            assert g.status == h.status == 401, (path, h)
            assert h.headers["www-authenticate"] == g.headers["www-authenticate"]
            assert h.body == b"" and int(h.headers["content-length"]) == len(g.body)
            # an unknown session: GET's 404 with its headers, no body
            gone = f"/v1/sessions/AAAAAAAAAAAAAAAAAAAAAA{suffix}"
            g = a.get(gone, headers=key)
            h = a.request("HEAD", gone, headers=key)
            assert g.status == h.status == 404, (gone, h)
            assert g.json()["error"]["code"] == "session_not_found"
            assert h.headers["content-type"] == g.headers["content-type"] == "application/json"
            assert h.body == b"" and int(h.headers["content-length"]) == len(g.body)
        # the export HEAD described is the one GET sends, and imports
        exp = a.get(f"/v1/sessions/{sid}/export", headers=key).body
        assert exp[:8] == b"ATTNDSES"
        r = a.post("/v1/sessions/import", exp,
                   headers={**key, "Content-Type": "application/octet-stream"})
        assert r.status == 201, r
        for suffix, allow in (("", "GET, HEAD, DELETE"), ("/kv", "GET, HEAD, POST"),
                              ("/export", "GET, HEAD")):
            r = a.request("PUT", f"/v1/sessions/{sid}{suffix}", b"{}", headers=key)
            assert r.status == 405 and r.headers["allow"] == allow, (suffix, r)

