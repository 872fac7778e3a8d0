"""tests/e2e/test_e2e_v2.py — the Open Inference Protocol v2 against the real
daemon: metadata and health, JSON inference checked against a Python
reference and against /v1/attention for every option, the binary tensor data
extension with request bodies built byte by byte (FP64 and FP32, binary and
JSON outputs mixed), the sequence extension on sessions, and errors in the
protocol's {"error": "..."} shape with Triton's status mapping.
"""
import json
import math
import resource
import signal
import struct

import pytest

from attnd_proc import Attnd

HDR = "Inference-Header-Content-Length"
INFER = "/v2/models/attention/infer"


def tensor(name, shape, data, datatype="FP64"):
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


def flat(m):
    return [x for row in m for x in (flat(row) if isinstance(row, list) else [row])] \
        if isinstance(m, list) else [m]


def shape_of(m):
    s = []
    while isinstance(m, list):
        s.append(len(m))
        m = m[0]
    return s


def outputs(resp):
    return {o["name"]: o for o in resp["outputs"]}


def v2_error(r, status):
    assert r.status == status, r
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert isinstance(err, str) and err
    return err


# ---- a reference for the plain case ----------------------------------------

def ref_attention(q, k, v, scale=None):
    """2-D q [n][d], k [L][d], v [L][dv]: (weights, output), standard softmax."""
    d = len(q[0])
    scale = scale if scale is not None else 1 / math.sqrt(d)
    W, O = [], []
    for qi in q:
        s = [scale * sum(a * b for a, b in zip(qi, kj)) for kj in k]
        m = max(s)
        e = [math.exp(x - m) for x in s]
        z = sum(e)
        w = [x / z for x in e]
        W.append(w)
        O.append([sum(w[j] * v[j][c] for j in range(len(v))) for c in range(len(v[0]))])
    return W, O


# ---- clients of the protocol's other servers ----------------------------------

def test_an_mlserver_client_s_request_is_read(attnd):
    """MLServer's codecs mark numeric tensors "content_type": "np" in the
    request's and each input's parameters, and a client that dumps its own
    request model writes unset fields as null: both were 400 'unknown
    field'. content_type "np" is read (another codec's is refused by name),
    and a null member is absent whatever its name."""
    q, k, v = [[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]], [[1.0], [2.0]]
    ins = [dict(tensor(n, shape_of(m), flat(m)), parameters={"content_type": "np"})
           for n, m in (("q", q), ("k", k), ("v", v))]
    ins[0]["parameters"]["binary_data_size"] = None
    body = {"id": "mls-1", "parameters": {"content_type": "np", "headers": None},
            "inputs": ins, "outputs": None, "headers": None}
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    got = outputs(r.json())["output"]["data"]
    _, want = ref_attention(q, k, v)
    assert all(abs(a - b) < 1e-12 for a, b in zip(got, flat(want))), (got, want)
    for where, bad in ((body["parameters"], "pd"), (ins[1]["parameters"], "str"),
                       (ins[2]["parameters"], 1)):
        where["content_type"] = bad
        err = v2_error(attnd.post(INFER, body), 400)
        assert 'content_type must be "np"' in err, (bad, err)
        where["content_type"] = "np"
    assert attnd.post(INFER, body).status == 200
    # a member that is not null and not known is still refused by name
    body["parameters"]["window_lft"] = 4
    err = v2_error(attnd.post(INFER, body), 400)
    assert "window_lft" in err, err


def test_an_mlserver_client_s_token_labels_are_read(attnd):
    """MLServer's StringCodec marks a BYTES input of strings
    "content_type": "str": a client encoding tokens_q and tokens_k with it
    got 400 'content_type must be "np"'. "str" (and "np") is read on a BYTES
    tokens input and echoed labels are the same; on a numeric input and in
    the request's parameters "str" is still refused."""
    q, k, v = [[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]], [[1.0], [2.0]]
    body = {"inputs": [tensor("q", shape_of(q), flat(q)), tensor("k", shape_of(k), flat(k)),
                       tensor("v", shape_of(v), flat(v)),
                       dict(tensor("tokens_q", [1], ["a"], "BYTES"),
                            parameters={"content_type": "str"}),
                       dict(tensor("tokens_k", [2], ["x", "y"], "BYTES"),
                            parameters={"content_type": "str"})],
            "outputs": [{"name": "output"}, {"name": "tokens_k"}]}
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    assert outputs(r.json())["tokens_k"]["data"] == ["x", "y"]
    body["inputs"][4]["parameters"]["content_type"] = "np"
    assert attnd.post(INFER, body).status == 200
    for where in (body["inputs"][1], body):
        where["parameters"] = {"content_type": "str"}
        err = v2_error(attnd.post(INFER, body), 400)
        assert 'content_type must be "np"' in err, err
        del where["parameters"]


# ---- metadata and health ----------------------------------------------------

def test_server_metadata(attnd):
    r = attnd.get("/v2")
    assert r.status == 200
    meta = r.json()
    assert meta["name"] == "attnd" and meta["version"]
    assert {"binary_tensor_data", "sequence"} <= set(meta["extensions"])


def test_server_metadata_says_sequence_ids_may_be_strings(attnd):
    """The sequence extension's text: a server whose sequence_id takes
    strings may report "sequence(string_id)" among its extensions, so that
    a client can tell before sending one; attnd takes them (README) and
    did not say so."""
    assert "sequence(string_id)" in attnd.get("/v2").json()["extensions"]
    body = {"parameters": {"sequence_id": "e333c95a-07fc-42d2-ab16-033b1a566ed5",
                           "sequence_start": True, "sequence_end": True},
            "inputs": [tensor("q", [1, 2], [1, 0]), tensor("k", [2, 2], [1, 0, 0, 1]),
                       tensor("v", [2, 1], [1, 2])]}
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    assert r.json()["parameters"]["sequence_id"] == body["parameters"]["sequence_id"]


def test_health(attnd):
    assert attnd.get("/v2/health/live").status == 200
    assert attnd.get("/v2/health/ready").status == 200
    assert attnd.get("/v2/health/ready").json() == {"ready": True}
    assert attnd.get("/v2/models/attention/ready").status == 200
    assert attnd.get("/v2/models/attention/versions/1/ready").status == 200


def test_readiness_while_draining_answers_its_documented_body():
    """While attnd drains, a readiness check on a connection opened before
    answers 503 with the body the OpenAPI document gives it ({"ready":false},
    {"name":"attention","ready":false}), as /v2/health/ready always did; the
    model's was refused as a request begun while draining, in the error
    shape ({"error":"the server is draining [draining]"})."""
    paths = {"/v2/health/ready": {"ready": False},
             "/v2/models/attention/ready": {"name": "attention", "ready": False},
             "/v2/models/attention/versions/1/ready": {"name": "attention", "ready": False}}
    with Attnd("--drain-timeout", "20") as a:
        for p, got in answers_while_draining(a, paths).items():
            assert got == (503, paths[p]), p


