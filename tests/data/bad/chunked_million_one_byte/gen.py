"""A valid request body sent as a million one-byte chunks (6 MB on the wire).

The body is the small valid request padded with spaces to 1 000 000 bytes,
so the daemon must take it (with --max-body-bytes 8000000) and answer 200.
"""
import json

def generate():
    body = json.dumps({"q": [[1, 0]], "k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}).encode()
    body = body[:-1] + b" " * (1000000 - len(body)) + b"}"
    assert len(body) == 1000000
    wire = b"".join(b"1\r\n" + body[i:i + 1] + b"\r\n" for i in range(len(body)))
    return (b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n" + wire + b"0\r\n\r\n")
