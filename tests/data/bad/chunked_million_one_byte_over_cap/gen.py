"""A million one-byte chunks against a 64 KB cap: refused with 413 as
soon as the cap is passed (the client keeps sending; the answer must come)."""

def generate():
    wire = b"1\r\n \r\n" * 1000000
    return (b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n1\r\n{\r\n" + wire + b"0\r\n\r\n")
