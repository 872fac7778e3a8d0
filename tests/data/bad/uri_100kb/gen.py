"""A 100 KB URI."""

def generate():
    return (b"GET /v1/sessions/" + b"A" * 102400 + b" HTTP/1.1\r\n"
            b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
