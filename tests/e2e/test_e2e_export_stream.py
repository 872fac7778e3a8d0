"""tests/e2e/test_e2e_export_stream.py — GET /v1/sessions/{id}/export sent
piece by piece from a snapshot of the session's pages.

- An export read slowly while another client appends to, truncates and
  deletes the session is the session of the moment the export began: the
  same bytes as a whole export taken just before (past the clock), and it
  imports; the session goes on meanwhile (its length is what the other
  client made it).
- Clients that hang up midway (after the headers, or after part of the
  rows) leave the daemon answering, and once the session is deleted its
  cache bytes go back to 0: the snapshot's pages were let go. Under
  `make asan` the daemon then exits 0 with no leak reported.
"""
import random
import socket
import struct
import time

from attnd_proc import Attnd, append_random_rows, suite_wrap

OCTET = {"Content-Type": "application/octet-stream"}
HEADS, D = 2, 128


def _big_session(a, rows, seed):
    rng = random.Random(seed)
    r = a.post("/v1/sessions", {"d_k": D, "d_v": D, "heads": HEADS, "dtype": "float32",
                                "max_tokens": 32768})
    assert r.status == 201, r
    sid = r.json()["id"]
    _append(a, sid, rows, rng)
    return sid


def _append(a, sid, rows, rng):
    append_random_rows(a, sid, HEADS, D, rows, rng)


def _after_clock(body):
    (id_len,) = struct.unpack_from("<I", body, 16)
    return 20 + id_len + 4 + 6 * 8 + 16


def _open_export(a, sid, rcvbuf=1 << 16):
    """A raw GET of the export: the socket and what was read past the
    headers, with the body's length."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(30)
    s.connect(("127.0.0.1", a.port))
    s = suite_wrap(s)
    s.sendall(f"GET /v1/sessions/{sid}/export HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        assert chunk, head
        head += chunk
    head, rest = head.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    assert lines[0].startswith("HTTP/1.1 200"), lines
    length = None
    for line in lines[1:]:
        k, v = line.split(":", 1)
        if k.lower() == "content-length":
            length = int(v)
    assert length is not None, lines
    return s, rest, length


def _read_rest(s, got, length):
    buf = bytearray(got)
    while len(buf) < length:
        chunk = s.recv(1 << 20)
        assert chunk, (len(buf), length)
        buf += chunk
    s.close()
    return bytes(buf)


def test_export_is_a_snapshot_while_the_session_changes():
    rng = random.Random(5)
    with Attnd() as a:
        rows = 8192                                  # 16 MiB of rows: far past the socket buffers
        sid = _big_session(a, rows, 1)
        r = a.get(f"/v1/sessions/{sid}/export")
        assert r.status == 200
        want = r.body
        s, got, length = _open_export(a, sid)
        assert length == len(want)
        got += s.recv(1000)                           # the export is under way
        # another client changes the session meanwhile
        _append(a, sid, 64, rng)
        assert a.post(f"/v1/sessions/{sid}/truncate", {"length": 100}).status == 200
        _append(a, sid, 70, rng)                     # over rows the export still reads
        s2, got2, length2 = _open_export(a, sid)      # a second one, of 170 rows
        got2 += s2.recv(100)
        assert a.request("DELETE", f"/v1/sessions/{sid}").status == 204
        assert a.get(f"/v1/sessions/{sid}").status == 404
        body = _read_rest(s, got, length)
        body2 = _read_rest(s2, got2, length2)
        off = _after_clock(want)
        assert body[:16] == want[:16] and body[off:-4] == want[off:-4]
        # each imports, to the session of its moment
        r = a.request("POST", "/v1/sessions/import", body, headers=OCTET)
        assert r.status == 201, r
        assert r.json()["length"] == rows
        r2 = a.request("POST", "/v1/sessions/import", body2, headers=OCTET)
        assert r2.status == 201, r2
        assert r2.json()["length"] == 170
        for j in (r.json(), r2.json()):
            assert a.request("DELETE", f"/v1/sessions/{j['id']}").status == 204
        assert a.metric("attnd_kv_cache_bytes") == 0


def test_clients_hanging_up_midway_leak_nothing():
    with Attnd() as a:
        sid = _big_session(a, 4096, 2)
        full = a.get(f"/v1/sessions/{sid}/export").body
        for cut in (0, 1, 100, 1 << 20, len(full) - 5):
            s, got, length = _open_export(a, sid)
            assert length == len(full)
            while len(got) < cut:
                chunk = s.recv(min(1 << 20, cut - len(got)))
                assert chunk
                got += chunk
            s.close()                                 # gone midway
        # the session goes on and exports whole
        _append(a, sid, 10, random.Random(3))
        r = a.get(f"/v1/sessions/{sid}/export")
        assert r.status == 200 and len(r.body) > len(full)
        assert a.request("DELETE", f"/v1/sessions/{sid}").status == 204
        for _ in range(100):                          # MHD notices the hang-ups
            if a.metric("attnd_kv_cache_bytes") == 0:
                break
            time.sleep(0.05)
        assert a.metric("attnd_kv_cache_bytes") == 0
        assert a.stop() == 0, a.logs()[-4000:]
