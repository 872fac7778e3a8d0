"""tests/data/bad/cases_http.py — the transport and the routes: methods and
unknown or invalid routes, bodies over --max-body-bytes (413), transfer
codings and Content-Length faults, huge headers and URIs, garbage request
lines, and path traversal on every route (never a file).
"""
from catalogue import VALID, SMALL_CAP, BIG_CAP, as_body, case, err, with_

# ---- methods and routes ----------------------------------------------------
case("method_put_attention", err(405, "method_not_allowed", require_headers=["allow"]),
     VALID, method="PUT")
case("method_get_attention", err(405, "method_not_allowed", require_headers=["allow"]),
     method="GET")
case("method_delete_healthz", err(405, "method_not_allowed", require_headers=["allow"]),
     method="DELETE", path="/healthz")
case("route_unknown", err(404, "not_found"), method="GET", path="/v1/nothing-here")
case("route_utf8_overlong", err(404, "not_found",
                                note="found by fuzz_request: answered 500 (the 404 message "
                                     "quoted a path jansson refuses as UTF-8)"),
     method="GET", path="/%f0%80%80%80")
case("route_utf8_surrogate", err(404, "not_found", note="UTF-8 of U+D800; answered 500"),
     method="POST", path="/%ed%a0%80")
case("route_utf8_beyond_max", err(404, "not_found", note="U+110000; answered 500"),
     method="GET", path="/%f4%90%80%80")
case("route_invalid_utf8_lone_byte", err(404, "not_found"), method="GET", path="/v1/%ff%fe")
case("method_invalid_utf8", err([400, 405, 501], ["method_not_allowed", "bad_request"],
                                note="the 405 message quoted the raw method: answered 500; "
                                     "the JSON log line carries the raw bytes too"),
     raw=b"BREW\xf0\x80\x80\x80 /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
         b"Connection: close\r\n\r\n")
case("method_long_control_bytes", err([400, 405, 501], ["method_not_allowed", "bad_request"],
                                      note="escaped six to one, the method overflowed the "
                                           "2 KB log line, which was cut mid-string: not JSON"),
     raw=b"B" + b"\x01" * 1500 + b" /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
         b"Connection: close\r\n\r\n")
case("method_unknown", err(405, "method_not_allowed", require_headers=["allow"]),
     method="BREW", path="/v1/attention")
case("route_unknown_post", err(404, "not_found"), VALID, path="/v1/attentionx")

# ---- bodies over the cap (413), transfer codings -------------------------
BIG = as_body(with_(VALID, pad=" " * 70000))
case("body_over_cap_content_length", err(413, "body_too_large", flags=SMALL_CAP), BIG)
case("body_over_cap_declared_only",
     err(413, "body_too_large", flags=SMALL_CAP,
         note="Content-Length 100 MB (past the 16 MiB read and dropped before a refusal), "
              "only 1 KB sent: answer from the header, do not wait"),
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: 100000000\r\nConnection: close\r\n\r\n" + b" " * 1024))
case("body_over_cap_expect_100",
     err(413, "body_too_large", flags=SMALL_CAP,
         note="Expect: 100-continue with an oversized Content-Length: refuse before the body"),
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: 10000000\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"))


def chunked(body, size):
    out = []
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out.append(b"%x\r\n" % len(part) + part + b"\r\n")
    return b"".join(out) + b"0\r\n\r\n"


case("body_over_cap_chunked", err(413, "body_too_large", flags=SMALL_CAP,
                                  note="no Content-Length: the cap applies as chunks arrive"),
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked(BIG, 4096)))
case("chunked_valid_small", {"status": 200, "error_shape": "none",
                             "note": "control: chunked bodies are accepted"},
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked(as_body(VALID), 7)))
case("content_length_and_chunked",
     {"status_class": 4, "error_shape": "any",
      "note": "request smuggling shape (RFC 9112 6.1): refuse with a clean 4xx"},
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
          + chunked(as_body(VALID), 16)))
