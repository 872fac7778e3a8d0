#!/usr/bin/env python3
"""tests/fuzz/make_seeds.py — writes the seed corpora of the fuzz targets.

tests/fuzz/corpus/<target>/seed-* are generated here (re-run after editing);
grown-* files are inputs libFuzzer found that add coverage (`-merge=1`);
regress-* files there are crash reproducers and hand-* and named seed-*
files (seed-avx2-* of corpus/base64) are written by hand: none is touched; the
state-* files of corpus/persist are real --state-dir files attnd wrote
(flag byte, then the file without its CRC, which the target appends), and
the state-* files of corpus/journal are a snapshot and a journal attnd
wrote (flag byte, u16 snapshot length, the snapshot, the journal); the
seeds of corpus/import are exports of a running attnd (import_seeds). The
request seeds include the bodies of the hostile-input catalogue
(tests/data/bad) sent to their routes.
"""
import base64
import hashlib
import json
import os
import re
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
BAD = os.path.join(HERE, "..", "data", "bad")

ROUTES = {"POST /v1/attention": 0, "POST /v1/verify": 1, "GET /verify": 2,
          "POST /v1/sessions": 3, "kv": 4, "attention": 5, "truncate": 6, "fork": 7,
          "get": 8, "getkv": 9, "delete": 10, "info": 11, "v2": 12, "options": 13,
          "put": 14, "path": 15}

VALID = {"q": [[1, 0]], "k": [[1, 0], [0, 1]], "v": [[1, 2], [3, 4]]}
B64 = {"shape": [1, 2], "dtype": "float64",
       "data": "AAAAAAAA8D8AAAAAAAAAAA=="}


def j(x):
    return json.dumps(x, separators=(",", ":")).encode()


def half_b64(dtype, shape, xs):
    """A base64 tensor of float16 / bfloat16 values (2-byte little-endian)."""
    if dtype == "float16":
        raw = b"".join(struct.pack("<e", x) for x in xs)
    else:
        raw = b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", x))[0] >> 16)
                       for x in xs)
    return {"shape": shape, "dtype": dtype, "data": base64.b64encode(raw).decode()}


def half_seeds(add, seeds):
    """float16 / bfloat16 requests: base64 tensors in the request's own format
    (taken as they are), in the other one (rounded), infinities and NaN bits,
    -inf in a nullable tensor, sessions with each kv_dtype, v2 FP16/BF16."""
    for dt, other in (("float16", "bfloat16"), ("bfloat16", "float16")):
        q = half_b64(dt, [1, 2], [1, 0])
        k = half_b64(dt, [2, 2], [1, 0, 0, 1])
        v = half_b64(dt, [2, 2], [1, 2, 3, 4])
        add("POST /v1/attention", 0, j({"q": q, "k": k, "v": v, "dtype": dt,
                                        "encoding": "base64"}))
        add("POST /v1/attention", 0, j({"q": half_b64(other, [1, 2], [1.0009765625, 3e-5]),
                                        "k": k, "v": v, "dtype": dt,
                                        "return": ["scores", "weights", "output"]}))
        add("POST /v1/attention", 0, j({"q": q, "k": k, "v": v, "dtype": dt, "causal": True,
                                        "attn_bias": half_b64(dt, [1, 2],
                                                              [0, float("-inf")])}))
        bits = (0x7C00, 0xFC00, 0x7E00) if dt == "float16" else (0x7F80, 0xFF80, 0x7FC0)
        for b in bits:
            raw = base64.b64encode(struct.pack("<2H", 0x3C00, b)).decode()
            add("POST /v1/attention", 0, j({"q": {"shape": [1, 2], "dtype": dt, "data": raw},
                                            "k": k, "v": v, "dtype": dt}))
        for kv in ("float32", "float16", "bfloat16", "int8"):
            add("POST /v1/sessions", 0, j({"d_k": 2, "d_v": 2, "dtype": dt, "kv_dtype": kv}))
        add("kv", 0, j({"k": k, "v": v}))
        add("attention", 0, j({"q": q, "encoding": "base64"}))
    # v2 FP16 / BF16, JSON and the binary extension
    add("v2", 0, j({"inputs": [{"name": "q", "shape": [1, 2], "datatype": "FP16",
                                "data": [1, 0]},
                               {"name": "k", "shape": [2, 2], "datatype": "FP16",
                                "data": [1, 0, 0, 1]},
                               {"name": "v", "shape": [2, 2], "datatype": "FP16",
                                "data": [1, 2, 3, 65504]}]}))
    for dt, fmt in (("FP16", "<4e"), ("BF16", None)):
        hdr = j({"inputs": [{"name": n, "shape": [2, 2], "datatype": dt,
                             "parameters": {"binary_data_size": 8}} for n in ("q", "k", "v")],
                 "outputs": [{"name": "output", "parameters": {"binary_data": True}}]})
        vals = (1, 0, 0, 1)
        one = struct.pack(fmt, *vals) if fmt else struct.pack("<4H", 0x3F80, 0, 0, 0x3F80)
        seeds.append(bytes([12 | (128 if len(hdr) >= 256 else 0), len(hdr) % 256]) + hdr +
                     one * 3)


