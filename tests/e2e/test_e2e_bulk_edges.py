"""tests/e2e/test_e2e_bulk_edges.py — api/bulk.c (base64 tensors decoded,
OIP v2 binary inputs copied, 6 KiB blocks checked for non-finite values,
96 KiB pieces split over the helper pool) seen from a client: its refusals
answer the same code, JSON path and message as the reader before it
(2152fe2; these texts were taken from that daemon's answers):

- an infinity, -infinity or NaN in the first, last, middle element and on
  both sides of a block and of a piece edge, in float32, float64, float16
  and bfloat16 tensors, and a float32 value that overflows float16 under
  dtype float16: non_finite naming the element;
- a character outside the alphabet, '=' or whitespace at a block's or a
  piece's first and last character, padding-like "==" ending a block,
  non-canonical padding in a 4-byte tensor: invalid_field "data is not
  valid base64"; a wrong length: its own message;
- a nullable attn_bias passes -inf, not +inf or NaN, among seven base64
  tensors; OIP v2 binary FP32/FP16 inputs likewise;
- all of them at once from several clients (the pool is then shared and
  its helpers step back): the same answers.
"""
import base64
import json
import random
import struct
import threading

from attnd_proc import Attnd

B, P = 6144, 16 * 6144          # api/bulk.c's block and piece (output bytes)
N, D = 1024, 128                # 512 KiB per float32 tensor: 5.3 pieces
COUNT = N * D
_rng = random.Random(22)
VALS = [_rng.uniform(-1, 1) for _ in range(COUNT)]
RAW32 = struct.pack("<%df" % COUNT, *VALS)
RAW16 = struct.pack("<%de" % COUNT, *VALS)
RAWBF = b"".join(RAW32[4 * i + 2:4 * i + 4] for i in range(COUNT))
RAW64 = struct.pack("<%dd" % COUNT, *VALS)