def answers_while_draining(a, paths):
    """{path: (status, JSON body)} of a GET of each path on a connection
    kept open from before a drain that a held-open upload keeps going;
    waits for attnd's exit (0) afterwards."""
    from attnd_proc import http_connection
    conns = {}
    for p in paths:
        c = http_connection(a.port, timeout=10)
        c.request("GET", "/v2/health/live")             # kept alive
        assert c.getresponse().read()
        conns[p] = c
    s = a.drain_held_open(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 100\r\n\r\n{\"q\":")
    got = {}
    for p in paths:
        conns[p].request("GET", p)
        r = conns[p].getresponse()
        got[p] = (r.status, json.loads(r.read()))
    s.close()
    assert a.wait(timeout=20) == 0
    return got


def test_metadata_while_draining_is_a_documented_503():
    """GET /v2, /v2/models/attention and its /versions/1 on a connection
    opened before the drain answer 503 in the protocol's error shape; the
    OpenAPI document listed no 503 for them (GET or HEAD)."""
    paths = {"/v2": "/v2", "/v2/models/attention": "/v2/models/attention",
             "/v2/models/attention/versions/1": "/v2/models/attention/versions/{version}"}
    with Attnd("--drain-timeout", "20") as a:
        doc = a.get("/v1/openapi.json").json()
        for p, got in answers_while_draining(a, paths).items():
            assert got == (503, {"error": "the server is draining [draining]"}), p
            for method in ("get", "head"):
                tmpl = paths[p]
                assert "503" in doc["paths"][tmpl][method]["responses"], (tmpl, method)


def test_model_metadata(attnd):
    r = attnd.get("/v2/models/attention")
    assert r.status == 200
    m = r.json()
    assert m["name"] == "attention" and "1" in m["versions"]
    ins = {t["name"]: t for t in m["inputs"]}
    assert set(ins) == {"q", "k", "v", "bias_q", "bias_k", "bias_v", "attn_bias", "mask",
                        "tokens_q", "tokens_k", "sink_logits", "positions_q",
                        "positions_k", "segments_q", "segments_k"}
    assert ins["tokens_k"]["datatype"] == "BYTES"
    assert ins["mask"]["datatype"] == "BOOL"
    assert ins["positions_q"]["datatype"] == "INT64"
    assert ins["q"]["datatype"] in ("FP32", "FP64")
    assert all(d == -1 for t in m["inputs"] for d in t["shape"])
    assert [o["name"] for o in m["outputs"]] == [
        "scores", "weights", "output", "qk", "lse", "entropy", "max_weight", "argmax", "mass",
        "top_k_indices", "top_k_values", "tokens_q", "tokens_k"]
    # every datatype published is one the OpenAPI document's tensors allow
    doc = attnd.get("/v1/openapi.json").json()
    allowed = set(doc["components"]["schemas"]["V2Tensor"]["properties"]["datatype"]["enum"])
    published = {dt for t in m["inputs"] for dt in t["parameters"]["datatypes"]}
    published |= {t["datatype"] for t in m["inputs"] + m["outputs"]}
    assert published <= allowed, published - allowed


def test_unknown_model_and_route(attnd):
    v2_error(attnd.get("/v2/models/bert"), 404)
    v2_error(attnd.get("/v2/models/attention/versions/7"), 404)
    v2_error(attnd.post("/v2/models/bert/infer", {"inputs": []}), 404)
    v2_error(attnd.get("/v2/nothing/here"), 404)
    r = attnd.get(INFER)
    v2_error(r, 405)
    assert r.headers["allow"] == "POST"


# ---- JSON inference ----------------------------------------------------------

Q = [[0.5, -1.0, 0.25, 2.0], [1.5, 0.0, -0.75, 0.5]]
K = [[1.0, 0.0, 0.5, -0.5], [0.0, 1.0, -1.0, 0.25], [-1.0, 0.5, 0.0, 1.0]]
V = [[1.0, 2.0], [3.0, -4.0], [0.5, 0.25]]


def test_json_infer_matches_reference(attnd):
    body = {"id": "abc-1", "inputs": [tensor("q", [2, 4], flat(Q)),
                                      tensor("k", [3, 4], K),          # nested is fine too
                                      tensor("v", [3, 2], flat(V))]}
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    resp = r.json()
    assert resp["id"] == "abc-1" and resp["model_name"] == "attention"
    outs = outputs(resp)
    assert set(outs) == {"scores", "weights", "output"}
    W, O = ref_attention(Q, K, V)
    assert outs["weights"]["shape"] == [2, 3] and outs["output"]["shape"] == [2, 2]
    assert outs["output"]["datatype"] == "FP64"
    for got, want in zip(outs["weights"]["data"], flat(W)):
        assert got == pytest.approx(want, abs=1e-12)
    for got, want in zip(outs["output"]["data"], flat(O)):
        assert got == pytest.approx(want, abs=1e-12)


OPTION_CASES = [
    ({"softmax": "softmax1"}, {"softmax": "softmax1"}),
    ({"softmax": "sink", "sink_logit": 0.5}, {"softmax": "sink", "sink_logit": 0.5}),
    ({"causal": True}, {"causal": True}),
    ({"causal": "top_left", "scale": 0.3}, {"causal": "top_left", "scale": 0.3}),
    ({"alibi": True}, {"alibi": True}),
    ({"rope_base": 100.0, "rope_pairs": "half"}, {"rope": {"base": 100.0, "pairs": "half"}}),
    ({"rope_pairs": "interleaved"}, {"rope": {"base": 10000, "pairs": "interleaved"}}),
]


@pytest.mark.parametrize("params,v1opts", OPTION_CASES)
def test_parameters_equal_v1(attnd, params, v1opts):
    """Each request parameter means exactly what the /v1/attention field means."""
    q3 = [Q, [[-x for x in row] for row in Q]]          # h=2
    k3, v3 = [K], [V]                                   # h_kv=1 (grouped)
    bias_k = [0.5, -0.25, 1.0, 0.0]
    v2body = {"parameters": params,
              "inputs": [tensor("q", [2, 2, 4], flat(q3)), tensor("k", [1, 3, 4], flat(k3)),
                         tensor("v", [1, 3, 2], flat(v3)), tensor("bias_k", [4], bias_k)]}
    r2 = attnd.post(INFER, v2body)
    assert r2.status == 200, r2
    v1body = dict(v1opts, q=q3, k=k3, v=v3, bias={"k": bias_k})
    r1 = attnd.post("/v1/attention", v1body)
    assert r1.status == 200, r1
    outs, ref = outputs(r2.json()), r1.json()
    for name in ("weights", "output"):
        assert outs[name]["shape"] == shape_of(ref[name])
        assert outs[name]["data"] == pytest.approx(flat(ref[name]), abs=1e-13)
    # masked scores are null in both
    assert [x is None for x in outs["scores"]["data"]] == [x is None for x in flat(ref["scores"])]


def test_ntk_on_two_rotated_dims_names_rope_scaling(attnd):
    """"ntk" over 2 rotated dims (d_k 2, no rope_dims) is refused at the
    parameter that asked for it, as /v1 names /rope/scaling."""
    q, k, v = [[1.0, 0.5]], [[1.0, 0.0], [0.0, 1.0]], [[1.0], [2.0]]
    r = attnd.post("/v1/attention", {"q": q, "k": k, "v": v, "rope": {
        "base": 10000, "scaling": {"type": "ntk", "factor": 2}}})
    assert r.status == 422 and r.json()["error"]["path"] == "/rope/scaling", r
    err = v2_error(attnd.post(INFER, {
        "parameters": {"rope_base": 10000, "rope_scaling": "ntk", "rope_factor": 2},
        "inputs": [tensor("q", [1, 2], flat(q)), tensor("k", [2, 2], flat(k)),
                   tensor("v", [2, 1], flat(v))]}), 400)
    assert err.endswith("[invalid_field at /parameters/rope_scaling]"), err


def test_attn_bias_mask_and_empty_rows(attnd):
    body = {"inputs": [tensor("q", [2, 4], flat(Q)), tensor("k", [3, 4], flat(K)),
                       tensor("v", [3, 2], flat(V)),
                       tensor("attn_bias", [2, 3], [0.0, None, 1.0, 0.0, 0.0, 0.0]),
                       tensor("mask", [2, 3], [True, True, True, False, False, False], "BOOL")],
            "outputs": [{"name": "weights"}]}
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    resp = r.json()
    w = outputs(resp)["weights"]["data"]
    assert list(outputs(resp)) == ["weights"]
    assert w[1] == 0.0 and w[3:] == [0.0, 0.0, 0.0]
    assert resp["parameters"]["empty_rows"] == 1
    body["parameters"] = {"empty_rows": "error"}
    v2_error(attnd.post(INFER, body), 400)


def test_fp32(attnd):
    body = {"inputs": [tensor("q", [2, 4], flat(Q), "FP32"), tensor("k", [3, 4], flat(K), "FP32"),
                       tensor("v", [3, 2], flat(V), "FP32")]}
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    outs = outputs(r.json())
    assert outs["output"]["datatype"] == "FP32"
    _, O = ref_attention(Q, K, V)
    assert outs["output"]["data"] == pytest.approx(flat(O), rel=1e-5, abs=1e-6)


def test_fp32_sink_logits_input_is_not_rounded_to_float32(attnd):
    """sink_logits are options, kept as doubles beside FP32 q (only an
    FP16/BF16 request rounds them): the input, the sink_logit parameter and
    /v1's sink_logit give the same bits, in JSON and binary alike."""
    q = [[0.5, -1.25, 0.75, 1.0], [1.5, 0.25, -0.5, 0.125]]
    k = [[1.0, 0.5, -0.25, 0.0], [-0.75, 1.25, 0.5, 1.0], [0.25, -1.0, 1.5, -0.5]]
    v = [[1.0, -0.5], [0.25, 0.75], [-1.25, 0.5]]
    sink = 1.1                                  # its float32 gives other bits
    sink32 = struct.unpack("<f", struct.pack("<f", sink))[0]
    names = ["weights", "output", "lse"]

    def v1(s):
        r = attnd.post("/v1/attention", {"q": q, "k": k, "v": v, "dtype": "float32",
                                         "softmax": "sink", "sink_logit": s, "return": names})
        assert r.status == 200, r
        return [flat(r.json()[n]) for n in names]

    want = v1([sink])
    assert want != v1([sink32])                 # the case tells the two apart
    qkv = [tensor("q", [2, 4], flat(q), "FP32"), tensor("k", [3, 4], flat(k), "FP32"),
           tensor("v", [3, 2], flat(v), "FP32")]
    outs = [{"name": n} for n in names]

    def v2(params, extra):
        r = attnd.post(INFER, {"parameters": dict(params, softmax="sink"),
                               "inputs": qkv + extra, "outputs": outs})
        assert r.status == 200, r
        return [outputs(r.json())[n]["data"] for n in names]

    assert v2({"sink_logit": sink}, []) == want
    assert v2({}, [tensor("sink_logits", [1], [sink])]) == want
    blob = struct.pack("<d", sink)
    header = {"parameters": {"softmax": "sink"}, "outputs": outs,
              "inputs": qkv + [{"name": "sink_logits", "shape": [1], "datatype": "FP64",
                                "parameters": {"binary_data_size": len(blob)}}]}
    body, n = binary_request(header, [blob])
    r = attnd.post(INFER, body, headers={HDR: str(n)})
    assert r.status == 200, r
    assert [outputs(r.json())[n]["data"] for n in names] == want


# ---- binary tensor data ------------------------------------------------------

def binary_request(header, blobs):
    """The body as the extension lays it out: JSON, then each blob in order."""
    js = json.dumps(header).encode()
    return js + b"".join(blobs), len(js)


def split_binary_response(r):
    n = int(r.headers[HDR.lower()])
    return json.loads(r.body[:n]), r.body[n:]


def test_binary_request_built_byte_by_byte(attnd):
    q, k, v = flat(Q), flat(K), flat(V)
    blobs = [struct.pack("<%dd" % len(q), *q), struct.pack("<%dd" % len(k), *k),
             struct.pack("<%dd" % len(v), *v)]
    header = {"id": "bin-1",
              "inputs": [{"name": "q", "shape": [2, 4], "datatype": "FP64",
                          "parameters": {"binary_data_size": len(blobs[0])}},
                         {"name": "k", "shape": [3, 4], "datatype": "FP64",
                          "parameters": {"binary_data_size": len(blobs[1])}},
                         {"name": "v", "shape": [3, 2], "datatype": "FP64",
                          "parameters": {"binary_data_size": len(blobs[2])}}],
              "outputs": [{"name": "output", "parameters": {"binary_data": True}},
                          {"name": "weights", "parameters": {"binary_data": False}}]}
    body, n = binary_request(header, blobs)
    assert len(body) == n + 8 * (8 + 12 + 6)
    r = attnd.post(INFER, body, headers={"Content-Type": "application/octet-stream", HDR: str(n)})
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/octet-stream"
    js, raw = split_binary_response(r)
    outs = outputs(js)
    assert js["id"] == "bin-1"
    assert outs["output"]["parameters"]["binary_data_size"] == 2 * 2 * 8 == len(raw)
    assert "data" not in outs["output"]
    out = struct.unpack("<4d", raw)
    W, O = ref_attention(Q, K, V)
    assert list(out) == pytest.approx(flat(O), abs=1e-12)
    assert outs["weights"]["data"] == pytest.approx(flat(W), abs=1e-12)


def test_binary_fp32_mixed_with_json_inputs(attnd):
    q = flat(Q)
    blob = struct.pack("<%df" % len(q), *q)
    header = {"parameters": {"binary_data_output": True},
              "inputs": [tensor("k", [3, 4], flat(K), "FP32"),
                         {"name": "q", "shape": [2, 4], "datatype": "FP32",
                          "parameters": {"binary_data_size": len(blob)}},
                         tensor("v", [3, 2], flat(V), "FP32")]}
    body, n = binary_request(header, [blob])
    # a JSON content type with the header length is accepted too
    r = attnd.post(INFER, body, headers={"Content-Type": "application/json", HDR: str(n)})
    assert r.status == 200, r
    js, raw = split_binary_response(r)
    sizes = [o["parameters"]["binary_data_size"] for o in js["outputs"]]
    assert [o["name"] for o in js["outputs"]] == ["scores", "weights", "output"]
    assert sizes == [6 * 4, 6 * 4, 4 * 4] and sum(sizes) == len(raw)
    out = struct.unpack("<4f", raw[48:])
    _, O = ref_attention(Q, K, V)
    assert list(out) == pytest.approx(flat(O), rel=1e-5, abs=1e-6)


def test_binary_mask_bool_bytes(attnd):
    mask = bytes([1, 0, 1, 0, 1, 1])
    header = {"inputs": [tensor("q", [2, 4], flat(Q)), tensor("k", [3, 4], flat(K)),
                         tensor("v", [3, 2], flat(V)),
                         {"name": "mask", "shape": [2, 3], "datatype": "BOOL",
                          "parameters": {"binary_data_size": 6}}],
              "outputs": [{"name": "weights"}]}
    body, n = binary_request(header, [mask])
    r = attnd.post(INFER, body, headers={"Content-Type": "application/octet-stream", HDR: str(n)})
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("application/json")
    w = outputs(r.json())["weights"]["data"]
    assert w[1] == 0.0 and w[0] + w[2] == pytest.approx(1.0)


@pytest.mark.parametrize("datatype,fmt", [("FP64", "d"), ("FP32", "f"), ("FP16", "e")])
def test_binary_outputs_carry_masked_scores_as_inf_and_undefined_lse_as_nan(attnd, datatype, fmt):
    # README and the OpenAPI infer answer say so; the JSON data has null
    body = {"inputs": [tensor("q", [2, 2], [1, 0, 0, 1], datatype),
                       tensor("k", [2, 2], [1, 0, 0, 1], datatype),
                       tensor("v", [2, 1], [1, 2], datatype),
                       tensor("mask", [2, 2], [True, False, False, False], "BOOL")],
            "outputs": [{"name": "scores", "parameters": {"binary_data": True}},
                        {"name": "lse", "parameters": {"binary_data": True}},
                        {"name": "output"}]}
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    js, raw = split_binary_response(r)
    size = struct.calcsize(fmt)
    scores = struct.unpack("<4" + fmt, raw[:4 * size])
    lse = struct.unpack("<2" + fmt, raw[4 * size:6 * size])
    assert scores[0] == pytest.approx(2 ** -0.5, rel=1e-3)
    assert scores[1] == scores[2] == scores[3] == -math.inf
    assert not math.isnan(lse[0]) and math.isnan(lse[1])
    for o in body["outputs"][:2]:
        o["parameters"]["binary_data"] = False
    outs = outputs(attnd.post(INFER, body).json())
    assert outs["scores"]["data"][1:] == [None, None, None] and outs["lse"]["data"][1] is None


def test_infer_needs_no_content_type(attnd):
    # README and the OpenAPI infer route: the body is read whatever its type
    body = json.dumps({"inputs": [tensor("q", [1, 2], [1, 0]), tensor("k", [2, 2], [1, 0, 0, 1]),
                                  tensor("v", [2, 1], [1, 2])]}).encode()
    for headers in ({}, {"Content-Type": "text/plain"},
                    {"Content-Type": "application/json; charset=latin1"}):
        r = attnd.post(INFER, body, headers=headers)
        assert r.status == 200, (headers, r)
        assert outputs(r.json())["output"]["data"] == pytest.approx([1.330238450673343])


def test_binary_errors(attnd):
    q = struct.pack("<8d", *flat(Q))
    header = {"inputs": [{"name": "q", "shape": [2, 4], "datatype": "FP64",
                          "parameters": {"binary_data_size": 64}},
                         tensor("k", [3, 4], flat(K)), tensor("v", [3, 2], flat(V))]}
    body, n = binary_request(header, [q])
    hdrs = {"Content-Type": "application/octet-stream", HDR: str(n)}
    assert attnd.post(INFER, body, headers=hdrs).status == 200
    assert "/inputs/0" in v2_error(attnd.post(INFER, body[:-1], headers=hdrs), 400)
    v2_error(attnd.post(INFER, body + b"\0", headers=hdrs), 400)             # unclaimed byte
    v2_error(attnd.post(INFER, body, headers=dict(hdrs, **{HDR: str(len(body) + 1)})), 400)
    v2_error(attnd.post(INFER, body, headers=dict(hdrs, **{HDR: "12x"})), 400)
    v2_error(attnd.post(INFER, body, headers=dict(hdrs, **{HDR: "+" + str(n)})), 400)  # 1*DIGIT
    assert attnd.post(INFER, body, headers=dict(hdrs, **{HDR: " %d " % n})).status == 200  # OWS
    nan = struct.pack("<8d", float("nan"), *flat(Q)[1:])
    v2_error(attnd.post(INFER, binary_request(header, [nan])[0], headers=hdrs), 400)
    header["inputs"][0]["parameters"]["binary_data_size"] = 60            # not 8 * 8
    body, n = binary_request(header, [q[:60]])
    assert "binary_data_size" in v2_error(
        attnd.post(INFER, body, headers={"Content-Type": "application/octet-stream", HDR: str(n)}), 400)


# ---- sequences ----------------------------------------------------------------

def seq_body(seq_id, q, k=None, v=None, **params):
    inputs = [tensor("q", shape_of(q), flat(q))]
    if k is not None:
        inputs += [tensor("k", shape_of(k), flat(k)), tensor("v", shape_of(v), flat(v))]
    return {"parameters": dict(params, sequence_id=seq_id), "inputs": inputs}


@pytest.mark.parametrize("seq_id", [7, "chat-42"])
def test_sequence_decode_equals_stateless(attnd, seq_id):
    rows_k = K + [[0.25, 0.25, -1.0, 0.5]]
    rows_v = V + [[2.0, 2.0]]
    r = attnd.post(INFER, seq_body(seq_id, Q[:1], K, V, sequence_start=True, causal=True,
                                   softmax="softmax1"))
    assert r.status == 200, r
    p = r.json()["parameters"]
    assert p["sequence_id"] == seq_id and p["sequence_length"] == 3
    sid = p["session_id"]
    info = attnd.get(f"/v1/sessions/{sid}")
    assert info.status == 200 and info.json()["length"] == 3
    r = attnd.post(INFER, seq_body(seq_id, Q[1:], rows_k[3:], rows_v[3:], causal=True))
    assert r.status == 200, r
    assert r.json()["parameters"]["sequence_length"] == 4
    dec = outputs(r.json())
    full = attnd.post(INFER, {"parameters": {"causal": True, "softmax": "softmax1"},
                              "inputs": [tensor("q", [1, 4], Q[1]), tensor("k", [4, 4], flat(rows_k)),
                                         tensor("v", [4, 2], flat(rows_v))]})
    assert full.status == 200, full
    ref = outputs(full.json())
    assert dec["output"]["data"] == pytest.approx(ref["output"]["data"], abs=1e-14)
    # a query alone attends the cache; sequence_end deletes the session after
    r = attnd.post(INFER, seq_body(seq_id, Q[1:], sequence_end=True, causal=True))
    assert r.status == 200, r
    assert outputs(r.json())["output"]["data"] == pytest.approx(ref["output"]["data"], abs=1e-14)
    assert attnd.get(f"/v1/sessions/{sid}").status == 404
    v2_error(attnd.post(INFER, seq_body(seq_id, Q[1:])), 404)


def test_sequence_continues_a_v1_session(attnd):
    r = attnd.post("/v1/sessions", {"d_k": 4, "d_v": 2})
    assert r.status == 201, r
    sid = r.json()["id"]
    assert attnd.post(f"/v1/sessions/{sid}/kv", {"k": K, "v": V}).status == 200
    r = attnd.post(INFER, seq_body(sid, Q))
    assert r.status == 200, r
    _, O = ref_attention(Q, K, V)
    assert outputs(r.json())["output"]["data"] == pytest.approx(flat(O), abs=1e-12)
    assert r.json()["parameters"]["session_id"] == sid
    attnd.request("DELETE", f"/v1/sessions/{sid}")


def test_sequence_errors(attnd):
    v2_error(attnd.post(INFER, seq_body(99, Q)), 404)                      # never started
    v2_error(attnd.post(INFER, seq_body(5, Q, sequence_start=True)), 400)  # no k, v
    v2_error(attnd.post(INFER, seq_body(-3, Q, K, V)), 400)                # bad id
    body = seq_body(0, Q, K, V, sequence_start=True)
    v2_error(attnd.post(INFER, body), 400)                                 # start without id
    assert attnd.post(INFER, seq_body("e1", Q, K, V, sequence_start=True)).status == 200
    err = v2_error(attnd.post(INFER, seq_body("e1", Q, scale=2.0)), 400)    # fixed at start
    assert "/parameters/scale" in err and "is 0.5" in err                  # the sequence's
    r = attnd.post(INFER, seq_body("e1", Q, scale=0.5, softmax="standard"))  # the same again
    assert r.status == 200, r
    # a rolling sequence the default max_tokens (32768) could not keep rolling
    err = v2_error(attnd.post(INFER, seq_body("e2", Q, K, V, sequence_start=True, causal=True,
                                              window_left=40000)), 400)
    assert "[invalid_field at /parameters/window_left]" in err and "40064" in err, err
    assert "max_tokens must" not in err and "window_left of at most 32704" in err, err
    v2_error(attnd.post(INFER, seq_body("e1", [[1.0, 2.0]])), 400)         # wrong d_k
    assert attnd.post(INFER, seq_body("e1", Q, sequence_end=True)).status == 200


def test_sequences_outlive_restarts(tmp_path):
    """A sequence lives in the session named after its id, which --state-dir
    keeps: after SIGTERM and after kill -9 it goes on where it was (before,
    the map from id to session was in memory and the sequence was lost)."""
    sd = str(tmp_path / "state")
    rows_k = K + [[0.25, 0.25, -1.0, 0.5]]
    rows_v = V + [[2.0, 2.0]]
    ids = [11, "chat 42", "x"]
    with Attnd("--state-dir", sd, "--fsync", "always") as d:
        for i in ids:
            r = d.post(INFER, seq_body(i, Q[:1], K, V, sequence_start=True, causal=True))
            assert r.status == 200, r
        sids = {i: d.post(INFER, seq_body(i, Q[:1])).json()["parameters"]["session_id"]
                for i in ids}
    assert sids[11].endswith("v2i11") and sids["x"].endswith("v2sx")
    with Attnd("--state-dir", sd, "--fsync", "always") as d:     # after SIGTERM
        r = d.post(INFER, seq_body(11, Q[1:], rows_k[3:], rows_v[3:], causal=True))
        assert r.status == 200, r
        p = r.json()["parameters"]
        assert p["sequence_length"] == 4 and p["session_id"] == sids[11]
        full = d.post(INFER, {"parameters": {"causal": True},
                              "inputs": [tensor("q", [1, 4], Q[1]), tensor("k", [4, 4], flat(rows_k)),
                                         tensor("v", [4, 2], flat(rows_v))]})
        assert outputs(r.json())["output"]["data"] == \
            pytest.approx(outputs(full.json())["output"]["data"], abs=1e-14)
        assert d.post(INFER, seq_body("x", Q[:1], sequence_end=True)).status == 200
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    with Attnd("--state-dir", sd, "--fsync", "always") as d:     # after kill -9
        r = d.post(INFER, seq_body("chat 42", Q[:1], rows_k[3:], rows_v[3:]))
        assert r.status == 200 and r.json()["parameters"]["sequence_length"] == 4, r
        assert d.post(INFER, seq_body(11, Q[:1])).json()["parameters"]["sequence_length"] == 4
        v2_error(d.post(INFER, seq_body("x", Q[:1])), 404)            # ended before
        r = d.post(INFER, seq_body(11, Q[:1], K[:1], V[:1], sequence_start=True))
        assert r.status == 200 and r.json()["parameters"]["sequence_length"] == 1, r
        assert r.json()["parameters"]["session_id"] == sids[11]


def _metric(d, name):
    for line in d.get("/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise AssertionError(f"{name} not in /metrics")


def _ignore_sigxfsz():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past RLIMIT_FSIZE: EFBIG


def test_sequence_end_is_one_journal_record(tmp_path):
    """A sequence_end request that appends rows is journaled as the
    session's DELETE alone, so it is applied whole or not at all. Before, it
    wrote the APPEND and then the DELETE: a crash between them brought the
    sequence back after a restart with the rows of a request that ended it,
    and a DELETE that could not be written (the disk full after the APPEND)
    still answered 200 with the sequence not ended."""
    sd = str(tmp_path / "state")
    rows_k = K + [[0.25, 0.25, -1.0, 0.5]]
    rows_v = V + [[2.0, 2.0]]
    flags = ("--state-dir", sd, "--fsync", "always", "--snapshot-min-bytes", "1g")

    def room(d, extra):             # the journal may grow by `extra` bytes at most
        size = _metric(d, "attnd_journal_bytes")
        resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (size + extra, resource.RLIM_INFINITY))
        return size

    with Attnd(*flags, preexec=_ignore_sigxfsz) as d:
        for name in ("a", "b"):
            r = d.post(INFER, seq_body(name, Q[:1], K, V, sequence_start=True, causal=True))
            assert r.status == 200, r
        # the bytes of one row's APPEND record (ids of the same length)
        size = _metric(d, "attnd_journal_bytes")
        assert d.post(INFER, seq_body("b", Q[1:], rows_k[3:], rows_v[3:], causal=True)).status == 200
        append = _metric(d, "attnd_journal_bytes") - size
        # no room for any record: refused whole, the sequence as it was
        size = room(d, 8)
        err = v2_error(d.post(INFER, seq_body("a", Q[1:], rows_k[3:], rows_v[3:],
                                              sequence_end=True, causal=True)), 503)
        assert "storage_unavailable" in err, err
        r = d.post(INFER, seq_body("a", Q[:1], causal=True))
        assert r.status == 200 and r.json()["parameters"]["sequence_length"] == 3, r
        assert _metric(d, "attnd_journal_bytes") == size
        # room for the APPEND's record and little more: answered, and ended
        room(d, append + 8)
        records = _metric(d, "attnd_journal_records_total")
        r = d.post(INFER, seq_body("a", Q[1:], rows_k[3:], rows_v[3:], sequence_end=True,
                                   causal=True))
        assert r.status == 200 and r.json()["parameters"]["sequence_length"] == 4, r
        v2_error(d.post(INFER, seq_body("a", Q[:1])), 404)
        assert _metric(d, "attnd_journal_records_total") == records + 1
        room(d, 1 << 30)
        # a start that ends at once only removes the earlier sequence
        records = _metric(d, "attnd_journal_records_total")
        r = d.post(INFER, seq_body("b", Q[:1], K, V, sequence_start=True, sequence_end=True,
                                   causal=True))
        assert r.status == 200, r
        assert _metric(d, "attnd_journal_records_total") == records + 1
        v2_error(d.post(INFER, seq_body("b", Q[:1])), 404)
        r = d.post(INFER, seq_body("c", Q[:1], K, V, sequence_start=True, sequence_end=True))
        assert r.status == 200, r
        assert _metric(d, "attnd_journal_records_total") == records + 1   # nothing to end
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    with Attnd(*flags) as d:
        for name in ("a", "b", "c"):
            v2_error(d.post(INFER, seq_body(name, Q[:1])), 404)

# ---- errors ----------------------------------------------------------------------

@pytest.mark.parametrize("body,where", [
    ({"inputs": [tensor("q", [2, 4], flat(Q), "INT32")]}, "/inputs/0/datatype"),
    ({"inputs": [tensor("q", [2, 4], flat(Q)[:7]), tensor("k", [3, 4], flat(K)),
                 tensor("v", [3, 2], flat(V))]}, "/inputs/0/data"),
    ({"inputs": [tensor("q", [2, 4], flat(Q)), tensor("k", [3, 4], flat(K)),
                 tensor("v", [2, 2], flat(V)[:4])]}, "/inputs/2/shape"),
    ({"inputs": [tensor("query", [2, 4], flat(Q))]}, "/inputs/0/name"),
    ({"inputs": [tensor("q", [2, 4], flat(Q)), tensor("k", [3, 4], flat(K)),
                 tensor("v", [3, 2], flat(V))], "parameters": {"softmax": "hard"}},
     "/parameters/softmax"),
    ({"inputs": [tensor("q", [2, 4], flat(Q)), tensor("k", [3, 4], flat(K)),
                 tensor("v", [3, 2], flat(V))], "outputs": [{"name": "logits"}]},
     "/outputs/0/name"),
    ({"inputs": [tensor("q", [2, 4], flat(Q)), tensor("k", [3, 4], flat(K)),
                 tensor("v", [3, 2], flat(V)), tensor("mask", [2, 3], [1] * 6, "BOOL")]},
     "/inputs/3/data/0"),
    ({"inputs": []}, "/inputs"),
    ({"inputs": [tensor("q", [2, 4], flat(Q))], "extra": 1}, "/extra"),
])
def test_invalid_arguments_are_400(attnd, body, where):
    assert where in v2_error(attnd.post(INFER, body), 400)


def test_invalid_json_is_400(attnd):
    v2_error(attnd.post(INFER, b'{"inputs": [', headers={"Content-Type": "application/json"}), 400)
    v2_error(attnd.post(INFER, b'{"inputs": 1, "inputs": 2}',
                        headers={"Content-Type": "application/json"}), 400)


def test_outputs_come_back_in_the_order_asked(attnd):
    """As Triton does: the response lists (and lays out the binary data of)
    the outputs in the order of the request's "outputs"."""
    body = {"inputs": [tensor("q", [2, 4], flat(Q)), tensor("k", [3, 4], flat(K)),
                       tensor("v", [3, 2], flat(V))],
            "outputs": [{"name": "output"}, {"name": "scores"}]}
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    assert [o["name"] for o in r.json()["outputs"]] == ["output", "scores"]
    body["outputs"] = [{"name": "weights", "parameters": {"binary_data": True}},
                       {"name": "output", "parameters": {"binary_data": True}}]
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    js, raw = split_binary_response(r)
    assert [o["name"] for o in js["outputs"]] == ["weights", "output"]
    W, O = ref_attention(Q, K, V)
    got = struct.unpack("<10d", raw)
    assert list(got[:6]) == pytest.approx(flat(W), abs=1e-12)
    assert list(got[6:]) == pytest.approx(flat(O), abs=1e-12)
    body["outputs"] = [{"name": "lse"}, {"name": "output"}, {"name": "qk"}]
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    assert [o["name"] for o in r.json()["outputs"]] == ["lse", "output", "qk"]



def test_fp32_qk_beside_int64_outputs_of_an_odd_row_count(attnd):
    """An FP32 qk of odd rows x keys (1 x 1, 1 x 3) asked with argmax and
    top_k_indices: those INT64 outputs followed it 4 bytes off in one
    buffer, a misaligned store that the sanitizer build (make asan) stopped
    the server on; they answer as in a float64 request."""
    for L in (1, 3):
        k = [1.0, 0.0] * L
        want = None
        for dt in ("FP64", "FP32"):
            body = {"inputs": [tensor("q", [1, 2], [1, 0], dt), tensor("k", [L, 2], k, dt),
                               tensor("v", [L, 1], list(range(L)), dt)],
                    "parameters": {"weights_top_k": 2},
                    "outputs": [{"name": "qk"}, {"name": "argmax"},
                                {"name": "top_k_indices", "parameters": {"binary_data": True}}]}
            r = attnd.post(INFER, body)
            assert r.status == 200, r
            js, raw = split_binary_response(r)
            outs = outputs(js)
            got = (outs["qk"]["data"], outs["argmax"]["data"], struct.unpack("<2q", raw))
            assert got == (want or got)
            want = got
        assert want == ([1] * L, [0], (0, 1 if L > 1 else -1))


def test_a_long_request_id_is_echoed(attnd):
    """The response echoes "id" whatever its length: an id past about 4000
    bytes (or 700 control characters, each escaped in 6) made the smallest
    inference 400 "response would exceed the size limit", a limit no
    documentation names, as the response's room did not count the id."""
    for rid in ("r" * 5000, "\u0001" * 1000, "é" * 3000, "x" * 70000):
        for binary in (False, True):
            body = {"id": rid, "inputs": [tensor("q", [1, 2], [1, 0]),
                                          tensor("k", [2, 2], [1, 0, 0, 1]),
                                          tensor("v", [2, 1], [1, 2])],
                    "outputs": [{"name": "output", "parameters": {"binary_data": binary}}]}
            r = attnd.post(INFER, body)
            assert r.status == 200, (len(rid), binary, r)
            js = split_binary_response(r)[0] if binary else r.json()
            assert js["id"] == rid


def test_priority_takes_every_uint64(attnd):
    """Triton's priority is a uint64, and the refusal said "expected an
    integer in 0..18446744073709551615", yet 2^63 to 2^64-1 (which jansson
    reads as reals) were refused with it; they are read from their digits,
    as sequence_id's are."""
    body = {"inputs": [tensor("q", [1, 2], [1, 0]), tensor("k", [2, 2], [1, 0, 0, 1]),
                       tensor("v", [2, 1], [1, 2])], "outputs": [{"name": "output"}]}
    # integral reals past 2^53 (1e+19, 9007199254740994.0) are in the range too
    for level in (0, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 3.0, 1e19, 9007199254740994.0):
        r = attnd.post(INFER, dict(body, parameters={"priority": level}))
        assert r.status == 200, (level, r)
    for level in (2 ** 64, float(2 ** 64), -1, 1.5):
        err = v2_error(attnd.post(INFER, dict(body, parameters={"priority": level})), 400)
        assert "0..18446744073709551615 [invalid_field at /parameters/priority]" in err

def test_an_empty_outputs_list_asks_for_every_output(attnd):
    """Triton and KServe read "outputs": [] as no output named, so every
    output: it was 400 "outputs must be a non-empty array"."""
    body = {"inputs": [tensor("q", [2, 4], flat(Q)), tensor("k", [3, 4], flat(K)),
                       tensor("v", [3, 2], flat(V))]}
    every = attnd.post(INFER, body)
    assert every.status == 200, every
    body["outputs"] = []
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    assert r.json()["outputs"] == every.json()["outputs"]
    body["outputs"] = {}
    assert "/outputs" in v2_error(attnd.post(INFER, body), 400)


def test_model_metadata_lists_what_infer_accepts(attnd):
    """Every datatype and rank the metadata lists for q, k and v is
    accepted by infer, and a datatype it does not list is refused."""
    ins = {t["name"]: t for t in attnd.get("/v2/models/attention").json()["inputs"]}
    for t in ins.values():
        assert t["datatype"] == t["parameters"]["datatypes"][0]
        assert len(t["shape"]) == max(t["parameters"]["ranks"])
    assert ins["mask"]["parameters"]["datatypes"] == ["BOOL"]
    spec = ins["q"]["parameters"]
    assert ins["k"]["parameters"] == spec == ins["v"]["parameters"]
    for dt in spec["datatypes"]:
        for rank in spec["ranks"]:
            lead = [1] * (rank - 2)
            body = {"inputs": [tensor("q", lead + [2, 4], flat(Q), dt),
                               tensor("k", lead + [3, 4], flat(K), dt),
                               tensor("v", lead + [3, 2], flat(V), dt)],
                    "outputs": [{"name": "output"}]}
            r = attnd.post(INFER, body)
            assert r.status == 200, (dt, rank, r)
            assert r.json()["outputs"][0]["shape"] == lead + [2, 2]
    body = {"inputs": [tensor("q", [2, 4], flat(Q), "INT8"), tensor("k", [3, 4], flat(K)),
                       tensor("v", [3, 2], flat(V))]}
    assert "FP32" in v2_error(attnd.post(INFER, body), 400)


def test_model_metadata_output_ranks_are_the_largest_infer_answers(attnd):
    """Each output's metadata shape has as many -1 as the largest rank infer
    gives it (as for the inputs): outputs keep the rank of q, so a rank-4
    request's qk and top-k are rank 4 and its lse and stats rank 3."""
    meta = {t["name"]: len(t["shape"]) for t in attnd.get("/v2/models/attention").json()["outputs"]}
    body = {"inputs": [tensor("q", [1, 1, 2, 4], flat(Q)), tensor("k", [1, 1, 3, 4], flat(K)),
                       tensor("v", [1, 1, 3, 2], flat(V)),
                       tensor("tokens_q", [2], ["a", "b"], "BYTES"),
                       tensor("tokens_k", [3], ["x", "y", "z"], "BYTES")],
            "outputs": [{"name": n} for n in meta], "parameters": {"weights_top_k": 2}}
    r = attnd.post(INFER, body)
    assert r.status == 200, r
    got = {o["name"]: len(o["shape"]) for o in r.json()["outputs"]}
    assert got == meta


@pytest.mark.parametrize("shape", [[2, 3], [3, 2, 3], [1, 3, 2, 3], [2, 3, 2, 3],
                                   [2, 1, 2, 3], [1, 1, 2, 3]])
def test_mask_and_bias_broadcast_like_v1(attnd, shape):
    """attn_bias and mask broadcast from [n,L], [h,n,L] or [B,h,n,L] with 1
    for B or h, PyTorch's [B,1,n,L] included: the output equals /v1's with
    the matrix spelled out for every batch element and head."""
    B, H, n, L, d = 2, 3, 2, 3, 2
    q = [[[[(i * 7 + j * 3 + t) % 5 * 0.5 - 1 for t in range(d)] for j in range(n)]
          for i in range(H)] for _ in range(B)]
    k = [[[[(j * 5 + t * 2 + b) % 7 * 0.25 - 0.75 for t in range(d)] for j in range(L)]]
         for b in range(B)]
    v = [[[[(j + t + b) % 4 - 1.5 for t in range(d)] for j in range(L)]] for b in range(B)]
    count = math.prod(shape)
    mask = [i % 5 != 1 for i in range(count)]
    bias = [(i % 7) / 4 - 0.5 for i in range(count)]
    hh = shape[-3] if len(shape) >= 3 else 1
    bb = shape[0] if len(shape) == 4 else 1

    def spelled(vals):
        return [[[[vals[((0 if bb == 1 else b) * hh + (0 if hh == 1 else h)) * n * L + i * L + j]
                   for j in range(L)] for i in range(n)] for h in range(H)] for b in range(B)]

    for name, vals, dt in (("mask", mask, "BOOL"), ("attn_bias", bias, "FP64")):
        r2 = attnd.post(INFER, {"inputs": [
            tensor("q", [B, H, n, d], flat(q)), tensor("k", [B, 1, L, d], flat(k)),
            tensor("v", [B, 1, L, d], flat(v)), tensor(name, shape, vals, dt)]})
        assert r2.status == 200, r2
        r1 = attnd.post("/v1/attention", {"q": q, "k": k, "v": v, name: spelled(vals)})
        assert r1.status == 200, r1
        assert outputs(r2.json())["output"]["data"] == flat(r1.json()["output"]), (name, shape)



def test_json_data_is_read_as_its_declared_datatype(attnd):
    """JSON data holds numbers of the input's declared datatype, as its
    binary bytes would: an FP32 or FP16 k beside FP64 q is that type's
    number (the same answer as its bytes), a value past the type's range is
    400, and so is an INT32 past 32 bits."""
    q, kf, v = [0.3, -1.1], [1.1, 0.7, -0.3, 2.2], [1.0, 2.0]
    outs = [{"name": "output"}]

    def infer(k_dtype, k_data=kf, extra=(), params=None):
        body = {"inputs": [tensor("q", [1, 2], q), tensor("k", [2, 2], k_data, k_dtype),
                           tensor("v", [2, 1], v), *extra], "outputs": outs}
        if params:
            body["parameters"] = params
        return attnd.post(INFER, body)

    def out(r):
        assert r.status == 200, r
        return outputs(r.json())["output"]["data"]

    for dt, fmt in (("FP32", "<4f"), ("FP16", "<4e")):
        kb = struct.pack(fmt, *kf)
        header = {"inputs": [tensor("q", [1, 2], q),
                             {"name": "k", "shape": [2, 2], "datatype": dt,
                              "parameters": {"binary_data_size": len(kb)}},
                             tensor("v", [2, 1], v)], "outputs": outs}
        body, n = binary_request(header, [kb])
        binary = out(attnd.post(INFER, body, headers={
            "Content-Type": "application/octet-stream", HDR: str(n)}))
        as_type = list(struct.unpack(fmt, kb))          # kf as numbers of dt
        assert as_type != kf
        assert out(infer(dt)) == binary == out(infer("FP64", as_type)), dt
    msg = v2_error(infer("FP32", [1e300, 0, 0, 0]), 400)
    assert "FP32" in msg and "/inputs/1/data/0" in msg, msg
    msg = v2_error(infer("FP16", [70000.0, 0, 0, 0]), 400)
    assert "FP16" in msg and "/inputs/1/data/0" in msg, msg
    pos = tensor("positions_k", [2], [0, 2 ** 31], "INT32")
    msg = v2_error(infer("FP64", kf, [pos], {"rope_base": 10000.0}), 400)
    assert "INT32" in msg and "/inputs/3/data/1" in msg, msg
    pos = tensor("positions_k", [2], [0, 2 ** 31], "INT64")
    assert infer("FP64", kf, [pos], {"rope_base": 10000.0}).status == 200


def test_sequence_refused_for_room_says_which_limit():
    """A sequence_start past --max-sessions (as when starts race for the
    last slot) and a sequence step past its max_tokens name the limit, as
    /v1 does: before, both were a bare "capacity exhausted" / "session full"."""
    with Attnd("--max-sessions", "1", "--max-tokens", "4") as d:
        r = d.post("/v1/sessions", {"d_k": 4, "d_v": 2})
        assert r.status == 201, r
        sid = r.json()["id"]
        r = d.post(INFER, seq_body(31, Q[:1], K, V, sequence_start=True))
        err = v2_error(r, 503)
        assert "[capacity_exhausted]" in err and "--max-sessions 1" in err, err
        assert r.headers.get("retry-after"), r.headers
        assert d.get("/v1/sessions/v2i31").status == 404
        assert d.request("DELETE", f"/v1/sessions/{sid}").status == 204
        r = d.post(INFER, seq_body(31, Q[:1], K, V, sequence_start=True))
        assert r.status == 200, r
        err = v2_error(d.post(INFER, seq_body(31, Q[:1], K[:2], V[:2])), 400)
        assert "[session_full]" in err and "holds 3 rows" in err and "max_tokens of 4" in err, err
        assert d.get("/v1/sessions/v2i31").json()["length"] == 3


def test_positions_and_segments_out_of_range_name_their_element(attnd):
    """A position below 0 or a segment id past 2^53 was refused at the whole
    /inputs/<i>/data with a flat element number; the path now reaches the
    element, as /v1's does (/positions/q/1), and the message names it by
    its indices, nested data or flat, and by its indices alone when the
    data came as binary."""
    def body(name, shape, data, L=3):
        k = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]][:L]
        return {"inputs": [tensor("q", [2, 2], [[1.0, 0.0], [0.0, 1.0]]),
                           tensor("k", [L, 2], k), tensor("v", [L, 1], [[1.0]] * L),
                           tensor(name, shape, data, "INT64")]
                + ([tensor("segments_k", [L], [0] * L, "INT64")] if name == "segments_q" else [])}
    cases = [
        ("positions_q", [2], [0, -1], "/inputs/3/data/1", "positions_q[1] is -1"),
        ("positions_k", [1, 3], [[0, 1, -5]], "/inputs/3/data/0/2", "positions_k[0][2] is -5"),
        ("positions_k", [1, 3], [0, -2, 1], "/inputs/3/data/1", "positions_k[0][1] is -2"),
        ("segments_q", [2], [0, 9007199254740993], "/inputs/3/data/1",
         "segments_q[1] is 9007199254740993: expected an integer of magnitude at most 2^53"),
    ]
    for name, shape, data, path, said in cases:
        err = v2_error(attnd.post(INFER, body(name, shape, data)), 400)
        assert said in err and err.endswith("[invalid_field at %s]" % path), err
    # binary data: no JSON element to point at, the input and its indices
    blob = struct.pack("<2q", 0, -3)
    header = body("positions_q", [2], None)
    del header["inputs"][3]["data"]
    header["inputs"][3]["parameters"] = {"binary_data_size": len(blob)}
    raw, n = binary_request(header, [blob])
    err = v2_error(attnd.post(INFER, raw, headers={HDR: str(n)}), 400)
    assert "positions_q[1] is -3" in err and err.endswith("[invalid_field at /inputs/3]"), err