def early_seeds(add):
    """POST /v1/attention with base64 strings of 64 characters and more, so
    the fuzz build's early decoder (ATTND_FUZZ_EARLY) takes them; byte 1
    picks how the body is cut into pieces (fuzz_request.c, fuzz_piece)."""
    def t(shape, dtype, xs):
        fmt = "<f" if dtype == "float32" else "<d"
        raw = b"".join(struct.pack(fmt, x) for x in xs)
        return {"shape": shape, "dtype": dtype, "data": base64.b64encode(raw).decode()}
    xs = [((i * 37) % 17 - 8) / 4 for i in range(64)]
    for dtype, way, causal in (("float32", 0x03, False), ("float64", 0x84, True),
                               ("float32", 0x15, True), ("float64", 0x7f, False)):
        n, d = (4, 4) if dtype == "float32" else (3, 6)
        body = {"q": t([n, d], dtype, xs[:n * d]), "k": t([n + 2, d], dtype, xs[1:1 + (n + 2) * d]),
                "v": t([n + 2, d], dtype, xs[2:2 + (n + 2) * d]), "causal": causal}
        add("POST /v1/attention", way, j(body))


def request_seeds():
    seeds = []
    add = lambda route, spec, body: seeds.append(bytes([ROUTES[route], spec]) + body)
    add("POST /v1/attention", 0, j(VALID))
    add("POST /v1/attention", 0, j(dict(VALID, causal=True, softmax="softmax1",
                                        rope={"base": 10000, "pairs": "half"},
                                        bias={"q": [0, 1], "k": [3, -2], "v": [1, 1]})))
    add("POST /v1/attention", 0, j(dict(VALID, q=B64, encoding="base64", digits=5,
                                        **{"return": ["weights"]})))
    add("POST /v1/attention", 0, j({"q": [[[1, 0]], [[0, 1]]], "k": [[[1, 0], [0, 1]]],
                                    "v": [[[1, 2], [3, 4]]], "alibi": True,
                                    "attn_bias": [[0, None]], "mask": [[True, True]],
                                    "softmax": "sink", "sink_logit": 0.5,
                                    "empty_rows": "error", "dtype": "float32", "scale": 0.5}))
    # DESIGN.md part 2: batches, positions, segments, window, softcap, sinks, RoPE
    add("POST /v1/attention", 0, j({"q": [[[[1, 0]]], [[[0, 1]]]],
                                    "k": [[[[1, 0], [0, 1]]], [[[1, 1], [0, 1]]]],
                                    "v": [[[[1, 2], [3, 4]]], [[[5, 6], [7, 8]]]],
                                    "causal": True, "mask": [[[[True, False]]]],
                                    "positions": {"k": [[0, 1], [4, 9]]},
                                    "segments": {"q": [[0], [1]], "k": [0, 1]},
                                    "window": {"left": 1, "right": 0, "sinks": 1},
                                    "softcap": 2.5, "softmax": "sink", "sink_logit": [0.5]}))
    add("POST /v1/attention", 0, j(dict(VALID, rope={"dims": 2, "pairs": "half", "scaling": {
        "type": "yarn", "factor": 4, "original_max_position": 64, "beta_fast": 16}})))
    add("POST /v1/attention", 0, j(dict(VALID, rope={"scaling": {
        "type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
        "original_max_position": 16}}, positions={"q": [2147483647]})))
    add("POST /v1/sessions", 0, j({"d_k": 4, "d_v": 2, "heads": 2, "kv_heads": 1,
                                   "softmax": "sink", "sink_logit": [0.5, -1], "softcap": 3,
                                   "rope": {"dims": 2, "scaling": {"type": "ntk", "factor": 2}}}))
    add("POST /v1/verify", 0, j({"q": [[1, 0]], "k": [[1, 0], [0, 1], [-1, 0]],
                                 "v": [[1, 0], [0, 1], [1, 1]],
                                 "bias": {"q": [0, 1], "k": [3, -2]}, "tolerance": 1e-9}))
    add("GET /verify", 0, b"")
    # verify with the options of current models, and the half dtypes
    with open(os.path.join(HERE, "..", "..", "server", "web", "openapi.json")) as f:
        examples = json.load(f)["paths"]["/v1/verify"]["post"]["requestBody"]["content"][
            "application/json"]["examples"]
    add("POST /v1/verify", 0, j(examples["models"]["value"]))
    add("POST /v1/verify", 0, j(examples["batch"]["value"]))      # heads and batches
    for dt in ("float16", "bfloat16"):
        add("POST /v1/verify", 0, j({"q": [[1, 0.5]], "k": [[1, 0], [0.25, 1], [-1, 0.5]],
                                     "v": [[1], [2], [3]], "bias": {"k": [3, -2]},
                                     "dtype": dt, "segments": {"q": [0], "k": [1, 0, 0]}}))
    # extras with a batch, segments at default positions, a half dtype
    add("POST /v1/attention", 0, j({"q": [[[[1, 0], [0, 1]], [[1, 1], [0, 2]]],
                                          [[[0, 1], [1, 0]], [[2, 0], [1, 1]]]],
                                    "k": [[[[1, 0], [0, 1], [1, 1]]], [[[1, 1], [0, 1], [2, 0]]]],
                                    "v": [[[[1, 2], [3, 4], [5, 6]]], [[[5, 6], [7, 8], [9, 0]]]],
                                    "segments": {"q": [[0, 1], [1, 1]], "k": [0, 1, 0]},
                                    "heads": [1], "weights_top_k": 2, "dtype": "float16",
                                    "return": ["weights", "output", "qk", "lse", "stats"]}))
    add("POST /v1/sessions", 0, j({"d_k": 2, "d_v": 2, "heads": 2, "kv_heads": 1,
                                   "dtype": "float64", "softmax": "softmax1",
                                   "rope": {"base": 10000}, "max_tokens": 8, "ttl_s": 5}))
    for spec in (0, 1, 2, 3, 0x24, 0x41, 0x80):
        heads = 2 if spec & 2 else 1
        kvh = 2 if spec & 1 else 1
        kv = {"k": [[[0.5, 1]]] * kvh, "v": [[[1, 2]]] * kvh}
        add("kv", spec, j(dict(kv, expected_length=3)))
        add("attention", spec, j(dict(kv, q=[[[1, 0]]] * (heads * kvh), causal=True,
                                      **{"return": ["output"]})))
    add("truncate", 0, j({"length": 1}))
    add("fork", 0, b"")
    add("get", 0, b"")
    add("getkv", 0, b"")
    add("delete", 0, b"")
    add("info", 0, b"")
    add("v2", 0, j({"inputs": [{"name": "q", "shape": [1, 2], "datatype": "FP64",
                                "data": [1, 0]},
                               {"name": "k", "shape": [2, 2], "datatype": "FP64",
                                "data": [1, 0, 0, 1]},
                               {"name": "v", "shape": [2, 2], "datatype": "FP64",
                                "data": [1, 2, 3, 4]}],
                    "parameters": {"softmax": "standard"}}))
    # v2: a batch with a [B,1,n,L] mask and bias, extras and BF16
    q4 = [1, 0, 0, 1, 1, 1, 0, 2]
    add("v2", 0, j({"inputs": [
        {"name": "q", "shape": [2, 2, 1, 2], "datatype": "BF16", "data": q4},
        {"name": "k", "shape": [2, 1, 2, 2], "datatype": "BF16", "data": [1, 0, 0, 1, 1, 1, 2, 0]},
        {"name": "v", "shape": [2, 1, 2, 2], "datatype": "BF16", "data": [1, 2, 3, 4, 5, 6, 7, 8]},
        {"name": "mask", "shape": [2, 1, 1, 2], "datatype": "BOOL", "data": [True, False, True, True]},
        {"name": "attn_bias", "shape": [2, 1, 1, 2], "datatype": "FP32", "data": [0, 1, -1, 0]}],
        "parameters": {"heads": "1", "weights_top_k": 1},
        "outputs": [{"name": "output"}, {"name": "lse"}, {"name": "top_k_values"},
                    {"name": "argmax"}]}))
    # v2 binary tensor extension: JSON header, then little-endian tensors.
    hdr = j({"inputs": [{"name": n, "shape": [2, 2], "datatype": "FP64",
                         "parameters": {"binary_data_size": 32}} for n in ("q", "k", "v")],
             "outputs": [{"name": "output", "parameters": {"binary_data": True}}]})
    assert len(hdr) < 512
    binary = struct.pack("<12d", 1, 0, 0, 1, 1, 0, 0, 1, 1, 2, 3, 4)
    seeds.append(bytes([12 | (128 if len(hdr) >= 256 else 0), len(hdr) % 256]) + hdr + binary)
    hdr32 = j({"inputs": [{"name": "q", "shape": [1, 2], "datatype": "FP32",
                           "parameters": {"binary_data_size": 8}},
                          {"name": "k", "shape": [1, 2], "datatype": "FP32", "data": [1, 0]},
                          {"name": "v", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]},
                          {"name": "mask", "shape": [1, 1], "datatype": "BOOL",
                           "parameters": {"binary_data_size": 1}}]})
    seeds.append(bytes([12 | (128 if len(hdr32) >= 256 else 0), len(hdr32) % 256]) + hdr32 +
                 struct.pack("<2f", 1, 0) + b"\x01")
    half_seeds(add, seeds)
    add("options", 0, b"")
    add("put", 0, j(VALID))
    for p in (b"/v1/sessions/../../etc/passwd", b"/healthz", b"/metrics", b"/",
              b"/v1/sessions//kv", b"/v1/sessions/%2e%2e/kv", b"/v2/models/attention/ready"):
        add("path", 0, p + b"\n")
        add("path", 1, p + b"\n" + j(VALID))
    # The catalogue's bodies, on the route they were sent to.
    for name in sorted(os.listdir(BAD)):
        f = os.path.join(BAD, name, "request")
        if not os.path.isfile(f):
            continue
        raw = open(f, "rb").read()
        head, _, body = raw.partition(b"\r\n\r\n")
        line = head.split(b"\r\n")[0].split(b" ")
        if len(line) < 2 or len(body) > 8192 or b"chunked" in head.lower():
            continue
        method, path = line[0].decode("latin-1"), line[1]
        if method == "POST" and path == b"/v1/attention":
            add("POST /v1/attention", 0, body)
        elif method == "POST" and path == b"/v1/sessions":
            add("POST /v1/sessions", 0, body)
        elif method == "POST" and path.endswith(b"/kv"):
            add("kv", 0, body)
        elif method == "POST" and path.endswith(b"/attention"):
            add("attention", 0, body)
        elif method == "POST" and path.endswith(b"/truncate"):
            add("truncate", 0, body)
        else:
            add("path", 1 if method == "POST" else 0, path + b"\n" + body)
    early_seeds(add)
    return seeds


