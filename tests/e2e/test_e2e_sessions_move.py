"""tests/e2e/test_e2e_sessions_move.py — moving a session between daemons.

- A session exported by one daemon (--replica-id a1) and imported by a
  second (--replica-id b2, --state-dir) answers the same query with the
  same bits (base64 output), for float64, float32, float16/bfloat16/int8
  caches, GQA, biases, RoPE with scaling (yarn also with truncate false),
  ALiBi, softcap and sinks; the new id carries the second replica's prefix,
  and the import survives a restart of the second daemon (it is journaled).
- A truncated, corrupt or foreign body, another version, or the wrong media
  type is refused (422 invalid_export, 415) and creates nothing; a session
  over the importer's --max-tokens or whole --max-cache-bytes is 422
  limit_exceeded, a full --max-sessions 503, a body over --max-body-bytes 413.
- A session of several MiB (its body in api/spare.c's huge-page blocks)
  goes out and back in whole (the same export bytes, rows and attention),
  and its truncated or corrupt body is still 422 and creates nothing.
- The routes need the API key like every other route, and are counted
  under their templates in /metrics.
"""
import random
import shutil
import signal
import struct
import tempfile

from attnd_proc import Attnd, append_random_rows

OCTET = {"Content-Type": "application/octet-stream"}

SPECS = [
    {"d_k": 4, "d_v": 3, "heads": 4, "kv_heads": 2, "alibi": True,
     "bias": {"q": [0.25, -0.5, 1.0, 0.0], "k": [[3, -2, 0.5, 1], [0, 1, -1, 2]],
              "v": [1, -1, 0.5]}, "rope": {"base": 10000, "pairs": "interleaved"}},
    {"d_k": 8, "d_v": 4, "heads": 2, "dtype": "float32", "softcap": 4.0,
     "rope": {"dims": 4, "scaling": {"type": "yarn", "factor": 4,
                                     "original_max_position": 64, "beta_fast": 16}}},
    {"d_k": 4, "d_v": 4, "dtype": "float32", "kv_dtype": "float16", "softmax": "sink",
     "sink_logit": 0.5},
    {"d_k": 4, "d_v": 2, "heads": 2, "kv_heads": 1, "dtype": "float32", "kv_dtype": "int8",
     "rope": {"scaling": {"type": "llama3", "factor": 8, "low_freq_factor": 1,
                          "high_freq_factor": 4, "original_max_position": 16}}},
    {"d_k": 4, "d_v": 4, "dtype": "bfloat16", "softmax": "softmax1"},
    {"d_k": 2, "d_v": 2, "dtype": "float32", "kv_dtype": "bfloat16", "max_tokens": 64,
     "ttl_s": 300},
    # gpt-oss: yarn with truncate false, per-head sinks
    {"d_k": 16, "d_v": 4, "heads": 2, "kv_heads": 1, "softmax": "sink", "sink_logit": [0.3, -1],
     "rope": {"base": 150000, "pairs": "half", "scaling": {
         "type": "yarn", "factor": 32, "original_max_position": 4096, "beta_fast": 32,
         "beta_slow": 1, "truncate": False}}},
]


def _mat(rng, rows, cols):
    return [[rng.uniform(-2, 2) for _ in range(cols)] for _ in range(rows)]


def _session(d, spec, rng, rows=9):
    r = d.post("/v1/sessions", spec)
    assert r.status == 201, r
    sid = r.json()["id"]
    h_kv = spec.get("kv_heads", spec.get("heads", 1))
    kv = {"k": [_mat(rng, rows, spec["d_k"]) for _ in range(h_kv)],
          "v": [_mat(rng, rows, spec["d_v"]) for _ in range(h_kv)]}
    assert d.post(f"/v1/sessions/{sid}/kv", kv).status == 200
    return sid


def _export(d, sid):
    r = d.get(f"/v1/sessions/{sid}/export")
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/octet-stream"
    return r.body


