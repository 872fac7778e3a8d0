"""tests/e2e/test_e2e_import_edges.py — the streamed session import
(POST /v1/sessions/import, api_stream) against a hostile transport, over
raw sockets so that the pieces reach the daemon as sent:

- small sessions (float32; rolling int8 with its scales and a gap of rows)
  sent one byte per send, and in two pieces cut at every awkward place:
  inside the magic and the header's fields, at the header's end, inside a
  row's element, inside the CRC trailer: each imports the same rows;
- a corrupt byte in the first piece (magic) or the last (CRC), a body cut
  short with Content-Length announcing more (the client then closes its
  side), a Content-Length shorter than the export (the rest is not read as
  its body), an empty body, a Content-Length over --max-body-bytes (413),
  a session over --max-cache-bytes (422 limit_exceeded): each refused or
  dropped, the session count and attnd_kv_cache_bytes back where they were;
- while an import's body is half sent, sessions created and deleted around
  it (lru eviction with a claim outstanding) never take the cache over its
  limit; a drain (SIGTERM) with an import half sent cuts it at the drain
  timeout and exits 0 (under `make asan`: nothing leaked);
- imports one after another on one kept-alive connection (good, corrupt,
  a wrong API key: 401, short, chunked) each answer as alone;
- half-sent imports count in the body budget (503 past it); a chunked
  header announcing rows past --max-body-bytes is refused at once and
  neither claims cache nor evicts idle sessions.
"""
import base64
import json
import random
import signal
import socket
import struct
import time

from attnd_proc import E2E_TLS, Attnd, connect
from test_e2e_import_stream import _settle, _state

def _mat(rng, rows, cols):
    return [[rng.uniform(-2, 2) for _ in range(cols)] for _ in range(rows)]


def _export(d, spec, rows, rng):
    """(export, attention output) of a new session of rows rows, deleted
    and its pages let go again, as test_e2e_import_stream's _exported."""
    start = _state(d)
    r = d.post("/v1/sessions", spec)
    assert r.status == 201, r
    sid = r.json()["id"]
    h_kv = spec.get("kv_heads", spec.get("heads", 1))
    for done in range(0, rows, 50):
        m = min(50, rows - done)
        kv = {"k": [_mat(rng, m, spec["d_k"]) for _ in range(h_kv)],
              "v": [_mat(rng, m, spec["d_v"]) for _ in range(h_kv)]}
        assert d.post(f"/v1/sessions/{sid}/kv", kv).status == 200
    body = d.get(f"/v1/sessions/{sid}/export").body
    attn = _attend(d, sid, spec)
    assert d.request("DELETE", f"/v1/sessions/{sid}").status in (200, 204)
    _settle(d, start)
    return body, attn


def _attend(d, sid, spec):
    q = [[[0.5] * spec["d_k"]] for _ in range(spec.get("heads", 1))]
    r = d.post(f"/v1/sessions/{sid}/attention", {"q": q, "return": ["output"]})
    assert r.status == 200, r
    return r.json()["output"]