def base64_seeds():
    return [b"", b"AAAA", b"AAAAAAAA8D8AAAAAAAAAAA==", b"AB==", b"A===", b"====", b"QQ=",
            b"!!!!", b"AAAA\nAAAA", struct.pack("<4d", 1.0, -2.5, 1e308, 5e-324)]


def sessions_seeds():
    # byte 0: limits/policy; then ops: (op | slot << 4) followed by arguments.
    create = lambda a, b, c: bytes([0, a, b, c])
    vals = bytes(range(100, 164))
    return [
        bytes([0x3f]) + create(0x05, 0x00, 0x28) + bytes([0x01, 3]) + vals +
        bytes([0x02, 0x15]) + vals + bytes([0x03, 1]) + bytes([0x04]) + bytes([0x05]),
        bytes([0x7a]) + create(0x00, 0x01, 0x12) + create(0x03, 0x02, 0x34) +
        bytes([0x01, 0x85]) + vals + bytes([0x11, 6]) + vals + bytes([0x26 | 0x80]) +
        bytes([0x07, 5]) + b"abcde",
        bytes([0x01]) + create(0x15, 0x0c, 0xff) + bytes([0x01, 2]) + b"\xff" * 32 +
        bytes([0x01, 2]) + b"\xfe" * 32 + bytes([0xf6]) + bytes([0x01, 1]) + vals,
        bytes([0x47]) + b"".join(create(i, i, 0x10 | i) for i in range(8)) +
        b"".join(bytes([0x01 | (i << 4), 6]) + vals for i in range(8)),
    ]


