"""The routes answered without the API key: one list (api_open_paths in
api/router.c, printed by `attnd --help`) that the server, the README and the
OpenAPI document must all agree with, and the v2 protocol's error shape on
the refusals (401) and transport errors (413) under /v2."""
import json
import os
import re
import subprocess

from attnd_proc import BIN, Attnd

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
KEY = "open-routes-test-key"


def open_routes():
    out = subprocess.run([BIN, "--help"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"^Open routes \(answered without the API key\):(.*)$", out, re.M)
    assert m, "attnd --help lists no open routes"
    return m.group(1).split()


def openapi():
    with open(os.path.join(ROOT, "server", "web", "openapi.json")) as f:
        return json.load(f)


def test_help_lists_every_static_file_and_the_probes():
    routes = set(open_routes())
    for probe in ("/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"):
        assert probe in routes
    for name in os.listdir(os.path.join(ROOT, "server", "web")):
        assert "/" + name in routes, f"server/web/{name} is served without a key but not listed"
    assert "/" in routes and "/v1/openapi.json" in routes


def test_server_answers_exactly_the_open_routes_without_a_key():
    # HEAD is GET's: open where GET is, 401 (with no body) where it is not
    routes = open_routes()
    doc = openapi()
    with Attnd("--api-key", KEY) as d:
        for p in routes:
            r = d.get(p)
            assert r.status in (200, 503), f"GET {p} without a key: {r}"
            h = d.request("HEAD", p)
            assert h.status == r.status and h.body == b"", f"HEAD {p} without a key: {h}"
        for path, item in doc["paths"].items():
            if path in routes:
                continue
            concrete = path.replace("{id}", "0123456789abcdef").replace("{version}", "1")
            for method in item:
                if method not in ("get", "head", "post", "delete"):
                    continue
                r = d.request(method.upper(), concrete, body={} if method == "post" else None)
                assert r.status == 401, f"{method.upper()} {path} without a key: {r}"
                ok = d.request(method.upper(), concrete, body={} if method == "post" else None,
                               headers={"Authorization": "Bearer " + KEY})
                assert ok.status != 401, f"{method.upper()} {path} with the key: {ok}"


def test_openapi_marks_exactly_the_open_routes():
    # the CORS preflight (OPTIONS) is open on every path: a browser sends
    # it without the key (api/router.c answers it before authentication)
    routes = set(open_routes())
    doc = openapi()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            if method == "options":
                assert op.get("security") == [], f"OPTIONS {path}: security {op.get('security')!r}"
                continue
            is_open = op.get("security") == []
            assert is_open == (path in routes), \
                f"{method.upper()} {path}: security {op.get('security')!r}, open: {path in routes}"


def test_readme_lists_exactly_the_open_routes():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    row = next((l for l in readme.splitlines() if l.startswith("| `--api-key` ")), None)
    assert row, "README has no --api-key row"
    listed = set(re.findall(r"`(/[^`]*)`", row))
    routes = set(open_routes())
    probes = {"/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"}
    assert probes <= listed <= routes, f"README lists {sorted(listed)}"
    assert "static files" in row


def test_v2_errors_keep_the_v2_shape_for_401_and_413():
    with Attnd("--api-key", KEY, "--max-body-bytes", "1000") as d:
        r = d.get("/v2/models/attention")
        assert r.status == 401 and "www-authenticate" in r.headers
        assert isinstance(r.json()["error"], str), r
        r = d.post("/v2/models/attention/infer", b"x" * 5000,
                   headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
        assert r.status == 413, r
        assert isinstance(r.json()["error"], str), r
        r = d.post("/v1/attention", b"x" * 5000,
                   headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
        assert r.status == 413 and r.json()["error"]["code"] == "body_too_large", r
        r = d.get("/v2/health/live")
        assert r.status == 200 and r.json() == {"live": True}


def test_openapi_error_codes_are_the_error_table():
    """components.schemas.ErrorCode lists exactly the codes of API_ERROR_MAP
    (api/error.h), the one table the server answers from."""
    with open(os.path.join(ROOT, "api", "error.h")) as f:
        table = re.findall(r'X\([A-Z_]+,\s*"([a-z_]+)",\s*\d+', f.read())
    assert len(table) > 20
    assert sorted(openapi()["components"]["schemas"]["ErrorCode"]["enum"]) == sorted(table)


def test_unknown_paths_under_v1_and_v2_ask_for_the_key_before_404():
    # without the key a path with no route answers as a route does (401),
    # so the routes cannot be mapped; with it, the 404 in each one's shape
    auth = {"Authorization": "Bearer " + KEY}
    with Attnd("--api-key", KEY) as d:
        for method, path in (("GET", "/v1/nope"), ("POST", "/v1/nope"), ("GET", "/v1"),
                             ("GET", "/v1/"), ("DELETE", "/v1/info/x"),
                             ("GET", "/v1/sessions/abc/nope"), ("GET", "/v2/nope")):
            body = {} if method == "POST" else None
            r = d.request(method, path, body=body)
            assert r.status == 401 and "www-authenticate" in r.headers, f"{method} {path}: {r}"
            r = d.request(method, path, body=body, headers=auth)
            assert r.status == 404, f"{method} {path} with the key: {r}"
            err = r.json()["error"]
            assert isinstance(err, str) if path.startswith("/v2") else err["code"] == "not_found"
        # outside /v1 and /v2 (the page's files) a missing file stays 404
        assert d.get("/nope.js").status == 404
        # a preflight needs no key on a route, and an open route none
        assert d.request("OPTIONS", "/v1/info").status == 204
        assert d.get("/v2/health/live").status == 200
        # a preflight carries no key: on a path with no route it is 404
        # with or without one, below a route's subtree as at the top
        for path in ("/v1/nope", "/v1/sessions/abc/nope", "/v2/models/attention/nope",
                     "/v2/nope"):
            for hdr in ({}, auth):
                r = d.request("OPTIONS", path, headers=hdr)
                assert r.status == 404, f"OPTIONS {path} {hdr}: {r}"
        assert d.request("OPTIONS", "/v1/sessions/abc").status == 204