def _open(d, frame):
    s = connect(d.port, timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(("POST /v1/sessions/import HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               f"Content-Type: application/octet-stream\r\n{frame}\r\n"
               "Connection: close\r\n\r\n").encode())
    return s


def _answer(s):
    data = b""
    while True:
        try:
            got = s.recv(65536)
        except ConnectionResetError:
            break
        if not got:
            break
        data += got
    s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    if not head:
        return None, b""
    return int(head.split()[1]), rest


def _send(d, pieces, chunked=False, length=None, pause=0.02):
    frame = "Transfer-Encoding: chunked" if chunked else \
        f"Content-Length: {length if length is not None else sum(map(len, pieces))}"
    s = _open(d, frame)
    for p in pieces:
        s.sendall(b"%x\r\n%s\r\n" % (len(p), p) if chunked else p)
        time.sleep(pause)
    if chunked:
        s.sendall(b"0\r\n\r\n")
    return _answer(s)


def _imported_same(d, status, answer, attn, spec):
    assert status == 201, answer
    nid = json.loads(answer)["id"]
    assert _attend(d, nid, spec) == attn
    assert d.request("DELETE", f"/v1/sessions/{nid}").status in (200, 204)


PLAIN = {"d_k": 4, "d_v": 3, "heads": 2, "kv_heads": 1, "dtype": "float32"}
ROLLING = {"d_k": 4, "d_v": 2, "heads": 2, "kv_heads": 1, "dtype": "float32",
           "kv_dtype": "int8", "window": {"left": 70, "sinks": 3}}


def _rows_bytes(spec, held):
    es = {"int8": 1}.get(spec.get("kv_dtype"), 4)
    h_kv = spec.get("kv_heads", spec.get("heads", 1))
    scales = 2 * 4 * held * h_kv if spec.get("kv_dtype") == "int8" else 0
    return held * h_kv * (spec["d_k"] + spec["d_v"]) * es + scales


def test_one_byte_at_a_time_and_every_awkward_cut():
    rng = random.Random(1818)
    with Attnd() as d:
        before = _state(d)
        body, attn = _export(d, PLAIN, 21, rng)
        head = len(body) - 4 - _rows_bytes(PLAIN, 21)
        assert body[:8] == b"ATTNDSES" and head > 64
        for chunked in (False, True):
            status, answer = _send(d, [body[i:i + 1] for i in range(len(body))],
                                   chunked=chunked, pause=0.0002)
            _imported_same(d, status, answer, attn, PLAIN)
        cuts = sorted({1, 7, 8, 9, 11, 12, 13, 16, 17, 20, 21, 30, head // 2, head - 9,
                       head - 1, head, head + 1, head + 2, head + 5, head + 12 * 4 + 3,
                       len(body) - 7, len(body) - 5, len(body) - 4, len(body) - 3,
                       len(body) - 2, len(body) - 1})
        for cut in cuts:
            status, answer = _send(d, [body[:cut], body[cut:]], chunked=cut % 2 == 1)
            _imported_same(d, status, answer, attn, PLAIN)
        _settle(d, before)
        assert d.stop() == 0


def test_rolling_int8_in_odd_pieces():
    rng = random.Random(22)
    with Attnd() as d:
        before = _state(d)
        body, attn = _export(d, ROLLING, 300, rng)
        # rows [0, 64) and [first, 300) held: fewer than 300, a gap between
        assert len(body) < 4 + _rows_bytes(ROLLING, 300)
        for size in (1, 3, 7, 61, 4093):
            pieces = [body[i:i + size] for i in range(0, len(body), size)]
            status, answer = _send(d, pieces, chunked=size % 2 == 1,
                                   pause=0.0002 if size < 8 else 0.002)
            _imported_same(d, status, answer, attn, ROLLING)
        _settle(d, before)
        assert d.stop() == 0


def test_refusals_create_nothing():
    rng = random.Random(7)
    with Attnd("--max-body-bytes", "1m") as d:
        before = _state(d)
        body, _ = _export(d, PLAIN, 40, rng)
        bad = bytearray(body)
        bad[3] ^= 0x20                              # magic, first piece
        status, answer = _send(d, [bytes(bad[:5]), bytes(bad[5:])])
        assert status == 422 and b"invalid_export" in answer, answer
        bad = bytearray(body)
        bad[-1] ^= 0x01                             # CRC, last piece
        status, answer = _send(d, [bytes(bad[:-1]), bytes(bad[-1:])], chunked=True)
        assert status == 422 and b"checksum mismatch" in answer, answer
        # Content-Length shorter than the export: the import is short
        status, answer = _send(d, [body[:len(body) - 10]], length=len(body) - 10)
        assert status == 422 and b"truncated" in answer, answer
        s = _open(d, f"Content-Length: {len(body) - 10}")    # and the rest sent too
        s.sendall(body)
        status, answer = _answer(s)
        assert status == 422 and b"truncated" in answer, answer
        status, answer = _send(d, [], length=0)
        assert status == 422 and b"invalid_export" in answer, answer
        status, answer = _send(d, [], chunked=True)
        assert status == 422 and b"invalid_export" in answer, answer
        # announced more than sent, then the client closes its side
        for cut in (5, len(body) // 2, len(body) - 2):
            s = _open(d, f"Content-Length: {len(body)}")
            s.sendall(body[:cut])
            time.sleep(0.05)
            if E2E_TLS:     # no half-close: SSLSocket.shutdown drops the TLS layer
                s.close()
                status = None
            else:
                s.shutdown(socket.SHUT_WR)
                status, _ = _answer(s)
            assert status is None or status >= 400
            _settle(d, before)
        # over --max-body-bytes and over the 16 MiB attnd would read and
        # drop first, announced: 413 before any byte is read
        s = _open(d, f"Content-Length: {64 << 20}")
        status, answer = _answer(s)
        assert status == 413 and b"body_too_large" in answer, answer
        _settle(d, before)
        assert d.get("/healthz").status == 200
        assert d.stop() == 0


def test_over_the_cache_limit_is_422_and_creates_nothing():
    rng = random.Random(9)
    with Attnd() as a:
        body, attn = _export(a, PLAIN, 1000, rng)
    with Attnd("--max-cache-bytes", "8k") as d:
        before = _state(d)
        for chunked in (False, True):
            status, answer = _send(d, [body[:100], body[100:]], chunked=chunked)
            assert status == 422 and b"limit_exceeded" in answer, answer
            _settle(d, before)
        assert d.stop() == 0


def _cache_max(d, spec, rows, rng):
    r = d.post("/v1/sessions", spec)
    if r.status != 201:
        return None
    sid = r.json()["id"]
    h_kv = spec.get("kv_heads", spec.get("heads", 1))
    kv = {"k": [_mat(rng, rows, spec["d_k"]) for _ in range(h_kv)],
          "v": [_mat(rng, rows, spec["d_v"]) for _ in range(h_kv)]}
    r = d.post(f"/v1/sessions/{sid}/kv", kv)
    return sid if r.status == 200 else None


def test_import_half_sent_while_the_cache_is_evicted():
    rng = random.Random(5)
    big = {"d_k": 64, "d_v": 64, "heads": 1, "dtype": "float32"}
    with Attnd() as a:
        body, attn = _export(a, big, 1024, rng)     # 512 KiB of rows
    limit = 1 << 20
    with Attnd("--max-cache-bytes", str(limit), "--cache-policy", "lru") as d:
        s = _open(d, f"Content-Length: {len(body)}")
        s.sendall(body[:len(body) // 3])            # header read: its pages claimed
        time.sleep(0.2)
        made = 0
        for _ in range(12):                         # 256 KiB each: lru evicts
            if _cache_max(d, big, 512, rng):
                made += 1
            assert d.metric("attnd_kv_cache_bytes") <= limit
        assert made >= 1
        s.sendall(body[len(body) // 3:])
        status, answer = _answer(s)
        assert status == 201, answer
        assert d.metric("attnd_kv_cache_bytes") <= limit
        nid = json.loads(answer)["id"]
        assert _attend(d, nid, big) == attn
        assert d.stop() == 0


def test_drain_with_an_import_half_sent():
    rng = random.Random(3)
    with Attnd("--drain-timeout", "1") as d:
        body, _ = _export(d, PLAIN, 500, rng)
        s = _open(d, f"Content-Length: {len(body)}")
        s.sendall(body[:len(body) // 2])
        time.sleep(0.2)
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=20) == 0
        s.close()


def _read_one(s, buf):
    """One answer (status, body) from a kept-alive socket; buf: bytes read
    ahead. Returns (status, body, rest)."""
    while b"\r\n\r\n" not in buf:
        got = s.recv(65536)
        assert got, buf
        buf += got
    head, _, buf = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(buf) < length:
        got = s.recv(65536)
        assert got
        buf += got
    return int(head.split()[1]), buf[:length], buf[length:]


def test_imports_on_one_kept_alive_connection():
    rng = random.Random(11)
    with Attnd("--api-key", "sekret") as d:
        auth = {"Authorization": "Bearer sekret"}
        before = _state(d, auth)
        r = d.request("POST", "/v1/sessions", json.dumps(PLAIN).encode(),
                      headers={**auth, "Content-Type": "application/json"})
        sid = r.json()["id"]
        kv = {"k": [_mat(rng, 30, 4)], "v": [_mat(rng, 30, 3)]}
        assert d.request("POST", f"/v1/sessions/{sid}/kv", json.dumps(kv).encode(),
                         headers={**auth, "Content-Type": "application/json"}).status == 200
        body = d.request("GET", f"/v1/sessions/{sid}/export", headers=auth).body
        assert d.request("DELETE", f"/v1/sessions/{sid}", headers=auth).status in (200, 204)
        _settle(d, before, headers=auth)        # the export's pages let go (_export)
        bad = bytearray(body)
        bad[len(body) // 2] ^= 0x40
        s = connect(d.port, timeout=30)
        buf, ids = b"", []
        for key, payload, chunked, want in (
                ("sekret", body, False, 201), ("sekret", bytes(bad), True, 422),
                ("wrong", body, False, 401), ("sekret", body[:-3], False, 422),
                ("sekret", body, True, 201), ("sekret", body, False, 201)):
            frame = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(payload)}"
            s.sendall((f"POST /v1/sessions/import HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                       f"Content-Type: application/octet-stream\r\n{frame}\r\n\r\n").encode())
            half = len(payload) // 2
            for p in (payload[:half], payload[half:]):
                s.sendall(b"%x\r\n%s\r\n" % (len(p), p) if chunked else p)
                time.sleep(0.01)
            if chunked:
                s.sendall(b"0\r\n\r\n")
            status, answer, buf = _read_one(s, buf)
            assert status == want, (want, status, answer)
            if status == 201:
                ids.append(json.loads(answer)["id"])
        s.close()
        assert len(ids) == 3
        for nid in ids:
            assert d.request("DELETE", f"/v1/sessions/{nid}", headers=auth).status in (200, 204)
        _settle(d, before, headers=auth)
        assert d.stop() == 0


def test_half_sent_imports_count_in_the_body_budget():
    """An import's header is held until it reads whole (a chunked one of
    any size): streamed bodies count in the body budget as buffered ones
    do (8 x --max-body-bytes, at least 256 MiB), else half-sent imports
    held memory without bound (80 of ~8 MB: 626 MiB of RSS)."""
    rng = random.Random(4)
    with Attnd("--max-body-bytes", "8m") as d:
        body, attn = _export(d, PLAIN, 30, rng)
        before = _state(d)
        held = [_open(d, f"Content-Length: {8 << 20}") for _ in range(32)]   # 256 MiB
        time.sleep(0.2)
        status, answer = _send(d, [body], length=len(body))
        assert status == 503 and b"too many request bodies" in answer, answer
        status, answer = _send(d, [body[:100], body[100:]], chunked=True)
        assert status == 503 and b"too many request bodies" in answer, answer
        for p in held:
            p.close()
        _settle(d, before)
        status, answer = _send(d, [body[:100], body[100:]], chunked=True)
        _imported_same(d, status, answer, attn, PLAIN)
        _settle(d, before)
        assert d.stop() == 0


def _announcing(body, length):
    """A PLAIN export's header rewritten to announce `length` rows (and
    max_tokens), no rows after it: what a chunked upload may begin with."""
    b = bytearray(body)
    off = 20 + struct.unpack_from("<I", b, 16)[0] + 4      # h, h_kv, d_k, d_v, length, max_tokens
    struct.pack_into("<QQ", b, off + 32, length, length)
    return bytes(b[:len(b) - 4 - _rows_bytes(PLAIN, 30)])


def test_chunked_header_past_the_body_cap_claims_nothing():
    """A chunked import's rows are claimed (lru: idle sessions evicted)
    when its header arrives, before they do: a header announcing more than
    --max-body-bytes can take is refused at once (the body could never
    hold them) instead of evicting for rows that never come, or walking
    every page of 1e10 rows on the transport thread."""
    rng = random.Random(8)
    with Attnd("--max-body-bytes", "256k", "--max-cache-bytes", "4m", "--cache-policy", "lru",
               "--max-tokens", "1000000000000") as d:
        body, attn = _export(d, PLAIN, 30, rng)
        big = {"d_k": 64, "d_v": 64, "heads": 1, "dtype": "float32"}
        idle = []
        for _ in range(6):                                  # 512 KiB each, idle
            r = d.post("/v1/sessions", big)
            assert r.status == 201, r
            idle.append(r.json()["id"])
            for _ in range(4):
                t = {"shape": [1, 256, 64], "dtype": "float32", "data": base64.b64encode(
                    struct.pack("<16384f", *(rng.uniform(-1, 1) for _ in range(16384)))).decode()}
                assert d.post(f"/v1/sessions/{idle[-1]}/kv", {"k": t, "v": t}).status == 200
        before = _state(d)
        for rows in (100000, 10 ** 10):     # 2.8 MB of rows over a 256 KiB cap; 1e10
            head = _announcing(body, rows)
            s = _open(d, "Transfer-Encoding: chunked")
            s.sendall(b"%x\r\n%s\r\n" % (len(head), head))
            time.sleep(0.2)
            assert _state(d) == before          # nothing claimed, nothing evicted
            s.close()
            status, answer = _send(d, [head], chunked=True)
            assert status == 422 and b"truncated" in answer, answer
        for sid in idle:
            assert d.get(f"/v1/sessions/{sid}").status == 200
        status, answer = _send(d, [body[:50], body[50:]], chunked=True)
        _imported_same(d, status, answer, attn, PLAIN)
        assert d.stop() == 0