def numbers_seeds():
    seeds = [b"\x00" + t for t in (
        b"[[1,2],[3,4]]", b"[1e400]", b"[-0, 1e-320, 5e-324]", b"[[[1]],[[2]]]",
        b" [ 1 , 2 ] ", b"[[1,2],[3]]", b"[18446744073709551616, -0]", b"[1.0e+2,-3E-2]",
        b"[[0.1,0.2,0.30000000000000004]]", b"[01]", b"[1.]", b"[.5]", b"[[]]", b"[1,]")]
    seeds.append(b"\x01" + j(B64))
    seeds.append(b"\x01" + j({"dtype": "float32", "shape": [2], "data": "AACAPwAAAEA="}))
    seeds.append(b"\x01" + j(half_b64("float16", [2], [1, 2])))
    seeds.append(b"\x01" + j(half_b64("bfloat16", [1, 3], [1, -2, 0.5])))
    seeds.append(b"\x01" + j({"dtype": "float16", "shape": [2], "data": "ADw="}))
    for x in (0.1, 5e-324, 1.7976931348623157e308, 9.611687e18, 1e21, 1e-7, 123456789.0, -0.0):
        seeds.append(b"\x02" + struct.pack("<d", x))
    for x in (0.1, 1e-45, 3.4028234663852886e38, 16777217.0, 1e21):
        seeds.append(b"\x03" + struct.pack("<f", x))
    return seeds