case("transfer_coding_unknown",
     {"status": [400, 411, 413, 501], "error_shape": "any",
      "note": "Transfer-Encoding: gzip is not supported; RFC 9112 suggests 501, "
              "libmicrohttpd may answer 400/411"},
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Transfer-Encoding: gzip\r\nConnection: close\r\n\r\n" + as_body(VALID)))
case("chunked_bad_size", {"status_class": 4, "error_shape": "any"},
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"))
case("content_length_negative", {"status_class": 4, "error_shape": "any"},
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: -5\r\nConnection: close\r\n\r\n{}"))
case("content_length_garbage", {"status_class": 4, "error_shape": "any"},
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: 12abc\r\nConnection: close\r\n\r\n{}"))
case("content_length_twice_differing", {"status": 400, "error_shape": "any",
                                        "note": "RFC 9112 6.3: differing duplicates are an error"},
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: 2\r\nContent-Length: 40\r\nConnection: close\r\n\r\n{}"))

GEN_CHUNKS = '''"""A valid request body sent as a million one-byte chunks (6 MB on the wire).

The body is the small valid request padded with spaces to 1 000 000 bytes,
so the daemon must take it (with --max-body-bytes 8000000) and answer 200.
"""
import json

def generate():
    body = json.dumps({"q": [[1, 0]], "k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}).encode()
    body = body[:-1] + b" " * (1000000 - len(body)) + b"}"
    assert len(body) == 1000000
    wire = b"".join(b"1\\r\\n" + body[i:i + 1] + b"\\r\\n" for i in range(len(body)))
    return (b"POST /v1/attention HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n"
            b"Content-Type: application/json\\r\\nTransfer-Encoding: chunked\\r\\n"
            b"Connection: close\\r\\n\\r\\n" + wire + b"0\\r\\n\\r\\n")
'''
case("chunked_million_one_byte", {"status": 200, "flags": BIG_CAP, "error_shape": "none",
                                  "timeout": 60},
     gen=GEN_CHUNKS)

GEN_CHUNKS_CAP = '''"""A million one-byte chunks against a 64 KB cap: refused with 413 as
soon as the cap is passed (the client keeps sending; the answer must come)."""

def generate():
    wire = b"1\\r\\n \\r\\n" * 1000000
    return (b"POST /v1/attention HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n"
            b"Content-Type: application/json\\r\\nTransfer-Encoding: chunked\\r\\n"
            b"Connection: close\\r\\n\\r\\n1\\r\\n{\\r\\n" + wire + b"0\\r\\n\\r\\n")
'''
case("chunked_million_one_byte_over_cap", err(413, "body_too_large", flags=SMALL_CAP,
                                              timeout=60), gen=GEN_CHUNKS_CAP)

GEN_HEADER = '''"""One 100 KB header value."""

def generate():
    return (b"GET /healthz HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n"
            b"X-Big: " + b"a" * 102400 + b"\\r\\nConnection: close\\r\\n\\r\\n")
'''
case("header_100kb", {"status_class": 4, "error_shape": "any",
                      "note": "libmicrohttpd answers 431 itself"}, gen=GEN_HEADER)

GEN_MANY_HEADERS = '''"""10 000 small headers (about 150 KB)."""

def generate():
    hs = b"".join(b"X-H%d: v\\r\\n" % i for i in range(10000))
    return (b"GET /healthz HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n" + hs +
            b"Connection: close\\r\\n\\r\\n")
'''
case("headers_10000", {"status_class": 4, "error_shape": "any"}, gen=GEN_MANY_HEADERS)

GEN_URI = '''"""A 100 KB URI."""

def generate():
    return (b"GET /v1/sessions/" + b"A" * 102400 + b" HTTP/1.1\\r\\n"
            b"Host: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n")
'''
case("uri_100kb", {"status_class": 4, "error_shape": "any",
                   "note": "libmicrohttpd answers 414 itself"}, gen=GEN_URI)
case("request_line_garbage", {"status_class": 4, "error_shape": "any"},
     raw=b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 garbage\r\n\r\n")
case("http_version_unknown", {"status_class": [4, 5], "error_shape": "any",
                              "note": "HTTP/3.7: 505 or 400"},
     raw=b"GET /healthz HTTP/3.7\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")


# ---- path traversal on every route, plain and percent-encoded -----------------
TRAV = [
    ("root", "/../../../../etc/passwd"),
    ("root_pct", "/%2e%2e/%2e%2e/%2e%2e/etc/passwd"),
    ("root_pct_slash", "/..%2f..%2f..%2fetc%2fpasswd"),
    ("root_double_pct", "/%252e%252e/%252e%252e/etc/passwd"),
    ("attention", "/v1/attention/../../../etc/passwd"),
    ("attention_pct", "/v1/attention/%2e%2e%2f%2e%2e%2fetc%2fpasswd"),
    ("sessions", "/v1/sessions/../../../etc/passwd"),
    ("sessions_pct", "/v1/sessions/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd"),
    ("sessions_kv", "/v1/sessions/..%2f..%2fstate/kv"),
    ("sessions_backslash", "/v1/sessions/..%5c..%5cetc%5cpasswd"),
    ("sessions_nul", "/v1/sessions/abc%00/../../etc/passwd"),
    ("verify", "/v1/verify/../../etc/passwd"),
    ("verify_short", "/verify/%2e%2e/%2e%2e/etc/passwd"),
    ("healthz", "/healthz/../../etc/passwd"),
    ("static", "/index.html/../../../etc/passwd"),
    ("static_pct", "/%2e%2e%2f%2e%2e%2fserver%2fmain.c"),
    ("metrics", "/metrics/%2e%2e/%2e%2e/etc/passwd"),
    ("info", "/v1/info/../../etc/passwd"),
    ("v2", "/v2/models/../../../etc/passwd"),
    ("v2_pct", "/v2/models/%2e%2e%2f%2e%2e%2fetc%2fpasswd/infer"),
]
for name, p in TRAV:
    shape = "any" if name.startswith("v2") else "v1"
    case("traversal_" + name,
         {"status": [400, 404], "code": ["not_found", "session_not_found", "invalid_field"],
          "error_shape": shape, "forbid": ["root:", "#include"],
          "note": "never a file: 404 (or 400 for a refused path)"},
         method="GET", path=p)
case("traversal_sessions_delete",
     {"status": [400, 404], "code": ["not_found", "session_not_found"],
      "forbid": ["root:"]},
     method="DELETE", path="/v1/sessions/..%2f..%2f..%2ftmp")
case("traversal_sessions_post_kv",
     {"status": [400, 404], "code": ["not_found", "session_not_found"],
      "forbid": ["root:"]},
     {"k": [[1, 0]], "v": [[1, 2]]}, path="/v1/sessions/%2e%2e%2f%2e%2e/kv")