def test_rolling_sequence_past_max_tokens_advises_what_v2_can_send():
    """A rolling start whose window holds --max-tokens rows or more advised
    "max_tokens must be at least N", a /v1 field no v2 request can send:
    it now names what a v2 client can change, the largest window_left with
    its window_sinks (or the most window_sinks), and that advice starts."""
    with Attnd("--max-tokens", "200") as d:
        cases = [({"window_left": 150}, "send a window_left of at most 136 with these "
                  "window_sinks", {"window_left": 136}),
                 ({"window_left": 10, "window_sinks": 100}, "send a window_left of at most 8",
                  {"window_left": 8, "window_sinks": 100}),
                 ({"window_left": 0, "window_sinks": 150}, "send window_sinks of at most 128",
                  {"window_left": 0, "window_sinks": 128})]
        for i, (window, advice, fits) in enumerate(cases):
            err = v2_error(d.post(INFER, seq_body("r%d" % i, Q, K, V, sequence_start=True,
                                                  causal=True, **window)), 400)
            assert "max_tokens must" not in err and advice in err, err
            assert "this replica's --max-tokens is 200" in err, err
            assert err.endswith("[invalid_field at /parameters/window_left]"), err
            r = d.post(INFER, seq_body("r%d" % i, Q, K, V, sequence_start=True, causal=True,
                                       **fits))
            assert r.status == 200, (fits, r)