def _import(d, body, headers=OCTET):
    return d.request("POST", "/v1/sessions/import", body, headers=headers)


def _attend(d, sid, q):
    r = d.post(f"/v1/sessions/{sid}/attention",
               {"q": q, "encoding": "base64", "return": ["output", "weights"]})
    assert r.status == 200, r
    j = r.json()
    return j["output"], j["weights"]


def test_export_import_on_a_second_daemon_same_bits():
    sd = tempfile.mkdtemp(prefix="attnd-move-state-")
    rng = random.Random(18)
    try:
        with Attnd("--replica-id", "a1") as a, Attnd("--replica-id", "b2", "--state-dir", sd) as b:
            moved = []
            for spec in SPECS:
                sid = _session(a, spec, rng)
                body = _export(a, sid)
                r = _import(b, body)
                assert r.status == 201, (spec, r)
                nid = r.json()["id"]
                assert nid.startswith("b2.") and sid.startswith("a1.")
                assert r.headers["location"] == f"/v1/sessions/{nid}"
                ja, jb = a.get(f"/v1/sessions/{sid}").json(), r.json()
                for key in ("length", "heads", "kv_heads", "d_k", "d_v", "dtype", "kv_dtype",
                            "softmax", "max_tokens", "ttl_s", "scale", "sink_logit",
                            "softcap", "rope", "bytes"):
                    assert ja[key] == jb[key], (key, ja[key], jb[key])
                q = _mat(rng, 2, spec["d_k"]) if spec.get("heads", 1) == 1 else \
                    [_mat(rng, 2, spec["d_k"]) for _ in range(spec["heads"])]
                assert _attend(a, sid, q) == _attend(b, nid, q), spec
                assert b.get(f"/v1/sessions/{nid}/kv").body == a.get(f"/v1/sessions/{sid}/kv").body
                moved.append((nid, q, _attend(b, nid, q)))
            b.signal(signal.SIGTERM)
            assert b.wait(timeout=20) == 0
        with Attnd("--replica-id", "b2", "--state-dir", sd) as b:
            for nid, q, want in moved:
                assert _attend(b, nid, q) == want
    finally:
        shutil.rmtree(sd, ignore_errors=True)