IMPORT_SPECS = [
    {"d_k": 4, "d_v": 3},
    {"d_k": 4, "d_v": 3, "heads": 4, "kv_heads": 2, "alibi": True,
     "bias": {"q": [0.25, -0.5, 1.0, 0.0], "k": [[3, -2, 0.5, 1], [0, 1, -1, 2]], "v": [1, -1, 0.5]},
     "rope": {"base": 10000, "pairs": "interleaved"}},
    {"d_k": 8, "d_v": 4, "heads": 2, "dtype": "float32", "softcap": 4.0,
     "rope": {"dims": 4, "scaling": {"type": "yarn", "factor": 4, "original_max_position": 64,
                                     "beta_fast": 16}}},
    {"d_k": 4, "d_v": 4, "dtype": "float32", "kv_dtype": "float16", "softmax": "sink",
     "sink_logit": [0.5]},
    {"d_k": 4, "d_v": 2, "heads": 2, "kv_heads": 1, "dtype": "float32", "kv_dtype": "int8",
     "rope": {"scaling": {"type": "llama3", "factor": 8, "low_freq_factor": 1,
                          "high_freq_factor": 4, "original_max_position": 16}}},
    {"d_k": 4, "d_v": 4, "dtype": "bfloat16", "softmax": "softmax1", "max_tokens": 16},
    {"d_k": 4, "d_v": 2, "dtype": "float32", "kv_dtype": "bfloat16", "ttl_s": 30,
     "rope": {"scaling": {"type": "ntk", "factor": 2}}},
    {"d_k": 2, "d_v": 2, "dtype": "float16"},
]