def _where(es):
    return {"first": 0, "last": COUNT - 1, "block_end": B // es - 1, "block_start": B // es,
            "piece_end": P // es - 1, "piece_start": P // es, "middle": COUNT // 2 + 3}


def _put(raw, i, bits):
    b = bytearray(raw)
    b[i * len(bits):(i + 1) * len(bits)] = bits
    return bytes(b)


def _t(raw, dtype, shape=(N, D), text=None):
    return {"shape": list(shape), "dtype": dtype,
            "data": text if text is not None else base64.b64encode(raw).decode()}


GOOD = _t(RAW32, "float32")
SMALL = _t(RAW32[:16 * D], "float32", (4, D))
TEXT = base64.b64encode(RAW32).decode()
NOT_B64 = ("invalid_field", "data is not valid base64")


def needs(text, want=524288):
    """The refusal of base64 text of the wrong length for `want` bytes."""
    n = len(text.encode())
    if n % 4:
        return ("invalid_field", "data must be padded base64, a multiple of 4 characters with "
                f"no spaces or line breaks (it has {n} characters; {want} bytes take "
                f"{(want + 2) // 3 * 4})")
    pad = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
    return ("invalid_field", f"data must be base64 of {want} bytes (shape and dtype), "
            f"not {n // 4 * 3 - pad}")


def _body(**kw):
    d = {"q": SMALL, "k": GOOD, "v": GOOD, "return": ["output"], "dtype": "float32"}
    d.update(kw)
    return json.dumps(d).encode()


def _cases():
    """(name, path, body, headers, status, code, message, json path)."""
    out = []
    nf = "element %d is not finite"
    specials = {"inf": (struct.pack("<I", 0x7F800000), struct.pack("<Q", 0x7FF0000000000000),
                        struct.pack("<H", 0x7C00), struct.pack("<H", 0x7F80)),
                "-inf": (struct.pack("<I", 0xFF800000), struct.pack("<Q", 0xFFF0000000000000),
                         struct.pack("<H", 0xFC00), struct.pack("<H", 0xFF80)),
                "nan": (struct.pack("<I", 0x7FC00001), struct.pack("<Q", 0x7FF8000000000001),
                        struct.pack("<H", 0x7E01), struct.pack("<H", 0x7FC1))}
    for kind, (b32, b64, b16, bbf) in specials.items():
        for pos, i in _where(4).items():
            for which in ("q", "k", "v"):
                if which != "k" and pos not in ("first", "middle", "last"):
                    continue
                out.append((f"{which}-f32-{kind}-{pos}", "/v1/attention",
                            _body(**{which: _t(_put(RAW32, i, b32), "float32")}), None,
                            422, "non_finite", nf % i, f"/{which}/data"))
        for pos, i in _where(8).items():
            out.append((f"k-f64-{kind}-{pos}", "/v1/attention",
                        _body(k=_t(_put(RAW64, i, b64), "float64"), dtype="float64"), None,
                        422, "non_finite", nf % i, "/k/data"))
        for pos, i in _where(2).items():
            out.append((f"v-f16-{kind}-{pos}", "/v1/attention",
                        _body(v=_t(_put(RAW16, i, b16), "float16"), dtype="float16"), None,
                        422, "non_finite", nf % i, "/v/data"))
            out.append((f"v-f16-in-f32-{kind}-{pos}", "/v1/attention",
                        _body(v=_t(_put(RAW16, i, b16), "float16")), None,
                        422, "non_finite", nf % i, "/v/data"))
            out.append((f"k-bf16-{kind}-{pos}", "/v1/attention",
                        _body(k=_t(_put(RAWBF, i, bbf), "bfloat16"), dtype="bfloat16"), None,
                        422, "non_finite", nf % i, "/k/data"))
    for pos, i in _where(4).items():
        out.append((f"k-f16-overflow-{pos}", "/v1/attention",
                    _body(k=_t(_put(RAW32, i, struct.pack("<f", 1.0e6)), "float32"),
                          dtype="float16"), None,
                    422, "non_finite", "element %d is outside the float16 range" % i, "/k/data"))
    n = len(TEXT)
    for pos, c in (("first", 0), ("block_end", 8191), ("block_start", 8192),
                   ("piece_end", 131071), ("piece_start", 131072), ("middle", n // 2 + 1),
                   ("last_group", n - 5)):
        for ch in "-=_ \n":
            out.append((f"k-char-{ord(ch)}-{pos}", "/v1/attention",
                        _body(k=_t(None, "float32", text=TEXT[:c] + ch + TEXT[c + 1:])), None,
                        422, *NOT_B64, "/k/data"))
        text = TEXT[:c] + "\u00e9" + TEXT[c + 1:]
        out.append((f"k-nonascii-{pos}", "/v1/attention", _body(k=_t(None, "float32", text=text)),
                    None, 422, *needs(text), "/k/data"))
    for c in (8188, 8190, 131070):
        out.append((f"v-padding-inside-{c}", "/v1/attention",
                    _body(v=_t(None, "float32", text=TEXT[:c] + "==" + TEXT[c + 2:])), None,
                    422, *NOT_B64, "/v/data"))
    for name, text in (("short", TEXT[:-4]), ("long", TEXT + "AAAA"), ("mod4", TEXT[:-1]),
                       ("empty", "")):
        out.append((f"k-length-{name}", "/v1/attention", _body(k=_t(None, "float32", text=text)),
                    None, 422, *needs(text), "/k/data"))
    one = base64.b64encode(struct.pack("<f", 1.0)).decode()           # "AACAPw=="
    for name, text in (("noncanonical", one[:5] + "x=="), ("three_pad", one[:5] + "==="),
                       ("eq_inside", one[:2] + "=" + one[3:])):
        t = _t(None, "float32", (1, 1), text)
        out.append((f"tiny-{name}", "/v1/attention", _body(q=t, k=t, v=t), None,
                    422, *NOT_B64, "/q/data"))
    t = _t(None, "float32", (1, 1), one)
    out.append(("tiny-ok", "/v1/attention", _body(q=t, k=t, v=t), None, 200, None, None, None))
    out.append(("zero-dim", "/v1/attention",
                _body(q=_t(b"", "float32", (0, 4)), k=_t(b"", "float32", (0, 4)),
                      v=_t(b"", "float32", (0, 4))), None,
                422, "empty_matrix", "zero dimension", "/q/shape/0"))

    def rt(shape):
        c = 1
        for s in shape:
            c *= s
        return _t(struct.pack("<%df" % c, *(_rng.uniform(-1, 1) for _ in range(c))), "float32", shape)
    h, n_, L, d = 2, 64, 96, 32
    ab = [_rng.uniform(-1, 1) for _ in range(h * n_ * L)]
    for kind, val, want in (("ok", None, 200), ("-inf", float("-inf"), 200),
                            ("inf", float("inf"), 422), ("nan", float("nan"), 422)):
        vals = list(ab)
        if val is not None:
            vals[1536] = vals[-1] = val
        body = json.dumps({"q": rt([h, n_, d]), "k": rt([h, L, d]), "v": rt([h, L, d]),
                           "bias": {"q": rt([d]), "k": rt([h, d]), "v": rt([h, d])},
                           "attn_bias": _t(struct.pack("<%df" % len(vals), *vals), "float32",
                                           (h, n_, L)), "return": ["output"]}).encode()
        out.append((f"seven-tensors-attn_bias-{kind}", "/v1/attention", body, None, want,
                    "non_finite" if want == 422 else None, nf % 1536 if want == 422 else None,
                    "/attn_bias/data" if want == 422 else None))

    def v2(inputs):
        hdr = {"inputs": [], "outputs": [{"name": "output", "parameters": {"binary_data": False}}]}
        blob = b""
        for name, shape, dt, raw in inputs:
            hdr["inputs"].append({"name": name, "shape": shape, "datatype": dt,
                                  "parameters": {"binary_data_size": len(raw)}})
            blob += raw
        hj = json.dumps(hdr).encode()
        return hj + blob, {"Inference-Header-Content-Length": str(len(hj)),
                           "Content-Type": "application/octet-stream"}
    q32 = RAW32[:16 * D]
    for pos, i in _where(4).items():
        for kind in ("inf", "nan"):
            body, hd = v2([("q", [4, D], "FP32", q32),
                           ("k", [N, D], "FP32", _put(RAW32, i, specials[kind][0])),
                           ("v", [N, D], "FP32", RAW32)])
            out.append((f"v2-k-f32-{kind}-{pos}", "/v2/models/attention/infer", body, hd, 400,
                        None, "element %d is not a finite number of float32 "
                        "[non_finite at /inputs/1/data]" % i, None))
        ab = struct.pack("<%df" % (4 * N), *(_rng.uniform(-1, 1) for _ in range(4 * N)))
        body, hd = v2([("q", [4, D], "FP32", q32), ("k", [N, D], "FP32", RAW32),
                       ("v", [N, D], "FP32", RAW32),
                       ("attn_bias", [4, N], "FP32", _put(ab, min(i, 4 * N - 1),
                                                          specials["-inf"][0]))])
        out.append((f"v2-attn_bias--inf-{pos}", "/v2/models/attention/infer", body, hd, 200,
                    None, None, None))
    body, hd = v2([("q", [4, D], "FP32", q32), ("k", [N, D], "FP32", RAW32),
                   ("v", [N, D], "FP32", RAW32[:-4])])
    out.append(("v2-short", "/v2/models/attention/infer", body, hd, 400, None,
                "binary_data_size is 524284, the shape and datatype need 524288 bytes "
                "[shape_mismatch at /inputs/2/parameters/binary_data_size]", None))
    return out


CASES = _cases()


def _check(d, case):
    name, path, body, hd, status, code, message, where = case
    r = d.request("POST", path, body, headers=hd or {"Content-Type": "application/json"},
                  timeout=120)
    assert r.status == status, (name, r.status, r.body[:300])
    if status == 200:
        return
    e = r.json()["error"]
    if path.startswith("/v2/"):
        assert e == message, (name, e)
    else:
        assert (e["code"], e["message"], e["path"]) == (code, message, where), (name, e)


def test_bulk_refusals_name_the_same_element():
    with Attnd("--max-body-bytes", "64m") as d:
        for case in CASES:
            _check(d, case)
        assert d.stop() == 0


def test_bulk_refusals_at_once_concurrency():
    with Attnd("--max-body-bytes", "64m", "--workers", "2") as d:
        errors = []

        def run(part):
            try:
                for case in part:
                    _check(d, case)
            except AssertionError as e:     # pragma: no cover - reported below
                errors.append(e)
        picked = CASES[::3]
        jobs = [threading.Thread(target=run, args=(picked[k::4],)) for k in range(4)]
        for j in jobs:
            j.start()
        for j in jobs:
            j.join()
        assert not errors, errors[:3]
        assert d.stop() == 0
