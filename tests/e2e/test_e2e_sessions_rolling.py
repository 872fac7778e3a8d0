"""tests/e2e/test_e2e_sessions_rolling.py — rolling sessions on the real daemon.

- A session created with "window": {"left": W, "sinks": S} decodes over
  more than 100x its window: every step's output equals, bit for bit, the
  stateless POST /v1/attention over the rows the session holds (GET .../kv
  and "held") at their absolute positions, and, to rounding (float64:
  1e-12), the stateless request with the same window over every row ever
  appended; its bytes stay bounded while its length grows.
- Journal and crash recovery: after SIGKILL the session and a fork of it
  come back with the same length, window, held rows and answer bits.
- Export -> import on a second daemon gives the same held rows and bits.
- A fork keeps the window; a truncate below the held rows is 409.
- A max_tokens that the rows held between appends would reach is refused.
- expected_length is the length, not the rows held, and its 409 says so.
"""
import base64
import random
import shutil
import signal
import struct
import tempfile

from attnd_proc import Attnd

SPEC = {"d_k": 4, "d_v": 3, "heads": 2, "kv_heads": 1, "dtype": "float64",
        "rope": {"base": 10000}, "alibi": True, "window": {"left": 5, "sinks": 2}}


def _row(rng, d):
    return [rng.uniform(-2, 2) for _ in range(d)]


def _out(r):
    assert r.status == 200, r
    o = r.json()["output"]
    return o, struct.unpack(f"<{len(base64.b64decode(o['data'])) // 8}d",
                            base64.b64decode(o["data"]))


def _step(d, sid, rng, ks, vs, qs):
    """Append one row and attend it; ks, vs, qs collect what was sent."""
    k, v = _row(rng, 4), _row(rng, 3)
    q = [[_row(rng, 4)] for _ in range(2)]
    ks.append(k)
    vs.append(v)
    qs.append(q)
    return _out(d.post(f"/v1/sessions/{sid}/attention",
                       {"q": q, "k": [[k]], "v": [[v]], "encoding": "base64",
                        "return": ["output"]}))


def _stateless(d, q, ks, vs, idx, window):
    """POST /v1/attention over rows idx of ks/vs at those positions."""
    L = len(ks)
    body = {"q": q, "k": [[ks[j] for j in idx]], "v": [[vs[j] for j in idx]],
            "rope": {"base": 10000}, "alibi": True, "dtype": "float64", "causal": True,
            "window": window, "encoding": "base64", "return": ["output"],
            "positions": {"q": [L - 1], "k": list(idx)}}
    return _out(d.post("/v1/attention", body))


def _held(info):
    return [j for a, b in info["held"] for j in range(a, b)]


def test_rolling_decode_over_100_windows(attnd):
    rng = random.Random(18)
    r = attnd.post("/v1/sessions", SPEC)
    assert r.status == 201, r
    sid = r.json()["id"]
    assert r.json()["window"] == {"left": 5, "sinks": 2}
    ks, vs, qs = [], [], []
    max_bytes, worst = 0, 0.0
    steps = 650                                  # > 100 x (left + 1)
    for t in range(steps):
        o, got = _step(attnd, sid, rng, ks, vs, qs)
        if t % 50 != 49 and t != steps - 1:
            continue
        info = attnd.get(f"/v1/sessions/{sid}").json()
        assert info["length"] == t + 1
        max_bytes = max(max_bytes, info["bytes"])
        idx = _held(info)
        assert len(idx) <= 64 + 5 + 63
        held_o, _ = _stateless(attnd, qs[-1], ks, vs, idx, {"left": 5, "sinks": 2})
        assert held_o == o, (t, idx)             # the same bits
        _, full = _stateless(attnd, qs[-1], ks, vs, list(range(t + 1)),
                             {"left": 5, "sinks": 2})
        worst = max(worst, max(abs(a - b) for a, b in zip(got, full)))
    assert worst <= 1e-12, worst
    info = attnd.get(f"/v1/sessions/{sid}").json()
    assert info["held"][0] == [0, 64] and info["held"][1][1] == steps
    assert info["held"][1][0] == (steps - 5) // 64 * 64
    # pages of 64 rows: the sinks' page and at most two of the tail
    assert max_bytes <= 3 * 64 * (4 + 3) * 8, max_bytes
    kv = attnd.get(f"/v1/sessions/{sid}/kv").json()
    assert kv["length"] == steps and kv["held"] == info["held"]
    assert len(kv["k"]) == len(_held(info))
    # a fork keeps the window and rolls on its own
    f = attnd.post(f"/v1/sessions/{sid}/fork", {})
    assert f.status == 201, f
    fid = f.json()["id"]
    assert f.json()["window"] == info["window"] and f.json()["held"] == info["held"]
    for _ in range(70):
        _step(attnd, fid, rng, list(ks), list(vs), [])
    assert attnd.get(f"/v1/sessions/{fid}").json()["held"][1][0] > info["held"][1][0]
    assert attnd.get(f"/v1/sessions/{sid}").json()["held"] == info["held"]
    # truncate: into the dropped rows 409, keeping the window fine
    r = attnd.post(f"/v1/sessions/{sid}/truncate", {"length": 10})
    assert r.status == 409 and r.json()["error"]["path"] == "/length", r
    assert f"{info['held'][1][0]}..{steps - 1}" in r.json()["error"]["message"]
    r = attnd.post(f"/v1/sessions/{sid}/truncate", {"length": steps - 1})
    assert r.status == 200 and r.json()["length"] == steps - 1, r
    # a query that reaches back past the held rows is 409, n <= m never
    r = attnd.post(f"/v1/sessions/{sid}/attention", {"q": [[[0, 0, 0, 1]] * 40] * 2})
    assert r.status == 409 and r.json()["error"]["path"] == "/q", r
    r = attnd.post(f"/v1/sessions/{sid}/attention", {"q": [[[0, 0, 0, 1]] * 3] * 2})
    assert r.status == 200 and r.json()["meta"]["L"] == len(_held(info)) - 1, r


