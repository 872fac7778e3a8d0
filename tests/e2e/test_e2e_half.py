"""tests/e2e/test_e2e_half.py — float16 and bfloat16 against the real daemon:
/v1/attention (nested arrays and base64, in and out) checked against a
Python reference on the rounded inputs, every printed number a value of the
dtype in its shortest text, the decimal tie that float64 alone would round
wrong, sessions with each kv_dtype (bytes as stored, results within the
quantisation bound), and OIP v2 FP16/BF16 with binary bodies built byte by
byte from the protocol's description (struct's IEEE half 'e' format).
"""
import base64
import json
import math
import struct

import pytest

HDR = "Inference-Header-Content-Length"
INFER = "/v2/models/attention/infer"
JSON = {"Content-Type": "application/json"}


def f16(x):
    """x rounded to float16 (struct rounds to nearest even; OverflowError past it)."""
    return struct.unpack("<e", struct.pack("<e", x))[0]


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def bf16(x):
    """x (exact as float32 in these tests) rounded to bfloat16, ties to even."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", u))[0]


def shortest_f16(v):
    """Fewest significant digits that read back (through float16) to v."""
    for p in range(1, 7):
        if f16(float("%.*e" % (p - 1, v))) == v:
            return p
    raise AssertionError(v)


def sig_digits(text):
    mant = text.lstrip("-").split("e")[0].replace(".", "").lstrip("0").rstrip("0")
    return max(len(mant), 1)


def attention_ref(q, k, v, scale=None):
    d = len(q[0])
    scale = scale or 1 / math.sqrt(d)
    S, W, O = [], [], []
    for qi in q:
        s = [scale * sum(a * b for a, b in zip(qi, kj)) for kj in k]
        m = max(s)
        e = [math.exp(x - m) for x in s]
        z = sum(e)
        w = [x / z for x in e]
        S.append(s)
        W.append(w)
        O.append([sum(w[j] * v[j][c] for j in range(len(k))) for c in range(len(v[0]))])
    return S, W, O


Q = [[0.5, -1.25, 2.0, 0.125], [1.5, 0.25, -0.75, 1.0]]
K = [[1.0, 0.5, -0.5, 2.0], [-1.0, 1.5, 0.25, 0.5], [0.75, -2.0, 1.0, -0.25]]
V = [[1.0, 2.5], [-0.5, 0.75], [3.0, -1.5]]


def numbers(m):
    return [x for row in m for x in row]


def test_float16_json_matches_reference_and_prints_shortest(attnd):
    r = attnd.post("/v1/attention", json.dumps({"q": Q, "k": K, "v": V, "dtype": "float16"}),
                   headers=JSON)
    assert r.status == 200, r
    text = r.body.decode()
    js = r.json()
    assert js["meta"]["dtype"] == "float16"
    S, W, O = attention_ref(Q, K, V)
    for name, ref in (("scores", S), ("weights", W), ("output", O)):
        got = [f16(g) for g in numbers(js[name])]     # the float16 each text reads as
        want = [f16(x) for x in numbers(ref)]
        for g, w in zip(got, want):
            assert abs(g - w) <= 2 * 2.0 ** (math.floor(math.log2(abs(w))) - 10) + 1e-7
    # every number is printed with the fewest digits that read back
    body = text.split('"meta"')[0]
    for tok in body.replace("[", " ").replace("]", " ").replace(",", " ").split():
        if tok[0] in "-0123456789":
            v = f16(float(tok))
            assert sig_digits(tok) == shortest_f16(v), tok


def test_bfloat16_base64_in_and_out(attnd):
    q = [bf16(x) for x in numbers(Q)]
    qb = b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", x))[0] >> 16)
                  for x in q)
    body = {"q": {"shape": [2, 4], "dtype": "bfloat16", "data": base64.b64encode(qb).decode()},
            "k": K, "v": V, "dtype": "bfloat16", "encoding": "base64"}
    r = attnd.post("/v1/attention", json.dumps(body), headers=JSON)
    assert r.status == 200, r
    js = r.json()
    out = js["output"]
    assert out["dtype"] == "bfloat16" and out["shape"] == [2, 2]
    raw = base64.b64decode(out["data"])
    assert len(raw) == 2 * 4
    got = [struct.unpack("<f", struct.pack("<I", h << 16))[0]
           for h in struct.unpack("<4H", raw)]
    _, _, O = attention_ref(Q, K, V)
    for g, w in zip(got, numbers(O)):
        assert bf16(g) == g and abs(g - w) <= 2 ** -6 * max(abs(w), 1)
    # the same request in JSON prints the same values
    body["encoding"] = "json"
    js2 = attnd.post("/v1/attention", json.dumps(body), headers=JSON).json()
    assert [bf16(x) for x in numbers(js2["output"])] == got


def test_half_base64_in_the_other_format_and_inf(attnd):
    """A float16 base64 tensor in a bfloat16 request is rounded to bfloat16
    (the same answer as its values sent as numbers); a tensor in the
    request's own format is taken as it is, and an infinity in it is 422 at
    its data."""
    qv = [1.0009765625, -0.3330078125, 2.0, 0.125, 1.5, 0.25, -0.75, 1.0]
    qb = b"".join(struct.pack("<H", f16_bits(x)) for x in qv)
    body = {"q": {"shape": [2, 4], "dtype": "float16", "data": base64.b64encode(qb).decode()},
            "k": K, "v": V, "dtype": "bfloat16"}
    js = attnd.post("/v1/attention", json.dumps(body), headers=JSON).json()
    body2 = dict(body, q=[qv[:4], qv[4:]])
    js2 = attnd.post("/v1/attention", json.dumps(body2), headers=JSON).json()
    assert js["output"] == js2["output"]
    assert bf16(qv[0]) != qv[0]       # the rounding happened: 1.0009765625 is no bfloat16
    # -inf in a nullable tensor (attn_bias) of the request's format masks
    bias = struct.pack("<6H", 0, 0xFC00, 0, 0, 0xFC00, 0)
    body = {"q": [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]], "k": K, "v": V,
            "attn_bias": {"shape": [2, 3], "dtype": "float16",
                          "data": base64.b64encode(bias).decode()}, "dtype": "float16"}
    js = attnd.post("/v1/attention", json.dumps(body), headers=JSON).json()
    body["attn_bias"] = [[0, None, 0], [0, None, 0]]
    assert attnd.post("/v1/attention", json.dumps(body), headers=JSON).json()["output"] == \
        js["output"]
    for dt, inf in (("float16", 0x7C00), ("bfloat16", 0x7F80)):
        raw = struct.pack("<4H", 0x3C00, 0, inf, 0)
        body = {"q": {"shape": [1, 4], "dtype": dt, "data": base64.b64encode(raw).decode()},
                "k": K, "v": V, "dtype": dt}
        r = attnd.post("/v1/attention", json.dumps(body), headers=JSON)
        assert r.status == 422, r
        err = r.json()["error"]
        assert err["code"] == "non_finite" and err["path"] == "/q/data", err
        assert "element 2" in err["message"], err


def test_decimal_tie_rounds_from_the_text(attnd):
    # 1 + 2^-11 is the float16 midpoint after 1; a hair above it reads as the
    # same double, but rounds up as a decimal
    for text, want in (("1.00048828125", 1.0), ("1.00048828125000001", 1.0009765625),
                       ("1.00048828124999999", 1.0)):
        body = '{"q":[[1]],"k":[[1]],"v":[[%s]],"dtype":"float16","return":["output"]}' % text
        for jansson in (False, True):
            if jansson:     # a null in attn_bias sends the body through jansson
                body = body.replace('"return"', '"attn_bias":[[0]],"return"')
            r = attnd.post("/v1/attention", body, headers=JSON)
            assert r.status == 200, r
            assert f16(r.json()["output"][0][0]) == want, text


def test_overflow_is_refused(attnd):
    r = attnd.post("/v1/attention", json.dumps({"q": [[1, 2]], "k": [[7e4, 0], [0, 1]],
                                                "v": [[1, 2], [3, 4]], "dtype": "float16"}),
                   headers=JSON)
    assert r.status == 422 and r.json()["error"]["path"] == "/k/0/0"
    r = attnd.post("/v1/attention", json.dumps({"q": [[300, 300]], "k": [[300, 300], [0, 1]],
                                                "v": [[1, 2], [3, 4]], "dtype": "float16"}),
                   headers=JSON)
    assert r.status == 422 and r.json()["error"]["code"] == "non_finite"
    assert "scores" in r.json()["error"]["message"]


@pytest.mark.parametrize("dtype,kv,elem", [("float16", None, 2), ("bfloat16", None, 2),
                                           ("float32", "int8", 1), ("float32", "float16", 2),
                                           ("float32", None, 4)])
def test_session_kv_dtypes(attnd, dtype, kv, elem):
    spec = {"d_k": 4, "d_v": 2, "heads": 1, "kv_heads": 1, "dtype": dtype}
    if kv:
        spec["kv_dtype"] = kv
    r = attnd.post("/v1/sessions", json.dumps(spec), headers=JSON)
    assert r.status == 201, r
    s = r.json()
    want_kv = kv or dtype
    assert s["kv_dtype"] == want_kv and s["dtype"] == dtype
    sid = s["id"]
    r = attnd.post("/v1/sessions/%s/kv" % sid, json.dumps({"k": K, "v": V}), headers=JSON)
    assert r.status == 200, r
    per_row = (4 + 2) * elem + (8 if want_kv == "int8" else 0)
    assert r.json()["bytes"] >= 3 * per_row and r.json()["bytes"] <= 3 * per_row * 1.1 + 64
    r = attnd.post("/v1/sessions/%s/attention" % sid, json.dumps({"q": Q[:1]}), headers=JSON)
    assert r.status == 200, r
    got = r.json()["output"][0]
    _, _, O = attention_ref(Q[:1], K, V)
    tol = {"float16": 4e-3, "bfloat16": 3e-2, "int8": 6e-2, "float32": 1e-5}[want_kv]
    for g, w in zip(got, O[0]):
        assert abs(g - w) <= tol * max(1, abs(w))
    kvj = attnd.get("/v1/sessions/%s/kv" % sid).json()
    assert kvj["kv_dtype"] == want_kv and len(kvj["k"]) == 3
    attnd.request("DELETE", "/v1/sessions/%s" % sid)


def test_session_kv_dtype_refusals(attnd):
    for spec, path in (({"kv_dtype": "int4"}, "/kv_dtype"),
                       ({"dtype": "float64", "kv_dtype": "float16"}, "/kv_dtype")):
        body = dict({"d_k": 2, "d_v": 2, "heads": 1, "kv_heads": 1}, **spec)
        r = attnd.post("/v1/sessions", json.dumps(body), headers=JSON)
        assert r.status == 422 and r.json()["error"]["path"] == path


def split_binary_response(r):
    n = int(r.headers[HDR.lower()])
    return json.loads(r.body[:n]), r.body[n:]


def test_v2_fp16_binary_built_byte_by_byte(attnd):
    # inputs: the JSON header, then each tensor's little-endian IEEE binary16
    # values in the order of "inputs" (binary_data_size bytes each)
    q, k, v = (numbers(m) for m in (Q, K, V))
    blobs = [struct.pack("<%de" % len(x), *x) for x in (q, k, v)]
    header = {"inputs": [{"name": n, "shape": s, "datatype": "FP16",
                          "parameters": {"binary_data_size": len(b)}}
                         for n, s, b in zip("qkv", ([2, 4], [3, 4], [3, 2]), blobs)],
              "outputs": [{"name": "output", "parameters": {"binary_data": True}},
                          {"name": "weights", "parameters": {"binary_data": False}}]}
    js = json.dumps(header).encode()
    r = attnd.post(INFER, js + b"".join(blobs),
                   headers={"Content-Type": "application/octet-stream", HDR: str(len(js))})
    assert r.status == 200, r
    hdr, raw = split_binary_response(r)
    outs = {o["name"]: o for o in hdr["outputs"]}
    assert outs["output"]["datatype"] == "FP16" and outs["weights"]["datatype"] == "FP16"
    assert outs["output"]["parameters"]["binary_data_size"] == 4 * 2 == len(raw)
    got = struct.unpack("<4e", raw)
    _, W, O = attention_ref(Q, K, V)
    for g, w in zip(got, numbers(O)):
        assert abs(g - w) <= 2 ** -9 * max(1, abs(w))
    for g, w in zip(outs["weights"]["data"], numbers(W)):
        assert abs(f16(g) - w) <= 2 ** -10
    # the same values as /v1/attention in float16
    ref = attnd.post("/v1/attention", json.dumps({"q": Q, "k": K, "v": V, "dtype": "float16",
                                                   "return": ["output"]}), headers=JSON).json()
    assert list(got) == [f16(x) for x in numbers(ref["output"])]


def test_v2_bf16_json_and_binary_inf(attnd):
    body = {"inputs": [{"name": n, "shape": s, "datatype": "BF16", "data": numbers(m)}
                       for n, s, m in zip("qkv", ([2, 4], [3, 4], [3, 2]), (Q, K, V))]}
    r = attnd.post(INFER, json.dumps(body), headers=JSON)
    assert r.status == 200, r
    outs = {o["name"]: o for o in r.json()["outputs"]}
    assert outs["output"]["datatype"] == "BF16"
    _, _, O = attention_ref(Q, K, V)
    for g, w in zip(outs["output"]["data"], numbers(O)):
        assert abs(bf16(g) - w) <= 2 ** -6 * max(1, abs(w))
    # +Inf (0x7C00) in FP16 binary data is refused
    blob = struct.pack("<HH", 0x7C00, 0)
    header = {"inputs": [{"name": "q", "shape": [1, 2], "datatype": "FP16",
                          "parameters": {"binary_data_size": 4}},
                         {"name": "k", "shape": [1, 2], "datatype": "FP16", "data": [1, 0]},
                         {"name": "v", "shape": [1, 2], "datatype": "FP16", "data": [1, 0]}]}
    js = json.dumps(header).encode()
    r = attnd.post(INFER, js + blob,
                   headers={"Content-Type": "application/octet-stream", HDR: str(len(js))})
    assert r.status in (400, 422), r
    assert isinstance(r.json()["error"], str)


def flat(x):
    if isinstance(x, dict):
        return [v for key in sorted(x) for v in flat(x[key])]
    if isinstance(x, list):
        return [v for e in x for v in flat(e)]
    return [x]


def test_float16_extras_rounded_and_shortest(attnd):
    """qk, lse, stats and the top-k values of a float16 request are the
    float32 request's numbers (on the same, exactly representable inputs)
    rounded to float16, each printed in its shortest text; a q·k past 65504
    is a 422 naming qk."""
    body = {"q": Q, "k": K, "v": V, "softmax": "softmax1", "weights_top_k": 2,
            "return": ["weights", "qk", "lse", "stats"]}
    r32 = attnd.post("/v1/attention", json.dumps(dict(body, dtype="float32")), headers=JSON)
    r16 = attnd.post("/v1/attention", json.dumps(dict(body, dtype="float16")), headers=JSON)
    assert r32.status == 200 and r16.status == 200, (r32, r16)
    a, b = r32.json(), r16.json()
    for key in ("qk", "lse", "stats", "weights"):
        for x32, x16 in zip(flat(a[key]), flat(b[key]), strict=True):
            if isinstance(x32, int) and isinstance(x16, int):
                assert x32 == x16, key              # argmax and indices
                continue
            f32 = struct.unpack("<f", struct.pack("<f", x32))[0]
            assert f16(x16) == f16(f32), (key, x32, x16)
    for tok in r16.body.decode().split('"meta"')[0].replace("[", " ").replace(
            "]", " ").replace(",", " ").replace(":", " ").split():
        if tok[0] in "-0123456789" and "." in tok:
            assert sig_digits(tok) == shortest_f16(f16(float(tok))), tok
    r = attnd.post("/v1/attention", json.dumps(
        {"q": [[300, 300]], "k": [[300, 300]], "v": [[1, 1]], "dtype": "float16",
         "scale": 0.0001, "return": ["output", "qk"]}), headers=JSON)
    assert r.status == 422, r
    err = r.json()["error"]
    assert err["code"] == "non_finite" and err["message"].startswith("qk "), err


def test_v2_fp16_extras_json_and_binary(attnd):
    """OIP v2 FP16 extras: lse and top-k values travel as FP16 (JSON numbers
    equal to v1's float16 request, binary as the 2-byte float16 bits)."""
    inputs = [{"name": n, "shape": s, "datatype": "FP16", "data": numbers(m)}
              for n, s, m in zip("qkv", ([2, 4], [3, 4], [3, 2]), (Q, K, V))]
    v1 = attnd.post("/v1/attention", json.dumps(
        {"q": Q, "k": K, "v": V, "dtype": "float16", "weights_top_k": 2,
         "return": ["weights", "lse"]}), headers=JSON).json()
    body = {"inputs": inputs, "parameters": {"weights_top_k": 2},
            "outputs": [{"name": "lse"}, {"name": "top_k_values",
                                          "parameters": {"binary_data": True}}]}
    r = attnd.post(INFER, json.dumps(body), headers=JSON)
    assert r.status == 200, r
    hlen = int(r.headers[HDR.lower()])
    head = json.loads(r.body[:hlen])
    outs = {o["name"]: o for o in head["outputs"]}
    assert outs["lse"]["datatype"] == "FP16" and outs["top_k_values"]["datatype"] == "FP16"
    assert outs["lse"]["data"] == numbers([v1["lse"]])
    raw = r.body[hlen:]
    assert len(raw) == outs["top_k_values"]["parameters"]["binary_data_size"] == 2 * 4
    vals = struct.unpack("<4e", raw)
    assert [f16(x) for x in numbers(v1["weights"]["values"])] == list(vals)


def half_bits(x, fmt):
    """The 2-byte bits of x (a value of fmt: float16 or bfloat16)."""
    if fmt == "float16":
        return f16_bits(x)
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16


def v2_post(attnd, inputs, outputs):
    """inputs: (name, shape, datatype, values, binary) -> the response; the
    binary ones' little-endian bytes follow the JSON header in order."""
    blobs, header = [], {"inputs": [], "outputs": outputs}
    for name, shape, dt, vals, binary in inputs:
        entry = {"name": name, "shape": shape, "datatype": dt}
        if binary:
            fmt = {"FP16": "float16", "BF16": "bfloat16"}.get(dt)
            blob = (struct.pack("<%dH" % len(vals), *(half_bits(x, fmt) for x in vals)) if fmt
                    else struct.pack("<%df" % len(vals), *vals))
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = vals
        header["inputs"].append(entry)
    js = json.dumps(header).encode()
    if not blobs:
        return attnd.post(INFER, js, headers=JSON)
    return attnd.post(INFER, js + b"".join(blobs),
                      headers={"Content-Type": "application/octet-stream", HDR: str(len(js))})


@pytest.mark.parametrize("dt", ["FP16", "BF16"])
def test_v2_half_inputs_answer_as_widened_and_as_v1(attnd, dt):
    """q, k, v in the request's own FP16/BF16 datatype are read by the pass
    in their 2-byte form (binary and JSON data): the response is byte for
    byte that of the same values with k and v as FP32, and its output bytes
    those of /v1/attention's base64 request in 2-byte and float32 form."""
    fmt, rnd = ("float16", f16) if dt == "FP16" else ("bfloat16", bf16)
    h, n, L, d = 2, 40, 300, 32
    seed = [7]

    def values(count):
        out = []
        for _ in range(count):
            seed[0] = (seed[0] * 1103515245 + 12345) % 2 ** 31
            out.append(rnd(seed[0] / 2 ** 31 * 4 - 2))
        return out
    q, k, v = values(h * n * d), values(h * L * d), values(h * L * d)
    sq, skv = [h, n, d], [h, L, d]
    outputs = [{"name": "output", "parameters": {"binary_data": True}}]
    answers = []
    for kv_dt in (dt, "FP32"):
        for binary in (True, False):
            r = v2_post(attnd, [("q", sq, dt, q, binary), ("k", skv, kv_dt, k, binary),
                                ("v", skv, kv_dt, v, binary)], outputs)
            assert r.status == 200, r
            answers.append(r)
    assert all(a.body == answers[0].body for a in answers)
    _, raw = split_binary_response(answers[0])
    assert len(raw) == 2 * h * n * d
    for f32 in (False, True):
        def tensor(vals, shape):
            data = (struct.pack("<%df" % len(vals), *vals) if f32 else
                    struct.pack("<%dH" % len(vals), *(half_bits(x, fmt) for x in vals)))
            return {"shape": shape, "dtype": "float32" if f32 else fmt,
                    "data": base64.b64encode(data).decode()}
        body = {"dtype": fmt, "encoding": "base64", "return": ["output"],
                "q": tensor(q, sq), "k": tensor(k, skv), "v": tensor(v, skv)}
        r = attnd.post("/v1/attention", json.dumps(body), headers=JSON)
        assert r.status == 200, r
        assert base64.b64decode(r.json()["output"]["data"]) == raw
    # the weights as well (a pass that reads float32): widened first, the same answer
    outputs = [{"name": "weights"}, {"name": "output"}]
    both = [v2_post(attnd, [("q", sq, dt, q, True), ("k", skv, kv_dt, k, True),
                            ("v", skv, kv_dt, v, True)], outputs) for kv_dt in (dt, "FP32")]
    assert both[0].status == 200 and both[0].body == both[1].body


def test_v2_half_binary_refusals_at_their_element(attnd):
    """An infinity or NaN in 2-byte binary k is 400 non_finite at its
    element, past the first 16 KiB block too; a binary_data_size that does
    not fit the shape is refused at it."""
    L, d = 1100, 8
    k = [0.5] * (L * d)
    for dt, bad in (("FP16", 0x7C00), ("FP16", 0x7E00), ("BF16", 0xFF80), ("BF16", 0x7FC0)):
        for at in (3, 8191, 8192, L * d - 1):
            blob_k = bytearray(struct.pack("<%dH" % len(k), *(half_bits(
                x, "float16" if dt == "FP16" else "bfloat16") for x in k)))
            blob_k[2 * at:2 * at + 2] = struct.pack("<H", bad)
            header = {"inputs": [
                {"name": "q", "shape": [1, d], "datatype": dt, "data": [1] * d},
                {"name": "k", "shape": [L, d], "datatype": dt,
                 "parameters": {"binary_data_size": len(blob_k)}},
                {"name": "v", "shape": [L, d], "datatype": dt, "data": [1] * (L * d)}]}
            js = json.dumps(header).encode()
            r = attnd.post(INFER, js + bytes(blob_k), headers={
                "Content-Type": "application/octet-stream", HDR: str(len(js))})
            assert r.status == 400, r
            err = r.json()["error"]
            assert err.startswith("element %d is not a finite number of " % at), err
            assert err.endswith("[non_finite at /inputs/1/data]"), err
    header = {"inputs": [
        {"name": "q", "shape": [1, 2], "datatype": "FP16", "parameters": {"binary_data_size": 3}},
        {"name": "k", "shape": [1, 2], "datatype": "FP16", "data": [1, 0]},
        {"name": "v", "shape": [1, 2], "datatype": "FP16", "data": [1, 0]}]}
    js = json.dumps(header).encode()
    r = attnd.post(INFER, js + b"\0\0\0", headers={
        "Content-Type": "application/octet-stream", HDR: str(len(js))})
    assert r.status == 400, r
    assert r.json()["error"].endswith(
        "need 4 bytes [shape_mismatch at /inputs/0/parameters/binary_data_size]"), r


@pytest.mark.parametrize("kv", ["float16", "bfloat16", "int8"])
def test_narrow_cache_output_does_not_depend_on_what_else_is_asked(attnd, kv):
    """README: the output does not depend on `return` or a `heads` subset.
    A float32 session with a narrow kv_dtype answered an output-only query
    through its decode loops and any query asking for more (weights, lse,
    stats, a heads subset) through the general pass over widened rows, which
    sums in another order: outputs differed in their last bits (helper-131:
    13 of 60 random configurations, up to 2e-7 relative)."""
    import random
    rnd = random.Random(11)
    spec = {"d_k": 16, "d_v": 4, "heads": 2, "kv_heads": 1, "dtype": "float32", "kv_dtype": kv}
    r = attnd.post("/v1/sessions", json.dumps(spec), headers=JSON)
    assert r.status == 201, r
    sid = r.json()["id"]
    rows = lambda n, d: [[rnd.uniform(-2, 2) for _ in range(d)] for _ in range(n)]
    r = attnd.post("/v1/sessions/%s/kv" % sid, json.dumps({"k": rows(100, 16), "v": rows(100, 4)}),
                   headers=JSON)
    assert r.status == 200, r
    for step in range(3):
        q = [rows(2, 16), rows(2, 16)]

        def ask(**extra):
            r = attnd.post("/v1/sessions/%s/attention" % sid, json.dumps(dict(q=q, **extra)),
                           headers=JSON)
            assert r.status == 200, (extra, r)
            return r.json()

        alone = ask(**{"return": ["output"]})["output"]
        for extra in ({"return": ["weights", "output"]}, {"return": ["output", "lse"]},
                      {"return": ["output", "stats"]}, {"return": ["weights", "output"], "weights_top_k": 3}):
            assert ask(**extra)["output"] == alone, (kv, step, extra)
        for h in (0, 1):
            for ret in (["output"], ["output", "weights"]):
                one = ask(**{"return": ret, "heads": [h]})["output"]
                assert one == [alone[h]], (kv, step, h, ret)
        both = ask(**{"return": ["output"], "heads": [1, 0]})["output"]
        assert both == [alone[1], alone[0]], (kv, step)
    attnd.request("DELETE", "/v1/sessions/%s" % sid)
