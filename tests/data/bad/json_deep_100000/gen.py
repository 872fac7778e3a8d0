"""100 000-deep nesting inside "q" (200 KB body)."""
import json

def generate():
    depth = 100000
    body = b'{"q":' + b"[" * depth + b"]" * depth + b'}'
    return (b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n"
            b"Connection: close\r\n\r\n" + body)
