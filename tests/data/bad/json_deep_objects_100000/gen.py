"""100 000-deep nesting of objects {"a":{"a":...}} (600 KB body)."""

def generate():
    depth = 100000
    body = b'{"a":' * depth + b'1' + b'}' * depth
    return (b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n"
            b"Connection: close\r\n\r\n" + body)