def rolled_seeds(d, rng):
    """Exports of rolling sessions that let rows go (first_row > 0): with
    sinks (front rows kept) and without, a float32 int8 cache too."""
    seeds = []
    for spec, rows in (({"d_k": 2, "d_v": 2, "window": {"left": 5, "sinks": 1}}, 200),
                       ({"d_k": 2, "d_v": 3, "dtype": "float32", "kv_dtype": "int8",
                         "window": {"left": 3}}, 140)):
        sid = d.post("/v1/sessions", spec).json()["id"]
        kv = {"k": [[rng.uniform(-2, 2) for _ in range(spec["d_k"])] for _ in range(rows)],
              "v": [[rng.uniform(-2, 2) for _ in range(spec["d_v"])] for _ in range(rows)]}
        assert d.post(f"/v1/sessions/{sid}/kv", kv).status == 200
        body = d.get(f"/v1/sessions/{sid}/export").body
        seeds += [b"\x00" + body, b"\x01" + body]
    return seeds


def import_seeds():
    """Real exports of a running attnd (ATTND_BIN, default build/attnd): flag
    byte 0 (the body as exported) and, for the first few, flag 1 (the target
    rewrites the CRC); and the version 1 state files of corpus/persist with
    their CRC-32 (IEEE), which still import."""
    import random
    import sys
    import zlib
    sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
    from attnd_proc import Attnd
    rng = random.Random(18)
    seeds = []
    with Attnd() as d:
        for i, spec in enumerate(IMPORT_SPECS):
            r = d.post("/v1/sessions", spec)
            assert r.status == 201, r
            sid = r.json()["id"]
            h_kv = spec.get("kv_heads", spec.get("heads", 1))
            rows = i % 4 + (i > 0)
            if rows:
                kv = {"k": [[[rng.uniform(-2, 2) for _ in range(spec["d_k"])]
                             for _ in range(rows)] for _ in range(h_kv)],
                      "v": [[[rng.uniform(-2, 2) for _ in range(spec["d_v"])]
                             for _ in range(rows)] for _ in range(h_kv)]}
                assert d.post(f"/v1/sessions/{sid}/kv", kv).status == 200
            body = d.get(f"/v1/sessions/{sid}/export").body
            seeds.append(b"\x00" + body)
            if i < 3:
                seeds.append(bytes([1 | 2 * (i == 1) | 4 * (i == 2)]) + body)
        seeds += rolled_seeds(d, rng)
    persist = os.path.join(HERE, "corpus", "persist")
    for name in sorted(os.listdir(persist)):
        if name.startswith("state-") and name.endswith("-1"):
            with open(os.path.join(persist, name), "rb") as f:
                file = f.read()[1:]
            seeds.append(b"\x08" + file + struct.pack("<I", zlib.crc32(file)))
    return seeds


def write(target, seeds):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if re.fullmatch(r"seed-[0-9a-f]{16}", f):     # what this script wrote
            os.remove(os.path.join(d, f))
    for s in seeds:
        with open(os.path.join(d, "seed-" + hashlib.sha1(s).hexdigest()[:16]), "wb") as f:
            f.write(s)
    return len(seeds)


if __name__ == "__main__":
    for t, s in (("request", request_seeds()), ("base64", base64_seeds()),
                 ("sessions", sessions_seeds()), ("numbers", numbers_seeds())):
        print(t, write(t, s))
    print("import", write("import", import_seeds()))
