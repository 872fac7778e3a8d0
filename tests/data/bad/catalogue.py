"""tests/data/bad/catalogue.py — the catalogue being written and the helpers
every cases_*.py module writes its cases with.

case() adds one case to `cases` (the folder's name, its expect.json, and
its raw request bytes or gen.py text); make_cases.py writes them out.
err() is an API error's expectation, with_() and without() a body changed
from a base such as VALID (the smallest valid /v1/attention request) or
SESSION (a session's create body); the flag groups are daemon flags cases
share (cases with equal flags share one daemon).
"""
import json

VALID = {"q": [[1, 0]], "k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}
SESSION = {"d_k": 2, "d_v": 2, "heads": 1, "kv_heads": 1}

# Daemon flag groups.
SMALL_CAP = ["--max-body-bytes", "65536"]
BIG_CAP = ["--max-body-bytes", "8000000"]
SMALL_OUT = ["--max-elements", "100"]

cases = {}


def raw_request(method, path, body=b"", headers=None, content_type="application/json",
                content_length=True):
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if body and content_type:
        head.append(f"Content-Type: {content_type}")
    if content_length and (body or method in ("POST", "PUT")):
        head.append(f"Content-Length: {len(body)}")
    for h in headers or []:
        head.append(h)
    head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def as_body(body):
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body, separators=(",", ":")).encode()


def case(name, expect, body=None, method="POST", path="/v1/attention", headers=None,
         raw=None, gen=None, **kw):
    assert name not in cases, name
    if raw is None and gen is None:
        raw = raw_request(method, path, as_body(body), headers, **kw)
    cases[name] = (expect, raw, gen)


def err(status, code, path=None, **extra):
    e = {"status": status, "code": code}
    if path is not None:
        e["path"] = path
    e.update(extra)
    return e


def with_(base, **changes):
    d = json.loads(json.dumps(base))
    for k, v in changes.items():
        d[k] = v
    return d


def without(base, key):
    d = dict(base)
    del d[key]
    return d