def test_bad_bodies_create_nothing(attnd):
    rng = random.Random(5)
    sid = _session(attnd, SPECS[3], rng)
    body = _export(attnd, sid)
    before = attnd.metric("attnd_sessions")
    flipped = bytearray(body)
    flipped[len(body) // 2] ^= 0x10
    later = bytearray(body)
    later[8:12] = struct.pack("<I", 99)
    cases = [(body[:-1], "truncated"), (body[: len(body) // 3], "truncated"), (b"", "truncated"),
             (bytes(flipped), "checksum mismatch"), (b"PK\x03\x04" + body[4:], "wrong magic"),
             (bytes(later), "unknown version"), (body + b"\0\0\0\0", "trailing bytes")]
    for bad, why in cases:
        r = _import(attnd, bad)
        assert r.status == 422, (why, r)
        err = r.json()["error"]
        assert err["code"] == "invalid_export" and why in err["message"], err
        assert err["path"] == ""
    r = _import(attnd, body, headers={"Content-Type": "application/json"})
    assert r.status == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    assert attnd.metric("attnd_sessions") == before
    assert attnd.get("/v1/sessions/import").status == 405
    assert attnd.get("/v1/sessions/a1.nosuch/export").status == 404
    r = attnd.post(f"/v1/sessions/{sid}/export", {})
    assert r.status == 405 and r.headers["allow"] == "GET, HEAD"


def test_large_session_round_trip_and_bad_bodies(attnd):
    rng = random.Random(21)
    heads, d, rows, chunk = 2, 128, 2304, 768
    r = attnd.post("/v1/sessions", {"d_k": d, "d_v": d, "heads": heads, "dtype": "float32"})
    assert r.status == 201, r
    sid = r.json()["id"]
    append_random_rows(attnd, sid, heads, d, rows, rng, chunk)
    body = _export(attnd, sid)
    assert len(body) > heads * rows * 2 * d * 4 > (4 << 20)   # past 2 MiB pages
    before = attnd.metric("attnd_sessions")
    flipped = bytearray(body)
    flipped[len(body) // 2 + 12345] ^= 0x01
    for bad, why in ((body[:-1], "truncated"), (body[: len(body) // 2], "truncated"),
                     (bytes(flipped), "checksum mismatch")):
        r = _import(attnd, bad)
        assert r.status == 422, (why, r)
        err = r.json()["error"]
        assert err["code"] == "invalid_export" and why in err["message"], err
        assert attnd.metric("attnd_sessions") == before
    r = _import(attnd, body)
    assert r.status == 201, r
    nid = r.json()["id"]
    assert attnd.metric("attnd_sessions") == before + 1
    rows_bytes = heads * rows * 2 * d * 4       # the rows, last before the CRC
    again = _export(attnd, nid)
    assert len(again) == len(body) and again[-4 - rows_bytes:-4] == body[-4 - rows_bytes:-4]
    assert attnd.get(f"/v1/sessions/{nid}/kv").body == attnd.get(f"/v1/sessions/{sid}/kv").body
    q = [_mat(rng, 2, d) for _ in range(heads)]
    assert _attend(attnd, nid, q) == _attend(attnd, sid, q)
    for i in (sid, nid):
        assert attnd.request("DELETE", f"/v1/sessions/{i}").status in (200, 204)


def test_limits_of_the_importer():
    rng = random.Random(7)
    with Attnd() as a:
        sid = _session(a, {"d_k": 16, "d_v": 16, "heads": 2}, rng, rows=64)
        body = _export(a, sid)
        small = _export(a, _session(a, {"d_k": 2, "d_v": 2, "max_tokens": 50}, rng, rows=3))
    with Attnd("--max-tokens", "1000", "--max-body-bytes", str(len(body) - 1),
               "--max-cache-bytes", "8192", "--max-sessions", "2") as b:
        r = _import(b, body)
        assert r.status == 413 and r.json()["error"]["code"] == "body_too_large", r
        r = _import(b, small[:-4] + b"\0\0\0\0")
        assert r.status == 422 and r.json()["error"]["code"] == "invalid_export"
        assert _import(b, small).status == 201
        assert _import(b, small).status == 201
        r = _import(b, small)
        assert r.status == 503 and r.json()["error"]["code"] == "capacity_exhausted", r
        assert b.metric("attnd_sessions") == 2
    with Attnd("--max-tokens", "1000") as b:
        r = _import(b, body)            # max_tokens 32768 from the exporter
        assert r.status == 422, r
        err = r.json()["error"]
        assert err["code"] == "limit_exceeded" and "max_tokens" in err["message"]
        assert b.metric("attnd_sessions") == 0
    with Attnd("--max-cache-bytes", "8192") as b:
        r = _import(b, body)            # 2 x 64 rows x 32 x 8 bytes and more
        assert r.status == 422 and r.json()["error"]["code"] == "limit_exceeded", r
        assert "whole cache" in r.json()["error"]["message"]
        assert b.metric("attnd_sessions") == 0


def test_api_key_and_metrics_labels():
    with Attnd("--api-key", "k3y") as d:
        auth = {"Authorization": "Bearer k3y"}
        r = d.post("/v1/sessions", {"d_k": 2, "d_v": 2}, headers=auth)
        sid = r.json()["id"]
        assert d.get(f"/v1/sessions/{sid}/export").status == 401
        r = d.get(f"/v1/sessions/{sid}/export", headers=auth)
        assert r.status == 200
        assert _import(d, r.body).status == 401
        assert _import(d, r.body, headers={**OCTET, **auth}).status == 201
        metrics = d.get("/metrics", headers=auth).body.decode()
        assert 'route="/v1/sessions/{id}/export"' in metrics
        assert 'route="/v1/sessions/import"' in metrics