def test_rolling_max_tokens_bounds_rows_held(attnd):
    """max_tokens of a rolling session bounds the rows it holds (with an
    append's), not its length."""
    rng = random.Random(7)
    sid = attnd.post("/v1/sessions", dict(SPEC, max_tokens=200,
                                          window={"left": 50})).json()["id"]
    for i in range(100):
        body = {"k": [[_row(rng, 4) for _ in range(10)]],
                "v": [[_row(rng, 3) for _ in range(10)]]}
        r = attnd.post(f"/v1/sessions/{sid}/kv", body)
        assert r.status == 200, (i, r)
    info = attnd.get(f"/v1/sessions/{sid}").json()
    assert info["length"] == 1000 and sum(b - a for a, b in info["held"]) <= 200
    # no sinks: the message names the tail alone
    r = attnd.post(f"/v1/sessions/{sid}/truncate", {"length": 3})
    assert r.status == 409, r
    held = attnd.get(f"/v1/sessions/{sid}").json()["held"]
    tail = [h for h in held if h[0] > 0][0]
    assert f"rows {tail[0]}..999" in r.json()["error"]["message"], r
    big = {"k": [[_row(rng, 4) for _ in range(150)]], "v": [[_row(rng, 3) for _ in range(150)]]}
    r = attnd.post(f"/v1/sessions/{sid}/kv", big)
    assert r.status == 409 and r.json()["error"]["code"] == "session_full", r


def test_rolling_max_tokens_below_rows_held_is_refused(attnd):
    """A rolling session holds up to ceil(S/64)*64 + W + 63 rows between
    appends: a max_tokens at or below that would stop it for good at
    max_tokens, so creation refuses it; one above takes a row every step
    for far longer than max_tokens."""
    for window, held in (({"left": 10}, 73), ({"left": 100, "sinks": 4}, 227)):
        r = attnd.post("/v1/sessions", dict(SPEC, window=window, max_tokens=held))
        assert r.status == 422, r
        err = r.json()["error"]
        assert err["path"] == "/max_tokens" and f"at least {held + 1}" in err["message"], r
    r = attnd.post("/v1/sessions", dict(SPEC, window={"left": 40000}))
    assert r.status == 422 and "(the default, attnd's --max-tokens)" in r.json()["error"]["message"], r
    rng = random.Random(3)
    sid = attnd.post("/v1/sessions", dict(SPEC, window={"left": 10},
                                          max_tokens=74)).json()["id"]
    for i in range(300):
        r = attnd.post(f"/v1/sessions/{sid}/kv", {"k": [[_row(rng, 4)]], "v": [[_row(rng, 3)]]})
        assert r.status == 200, (i, r)


