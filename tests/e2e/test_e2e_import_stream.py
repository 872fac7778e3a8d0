"""tests/e2e/test_e2e_import_stream.py — POST /v1/sessions/import taken as
the body arrives (api_stream: each piece the transport receives goes
straight into the new session's pages), spoken over a raw socket so that
the body reaches the daemon in separate pieces:

- a body sent in many pieces, with Content-Length or chunked (its size not
  known ahead), imports the same session as the exporter's;
- a corrupt byte in its last piece is 422 checksum mismatch, a chunked body
  cut inside a row 422 truncated, a chunked body past --max-body-bytes 413;
- a client that goes away in the middle of its body creates nothing;
- in every refusal the session count and attnd_kv_cache_bytes come back
  to what they were (the pages claimed and written are given back), and
  the daemon exits cleanly (under `make asan`: no leak at exit);
- imports at once on both transport threads (good, corrupt, gone midway)
  each end as alone (`make tsan` runs it: its name says concurrency).
"""
import json
import random
import threading
import time

from attnd_proc import Attnd, append_random_rows, connect, read_to_close

HEADS, D, ROWS, CHUNK = 2, 64, 4096, 1024      # 4 MiB of rows


def _state(d, headers=None):
    return d.metric("attnd_sessions", headers), d.metric("attnd_kv_cache_bytes", headers)


def _settle(d, want, timeout=10.0, headers=None):
    """Wait until the session count and cache bytes are `want` again (a
    connection closed midway is noticed by the transport a moment later)."""
    end = time.monotonic() + timeout
    while _state(d, headers) != want and time.monotonic() < end:
        time.sleep(0.05)
    assert _state(d, headers) == want


def _exported(d):
    """The export of a new session of ROWS rows, the session deleted and
    its pages let go again (the export's snapshot holds them until MHD has
    let go of the answer, which can be just after the client has read it),
    so that a caller's _state() after it is steady."""
    rng = random.Random(18)
    start = _state(d)
    r = d.post("/v1/sessions", {"d_k": D, "d_v": D, "heads": HEADS, "dtype": "float32"})
    assert r.status == 201, r
    sid = r.json()["id"]
    append_random_rows(d, sid, HEADS, D, ROWS, rng, CHUNK)
    r = d.get(f"/v1/sessions/{sid}/export")
    assert r.status == 200
    assert d.request("DELETE", f"/v1/sessions/{sid}").status in (200, 204)
    _settle(d, start)
    return r.body


def _pieces(body, size=65536 + 3):
    return [body[i:i + size] for i in range(0, len(body), size)]


