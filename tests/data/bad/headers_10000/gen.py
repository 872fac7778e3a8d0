"""10 000 small headers (about 150 KB)."""

def generate():
    hs = b"".join(b"X-H%d: v\r\n" % i for i in range(10000))
    return (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + hs +
            b"Connection: close\r\n\r\n")