def test_rolling_expected_length_is_the_length_not_the_rows_held(attnd):
    """expected_length is compared with the session's length (every row
    appended), not with the rows a rolling session holds; the 409 says
    which is which, and names the rows held too."""
    rng = random.Random(11)
    sid = attnd.post("/v1/sessions", dict(SPEC, window={"left": 10})).json()["id"]
    body = {"k": [[_row(rng, 4) for _ in range(200)]], "v": [[_row(rng, 3) for _ in range(200)]]}
    assert attnd.post(f"/v1/sessions/{sid}/kv", body).status == 200
    info = attnd.get(f"/v1/sessions/{sid}").json()
    held = sum(b - a for a, b in info["held"])
    assert info["length"] == 200 and held < 200, info
    row = {"k": [[_row(rng, 4)]], "v": [[_row(rng, 3)]]}
    for route, extra in (("kv", {}), ("attention", {"q": [[[1, 0, 0, 0]], [[0, 1, 0, 0]]]})):
        r = attnd.post(f"/v1/sessions/{sid}/{route}", dict(row, expected_length=held, **extra))
        assert r.status == 409, r
        err = r.json()["error"]
        assert err["path"] == "/expected_length", r
        assert err["message"] == (f"the session's length is 200 rows (every row appended; "
                                  f"it holds {held} of them), expected_length is {held}"), r
    r = attnd.post(f"/v1/sessions/{sid}/kv", dict(row, expected_length=200))
    assert r.status == 200 and r.json()["length"] == 201, r
    r = attnd.post(f"/v1/sessions/{sid}/truncate", {"length": 202})
    assert r.status == 422 and r.json()["error"]["message"] == (
        "length must be 0..201 (the session's length)"), r
    plain = attnd.post("/v1/sessions", {"d_k": 1, "d_v": 1}).json()["id"]
    r = attnd.post(f"/v1/sessions/{plain}/kv", {"k": [[1]], "v": [[1]], "expected_length": 3})
    assert r.status == 409 and r.json()["error"]["message"] == (
        "the session's length is 0 rows, expected_length is 3"), r


def _answer(d, sid):
    r = d.post(f"/v1/sessions/{sid}/attention",
               {"q": [[[1, 0, 0, 0]], [[0, 1, 0, 0]]], "encoding": "base64",
                "return": ["output", "weights"]})
    assert r.status == 200, r
    j = r.json()
    return j["output"], j["weights"]


def test_rolling_journal_export_and_import():
    rng = random.Random(1818)
    sd = tempfile.mkdtemp(prefix="attnd-roll-")
    sd2 = tempfile.mkdtemp(prefix="attnd-roll2-")
    try:
        specs = [SPEC, dict(SPEC, dtype="float32", kv_dtype="int8",
                            window={"left": 70, "sinks": 0}),
                 dict(SPEC, dtype="float32", window={"left": 0, "sinks": 70})]
        want = {}
        with Attnd("--state-dir", sd, "--fsync", "always") as d:
            for spec in specs:
                sid = d.post("/v1/sessions", spec).json()["id"]
                for _ in range(3):
                    m = rng.randint(60, 120)
                    body = {"k": [[_row(rng, 4) for _ in range(m)]],
                            "v": [[_row(rng, 3) for _ in range(m)]]}
                    assert d.post(f"/v1/sessions/{sid}/kv", body).status == 200
                fid = d.post(f"/v1/sessions/{sid}/fork", {}).json()["id"]
                assert d.post(f"/v1/sessions/{fid}/kv",
                              {"k": [[_row(rng, 4)]], "v": [[_row(rng, 3)]]}).status == 200
                for s in (sid, fid):
                    info = d.get(f"/v1/sessions/{s}").json()
                    assert info["held"][-1][0] > 0, info
                    want[s] = (info["length"], info["held"], info["window"], _answer(d, s))
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait(10)
        with Attnd("--state-dir", sd) as d, Attnd("--replica-id", "b2", "--state-dir", sd2) as e:
            for s, (length, held, window, ans) in want.items():
                info = d.get(f"/v1/sessions/{s}").json()
                assert (info["length"], info["held"], info["window"]) == (length, held, window)
                assert _answer(d, s) == ans
                # export -> import: the same rows held, the same bits
                body = d.get(f"/v1/sessions/{s}/export").body
                r = e.request("POST", "/v1/sessions/import", body,
                              headers={"Content-Type": "application/octet-stream"})
                assert r.status == 201, r
                j = r.json()
                assert j["id"].startswith("b2.")
                assert (j["length"], j["held"], j["window"]) == (length, held, window)
                assert _answer(e, j["id"]) == ans
    finally:
        shutil.rmtree(sd, ignore_errors=True)
        shutil.rmtree(sd2, ignore_errors=True)
