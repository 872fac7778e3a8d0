"""One 100 KB header value."""

def generate():
    return (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"X-Big: " + b"a" * 102400 + b"\r\nConnection: close\r\n\r\n")
