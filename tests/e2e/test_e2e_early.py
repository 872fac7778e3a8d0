"""tests/e2e/test_e2e_early.py — a large base64 request's strings decoded
while its body arrives (api/early.c), seen from a client.

A body with a Content-Length of 1 MiB or more to POST /v1/attention is
decoded as it is received, its decoded characters left out of the body
buffer; a chunked body (no length announced) is decoded after it has
arrived, as before. The same bodies sent both ways, whole and in small
pieces written apart (so that the server receives strings cut at many
places), must get the same answers but for "meta": results, and refusals
with their codes, paths and messages. The server's body buffers are kept
for the next request (api/spare.c), so each body is sent right after one
of its length made of quotes and backslashes (refused): a hole
read as if it held the body would show.
"""
import base64
import json
import random
import struct
import time

from attnd_proc import Attnd, connect

NQ, NK, D = 128, 800, 128
_rng = random.Random(71)


def _text(rows, fmt="<%df", size=4):
    vals = [_rng.uniform(-1, 1) for _ in range(rows * D)]
    return base64.b64encode(struct.pack(fmt % len(vals), *vals)).decode()


Q, K, V = _text(NQ), _text(NK), _text(NK)


def _body(q=Q, k=K, v=V, extra=""):
    t = '{"shape":[%d,%d],"dtype":"float32","data":"%s"}'
    return ('{"q":%s,"k":%s,"v":%s,"dtype":"float32","encoding":"base64",'
            '"return":["output","weights"]%s}'
            % (t % (NQ, D, q), t % (NK, D, k), t % (NK, D, v), extra)).encode()


def _at(s, i, part):
    return s[:i] + part + s[i + len(part):]


CASES = {
    "valid": _body(),
    "bad character late in k": _body(k=_at(K, len(K) * 3 // 4 + 1, "!")),
    "padding inside v": _body(v=_at(V, len(V) * 3 // 4 + 1, "=")),
    "escape in v": _body(v=V[:len(V) // 2 + 1] + "\\/" + V[len(V) // 2 + 2:]),
    "bad padding at k's end": _body(k=K[:-4] + "=A=="),
    "a group short": _body(k=K[:-4]),
    "syntax error after the strings": _body(extra=',"x":tru'),
    "long unknown string": _body(extra=',"x":"%s"' % Q),
}


def _scrambler(n):
    return b'{"x":"' + b'\\"' * ((n - 8) // 2) + b'"' * ((n - 8) % 2) + b'"}'


def _read_response(sock):
    head = b""
    while b"\r\n\r\n" not in head:
        c = sock.recv(65536)
        if not c:
            raise ConnectionError("closed before headers")
        head += c
    head, rest = head.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    n = next(int(x.split(":", 1)[1]) for x in lines[1:]
             if x.lower().startswith("content-length:"))
    while len(rest) < n:
        c = sock.recv(1 << 20)
        if not c:
            raise ConnectionError("closed in the body")
        rest += c
    return status, rest[:n]


def _send(d, body, chunked=False, piece=None):
    """POST body: with a Content-Length (whole, or written in pieces of
    piece bytes a moment apart) or chunked; (status, answer without meta)."""
    s = connect(d.port, timeout=60)
    try:
        head = (b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\n")
        if chunked:
            out = b"".join(b"%x\r\n" % len(body[i:i + 65536]) + body[i:i + 65536] + b"\r\n"
                           for i in range(0, len(body), 65536))
            s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n" + out + b"0\r\n\r\n")
        else:
            s.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body))
            step = piece or len(body)
            for i in range(0, len(body), step):
                s.sendall(body[i:i + step])
                if piece:
                    time.sleep(0.0005)
        status, data = _read_response(s)
    finally:
        s.close()
    j = json.loads(data)
    j.pop("meta", None)
    return status, j


def test_early_decoding_answers_as_after_arrival():
    with Attnd("--max-body-bytes", "64m") as d:
        for name, body in CASES.items():
            assert len(body) >= 1 << 20
            want = _send(d, body, chunked=True)
            for piece in (None, 7919, 40000):
                assert _send(d, _scrambler(len(body)))[0] in (400, 422)
                got = _send(d, body, piece=piece)
                assert got == want, (name, piece, got[0], str(got[1])[:300],
                                     str(want[1])[:300])
        assert _send(d, CASES["valid"])[0] == 200
        assert _send(d, CASES["bad character late in k"])[1]["error"] == {
            "code": "invalid_field", "message": "data is not valid base64", "path": "/k/data"}