def _send(d, pieces, chunked=False, length=None, hang_up=False, key=None, heads=None):
    """POST the pieces to /v1/sessions/import, one send each with a pause
    between, with Idempotency-Key: key when given; (status, body) of the
    answer, or None after hanging up. heads, a dict, gets the answer's
    headers (names in lower case)."""
    s = connect(d.port, timeout=60)
    frame = "Transfer-Encoding: chunked" if chunked else \
        f"Content-Length: {length if length is not None else sum(map(len, pieces))}"
    idem = b"" if key is None else b"Idempotency-Key: " + key + b"\r\n"
    s.sendall(("POST /v1/sessions/import HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               f"Content-Type: application/octet-stream\r\n{frame}\r\n").encode() +
              idem + b"Connection: close\r\n\r\n")
    for p in pieces:
        s.sendall(b"%x\r\n%s\r\n" % (len(p), p) if chunked else p)
        time.sleep(0.001)
    if hang_up:
        s.close()
        return None
    if chunked:
        s.sendall(b"0\r\n\r\n")
    data = read_to_close(s)
    s.close()
    head, _, answer = data.partition(b"\r\n\r\n")
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if heads is not None:
            heads[name.strip().lower()] = value.strip()
    return int(head.split()[1]), answer


def test_pieces_import_the_same_session():
    with Attnd("--max-body-bytes", "64m") as d:
        body = _exported(d)
        before = _state(d)
        for chunked in (False, True):
            status, answer = _send(d, _pieces(body), chunked=chunked)
            assert status == 201, answer
            nid = json.loads(answer)["id"]
            again = d.get(f"/v1/sessions/{nid}/export").body
            rows = HEADS * ROWS * 2 * D * 4         # the rows, last before the CRC
            assert len(again) == len(body) and again[-4 - rows:-4] == body[-4 - rows:-4]
            assert d.request("DELETE", f"/v1/sessions/{nid}").status in (200, 204)
        _settle(d, before)
        assert d.stop() == 0


def test_refusals_at_piece_edges_create_nothing():
    with Attnd("--max-body-bytes", "64m") as d:
        body = _exported(d)
        before = _state(d)
        bad = bytearray(body)
        bad[-40] ^= 0x01                            # a row's low bit, last piece
        for chunked in (False, True):
            status, answer = _send(d, _pieces(bytes(bad)), chunked=chunked)
            assert status == 422 and b"checksum mismatch" in answer, answer
            _settle(d, before)
        cut = len(body) // 2 + 3                    # inside a row
        status, answer = _send(d, _pieces(body[:cut]), chunked=True)
        assert status == 422 and b"truncated" in answer, answer
        _settle(d, before)
        # gone in the middle of the body: announced whole, half sent
        assert _send(d, _pieces(body[:len(body) // 2]), length=len(body), hang_up=True) is None
        _settle(d, before)
        assert d.get("/healthz").status == 200
        assert d.stop() == 0


def test_idempotency_key_on_pieces():
    """A streamed import reads its Idempotency-Key as a whole body's: a
    malformed key is 400 once the body is in and makes nothing; a good one
    makes one session, which a repeat of the same pieces is answered with
    (201, Idempotent-Replayed); other bytes under that key are 422."""
    with Attnd("--max-body-bytes", "64m") as d:
        body = _exported(d)
        before = _state(d)
        for key in (b"has space", b"k" * 256, b"tab\there", b"\x7f"):
            for chunked in (False, True):
                status, answer = _send(d, _pieces(body), chunked=chunked, key=key)
                assert status == 400 and b"Idempotency-Key" in answer, (key, answer)
                _settle(d, before)
        heads = {}
        status, answer = _send(d, _pieces(body), key=b"import-1", heads=heads)
        assert status == 201 and "idempotent-replayed" not in heads, answer
        nid = json.loads(answer)["id"]
        made = _state(d)
        for chunked in (False, True):
            heads = {}
            status, answer = _send(d, _pieces(body), chunked=chunked, key=b"import-1",
                                   heads=heads)
            assert status == 201 and json.loads(answer)["id"] == nid, answer
            assert heads.get("idempotent-replayed") == "true"
            assert heads.get("location") == f"/v1/sessions/{nid}"
        other = bytearray(body)
        other[-40] ^= 0x01
        status, answer = _send(d, _pieces(bytes(other)), key=b"import-1")
        assert status == 422 and b"idempotency_key_reused" in answer, answer
        assert _state(d) == made
        assert d.request("DELETE", f"/v1/sessions/{nid}").status in (200, 204)
        _settle(d, before)
        assert d.stop() == 0


def test_chunked_body_past_the_cap_is_413():
    with Attnd("--max-body-bytes", "64m") as a:
        body = _exported(a)
    with Attnd("--max-body-bytes", str(len(body) - 100)) as d:
        before = _state(d)
        status, answer = _send(d, _pieces(body), chunked=True)
        assert status == 413 and b"body_too_large" in answer, answer
        _settle(d, before)
        status, _ = _send(d, _pieces(body[:len(body) - 200]), chunked=True)
        assert status == 422                        # under the cap: read, truncated
        _settle(d, before)
        assert d.stop() == 0


def test_imports_at_once_concurrency():
    with Attnd("--max-body-bytes", "64m", "--http-threads", "2") as d:
        body = _exported(d)
        before = _state(d)
        bad = bytearray(body)
        bad[len(body) // 2] ^= 0x01
        out = {}

        def run(name, pieces, **kw):
            out[name] = _send(d, pieces, **kw)

        jobs = [threading.Thread(target=run, args=(name, pieces), kwargs=kw) for name, pieces, kw in (
            ("good1", _pieces(body), {}), ("good2", _pieces(body, 4099), {"chunked": True}),
            ("bad", _pieces(bytes(bad)), {}),
            ("gone", _pieces(body[:len(body) // 3]), {"length": len(body), "hang_up": True}))]
        for j in jobs:
            j.start()
        for j in jobs:
            j.join()
        assert out["good1"][0] == 201 and out["good2"][0] == 201, out
        assert out["bad"][0] == 422 and out["gone"] is None
        ids = [json.loads(out[k][1])["id"] for k in ("good1", "good2")]
        _settle(d, (before[0] + 2, d.metric("attnd_kv_cache_bytes")))
        for nid in ids:
            assert d.request("DELETE", f"/v1/sessions/{nid}").status in (200, 204)
        _settle(d, before)
        assert d.stop() == 0
