#!/usr/bin/env python3
"""tests/data/bad/make_cases.py — writes the hostile-input catalogue.

The catalogue is the folders beside this file: <case>/request holds the exact
raw HTTP bytes a client sends (or <case>/gen.py, whose generate() returns
them, for cases too big to keep in the repo), and <case>/expect.json the
answer the API's contract asks for. This script is how the folders were
written; the folders are the catalogue (tests/e2e/test_e2e_bad.py reads them).
Re-run it after editing a case here:  python3 tests/data/bad/make_cases.py

expect.json fields (see README.md):
  status        int, or a list of acceptable ints
  status_class  4: any 4xx (transport-level cases libmicrohttpd answers itself)
  code          wire error code, or a list of acceptable codes
  path          JSON pointer of the error, or a list of acceptable pointers
  error_shape   "v1" (default for 4xx/5xx, {"error":{code,message,path}}),
                "v2" ({"error":"..."}), "any" (either), "none" (no JSON check)
  flags         extra daemon flags; cases with equal flags share one daemon
  setup         {"session": {...create body...}, "append": [kv bodies],
                 "then": "keep"|"delete"|"expire", "sleep": s} — "{{SID}}" in the request is replaced
                 by the new session's id
  require_headers / absent_headers   response headers that must / must not be there
  forbid        byte strings that must not appear in the response
  note          why this expectation, where the contract is not explicit
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

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


# ---- malformed JSON (400) ------------------------------------------------
case("json_truncated", err(400, "invalid_json"), b'{"q":[[1,0]],"k":[[1,0]')
case("json_trailing_garbage", err(400, "invalid_json"), as_body(VALID) + b" xyz")
case("json_two_documents", err(400, "invalid_json"), as_body(VALID) + as_body(VALID))
case("json_bom", err(400, "invalid_json",
                     note="RFC 8259 lets a parser refuse a BOM; a JSON API should"),
     b"\xef\xbb\xbf" + as_body(VALID))
case("json_empty_body", err(400, "invalid_json"), b"", headers=["Content-Type: application/json"])
case("json_not_object", err(400, "invalid_json",
                            note="the body must be an object (api/internal.h)"),
     b"[[1,0]]")
case("json_single_quotes", err(400, "invalid_json"), b"{'q':[[1,0]]}")
case("json_nan_literal", err(400, "invalid_json"),
     b'{"q":[[NaN,0]],"k":[[1,0]],"v":[[1,2]]}')
case("json_infinity_literal", err(400, "invalid_json"),
     b'{"q":[[Infinity,0]],"k":[[1,0]],"v":[[1,2]]}')
case("json_neg_infinity_literal", err(400, "invalid_json"),
     b'{"q":[[-Infinity,0]],"k":[[1,0]],"v":[[1,2]]}')
case("json_number_1e400",
     {"status": [400, 422], "code": ["invalid_json", "non_finite"],
      "path": ["", "/q/0/0", None],
      "note": "valid JSON grammar, but outside double: refused either by the "
              "parser (400 invalid_json) or as a non-finite value (422)"},
     b'{"q":[[1e400,0]],"k":[[1,0]],"v":[[1,2]]}')
case("json_invalid_utf8_string", err(400, "invalid_json"),
     b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"softmax":"st\xff\xfeandard"}')
case("json_invalid_utf8_key", err(400, "invalid_json"),
     b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"\xc3\x28":1}')
case("json_overlong_utf8", err(400, "invalid_json"),
     b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"softmax":"\xc0\xaf"}')
case("json_lone_surrogate_escape", err(400, "invalid_json"),
     b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"softmax":"\\ud800"}')
case("json_nul_in_key",
     {"status": [400, 422], "code": ["invalid_json", "invalid_field"],
      "note": "jansson refuses \\u0000 in keys unless JSON_ALLOW_NUL; if "
              "allowed, it is an unknown field"},
     b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"so\\u0000ftmax":"standard"}')
case("json_nul_after_number", err(400, "invalid_json",
                                  note="a raw NUL is never JSON; jansson takes it after a "
                                       "number ([[1,0\\0]] read as [[1,0]]): answered 200"),
     b'{"q":[[1,0\x00]],"k":[[1,0]],"v":[[1,2]]}')
case("json_nul_in_string", err(400, "invalid_json"),
     b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"softmax":"stan\x00dard"}')
case("json_duplicate_key", err(400, "duplicate_key"),
     b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"q":[[0,1]]}')
case("json_duplicate_nested_key", err(400, "duplicate_key"),
     b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"rope":{"base":10,"base":20}}')
case("json_too_deep_33", err(400, "json_too_deep",
                             note="API_MAX_JSON_DEPTH is 32 (api/internal.h)"),
     b'{"q":' + b"[" * 40 + b"]" * 40 + b',"k":[[1,0]],"v":[[1,2]]}')

GEN_DEEP = '''"""100 000-deep nesting inside "q" (200 KB body)."""
import json

def generate():
    depth = 100000
    body = b'{"q":' + b"[" * depth + b"]" * depth + b'}'
    return (b"POST /v1/attention HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n"
            b"Content-Type: application/json\\r\\n"
            b"Content-Length: " + str(len(body)).encode() + b"\\r\\n"
            b"Connection: close\\r\\n\\r\\n" + body)
'''
case("json_deep_100000", err(400, "json_too_deep", flags=BIG_CAP), gen=GEN_DEEP)

GEN_DEEP_OBJ = '''"""100 000-deep nesting of objects {"a":{"a":...}} (600 KB body)."""

def generate():
    depth = 100000
    body = b'{"a":' * depth + b'1' + b'}' * depth
    return (b"POST /v1/attention HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n"
            b"Content-Type: application/json\\r\\n"
            b"Content-Length: " + str(len(body)).encode() + b"\\r\\n"
            b"Connection: close\\r\\n\\r\\n" + body)
'''
case("json_deep_objects_100000", err(400, "json_too_deep", flags=BIG_CAP), gen=GEN_DEEP_OBJ)

# ---- media type (415) ----------------------------------------------------
case("content_type_text_plain", err(415, "unsupported_media_type"), VALID,
     content_type="text/plain")
case("content_type_missing", err(415, "unsupported_media_type",
                                 note="a non-empty body without Content-Type"),
     VALID, content_type=None)
case("content_type_form", err(415, "unsupported_media_type"), VALID,
     content_type="application/x-www-form-urlencoded")
case("content_type_json_prefix_trick", err(415, "unsupported_media_type",
                                           note="application/jsonx is not application/json"),
     VALID, content_type="application/jsonx")

# ---- wrong types, null elements, ragged, empty (422) ---------------------
case("missing_q", err(422, "invalid_field", ["/q", ""]), without(VALID, "q"))
case("missing_v", err(422, "invalid_field", ["/v", ""]), without(VALID, "v"))
case("q_is_string", err(422, "invalid_field", "/q"), with_(VALID, q="abc"))
case("q_is_number", err(422, "invalid_field", "/q"), with_(VALID, q=5))
case("q_element_string", err(422, "invalid_field", "/q/0/1"), with_(VALID, q=[[1, "0"]]))
case("q_element_bool", err(422, "invalid_field", "/q/0/0"), with_(VALID, q=[[True, 0]]))
case("k_null_element", err(422, "invalid_field", "/k/1/0"),
     with_(VALID, k=[[1, 0], [None, 1]]))
case("v_null_row", err(422, ["invalid_field", "ragged_matrix"], "/v/1"), with_(VALID, v=[[1, 2], None]))
case("k_ragged_rows", err(422, "ragged_matrix", "/k/2"),
     with_(VALID, k=[[1, 0], [0, 1], [1]], v=[[1, 2], [3, 4], [5, 6]]))
case("q_ragged_3d", err(422, "ragged_matrix", "/q/1/0"),
     with_(VALID, q=[[[1, 0]], [[1, 0, 3]]], k=[[[1, 0], [0, 1]]], v=[[[1, 2], [3, 4]]]))
case("q_ragged_heads", err(422, "ragged_matrix", "/q/1"),
     with_(VALID, q=[[[1, 0]], [[1, 0], [0, 1]]], k=[[[1, 0], [0, 1]]], v=[[[1, 2], [3, 4]]]))
case("q_mixed_depth", err(422, ["ragged_matrix", "invalid_field"], ["/q/1", "/q/1/0"]),
     with_(VALID, q=[[1, 0], [[1], [0]]]))
case("q_empty", err(422, "empty_matrix", "/q"), with_(VALID, q=[]))
case("q_empty_rows", err(422, "empty_matrix", ["/q", "/q/0"]), with_(VALID, q=[[]]))
case("k_empty", err(422, "empty_matrix", "/k"), with_(VALID, k=[], v=[]))
case("q_rank4_k_rank2", err(422, "shape_mismatch", "/k",
                            note="q, k and v must have one rank (4 is a batch)"),
     with_(VALID, q=[[[[1, 0]]]]))
case("q_rank5", err(422, "invalid_field", "/q/0/0/0/0",
                    note="rank 5 is not a supported shape"),
     with_(VALID, q=[[[[[1, 0]]]]]))
case("q_rank1", err(422, ["invalid_field", "shape_mismatch"], "/q",
                    note="a vector is not a matrix"),
     with_(VALID, q=[1, 0]))

# ---- dimension mismatches (422 shape_mismatch) ---------------------------
case("dk_mismatch", err(422, "shape_mismatch", ["/k", "/q"]),
     with_(VALID, k=[[1, 0, 0], [0, 1, 0]]))
case("kv_length_mismatch", err(422, "shape_mismatch", ["/v", "/k"]),
     with_(VALID, v=[[1, 2], [3, 4], [5, 6]]))
case("rank_mismatch_q3_k2", err(422, "shape_mismatch", ["/k", "/q"]),
     with_(VALID, q=[[[1, 0]]]))
case("rank_mismatch_k3_v2", err(422, "shape_mismatch", ["/v", "/k"]),
     with_(VALID, q=[[[1, 0]]], k=[[[1, 0], [0, 1]]]))
case("gqa_heads_not_divisible", err(422, "shape_mismatch", ["/k", "/q"],
                                    note="h=3, h_kv=2: h % h_kv != 0"),
     {"q": [[[1, 0]]] * 3, "k": [[[1, 0]]] * 2, "v": [[[1, 2]]] * 2})
case("gqa_more_kv_heads", err(422, "shape_mismatch", ["/k", "/q"]),
     {"q": [[[1, 0]]] * 2, "k": [[[1, 0]]] * 4, "v": [[[1, 2]]] * 4})
case("kv_heads_mismatch", err(422, "shape_mismatch", ["/v", "/k"]),
     {"q": [[[1, 0]]] * 2, "k": [[[1, 0]]] * 2, "v": [[[1, 2]]] * 1})
case("bias_q_wrong_length", err(422, "shape_mismatch", "/bias/q"),
     with_(VALID, bias={"q": [1, 2, 3]}))
case("bias_k_wrong_length", err(422, "shape_mismatch", "/bias/k"),
     with_(VALID, bias={"k": [1]}))
case("bias_v_wrong_length", err(422, "shape_mismatch", "/bias/v"),
     with_(VALID, bias={"v": [1, 2, 3]}))
case("bias_k_wrong_heads", err(422, "shape_mismatch", "/bias/k",
                               note="[h_kv][d] with 3 rows for h_kv=1"),
     with_(VALID, bias={"k": [[1, 0], [1, 0], [1, 0]]}))
case("bias_unknown_member", err(422, "invalid_field", "/bias/z"),
     with_(VALID, bias={"z": [1, 0]}))
case("bias_not_object", err(422, "invalid_field", "/bias"), with_(VALID, bias=[1, 0]))
case("attn_bias_wrong_shape", err(422, "shape_mismatch", "/attn_bias"),
     with_(VALID, attn_bias=[[0, 0, 0]]))
case("attn_bias_wrong_rows", err(422, "shape_mismatch", "/attn_bias"),
     with_(VALID, attn_bias=[[0, 0], [0, 0]]))
case("attn_bias_string_entry", err(422, "invalid_field", "/attn_bias/0/1"),
     with_(VALID, attn_bias=[[0, "x"]]))
case("mask_wrong_shape", err(422, "shape_mismatch", "/mask"),
     with_(VALID, mask=[[True]]))
case("mask_number_entry", err(422, "invalid_field", "/mask/0/0"),
     with_(VALID, mask=[[1, 0]]))
case("mask_wrong_heads", err(422, "shape_mismatch", "/mask",
                             note="3 mask heads for a 2-D q (h=1)"),
     with_(VALID, mask=[[[True, True]]] * 3))

# ---- non-finite and float32 range (422 non_finite) -----------------------
case("float32_input_overflow", err(422, "non_finite", ["/q/0/0", "/q"],
                                   note="1e39 is finite as float64 but not as float32"),
     with_(VALID, q=[[1e39, 0]], dtype="float32"))
case("float32_scores_overflow", err(422, "non_finite",
                                    note="q.k = 1e60 overflows float32 scores; no Inf may "
                                         "leave the service"),
     with_(VALID, q=[[1e30, 0]], k=[[1e30, 0], [0, 1]], dtype="float32"))
case("float64_scores_overflow", err(422, "non_finite",
                                    note="q.k = 1e400 overflows double"),
     with_(VALID, q=[[1e200, 0]], k=[[1e200, 0], [0, 1]]))

# ---- float16 / bfloat16 range (422 non_finite) -----------------------------
case("float16_input_overflow", err(422, "non_finite", "/k/0/0",
                                   note="70000 is past float16's largest 65504"),
     with_(VALID, k=[[70000, 0], [0, 1]], dtype="float16"))
case("float16_input_tie_overflow", err(422, "non_finite", "/v/1/1",
                                       note="65520 is the midpoint between 65504 and "
                                            "2^16: ties to even round it to infinity"),
     with_(VALID, v=[[1, 2], [3, 65520]], dtype="float16"))
case("float16_bias_overflow", err(422, "non_finite", "/bias/v/0",
                                  note="bias vectors are rounded to the dtype too"),
     with_(VALID, bias={"v": [1e5, 0]}, dtype="float16"))
case("float16_attn_bias_overflow", err(422, "non_finite", "/attn_bias/0/1"),
     with_(VALID, attn_bias=[[None, -1e6]], dtype="float16"))
case("bfloat16_input_overflow", err(422, "non_finite", "/q/0/0",
                                    note="3.4e38 rounds past bfloat16's largest 3.3895e38"),
     with_(VALID, q=[[3.4e38, 0]], dtype="bfloat16"))
case("float16_scores_overflow", err(422, "non_finite", "/scores/0/0",
                                    note="q.k/sqrt(2) = 127279 does not fit float16: the "
                                         "result is refused, never sent as Inf"),
     with_(VALID, q=[[300, 300]], k=[[300, 300], [0, 1]], dtype="float16"))
case("float16_base64_inf", err(422, "non_finite", ["/q/data", "/q"],
                               note="little-endian float16 0x7C00 is +Inf"),
     with_(VALID, q={"shape": [1, 2], "dtype": "float16", "data": "AHwAAA=="},
           dtype="float16"))
case("float16_base64_wrong_length", err(422, "invalid_field", ["/q/data", "/q"],
                                        note="shape [1,2] float16 needs 4 bytes; 8 are sent"),
     with_(VALID, q={"shape": [1, 2], "dtype": "float16", "data": "AAAAAAAAAAA="},
           dtype="float16"))

# ---- base64 tensors ------------------------------------------------------
def b64t(shape, data, dtype="float64"):
    return {"shape": shape, "dtype": dtype, "data": data}


case("base64_bad_alphabet", err(422, "invalid_field", ["/q/data", "/q"]),
     with_(VALID, q=b64t([1, 2], "AAAA!!!!AAAAAAAAAAAAAAAA")))
# 16 rows of float64: 256 bytes, 344 characters, so the vector loops of
# api/base64.c (32- and 64-character blocks) meet the bad byte, not the tail.
LONG_B64 = "QUJD" * 85 + "QQ=="
case("base64_bad_alphabet_long", err(422, "invalid_field", ["/q/data", "/q"],
                                     note="'!' at character 100, in a vector block"),
     with_(VALID, q=b64t([16, 2], LONG_B64[:100] + "!" + LONG_B64[101:])))
case("base64_non_ascii_long", err(422, "invalid_field", ["/q/data", "/q"],
                                  note="'\u00e9' (two UTF-8 bytes) at character 70"),
     with_(VALID, q=b64t([16, 2], LONG_B64[:70] + "\u00e9" + LONG_B64[72:])))
case("base64_wrong_length", err(422, ["shape_mismatch", "invalid_field"], ["/q/data", "/q"],
                                note="shape [2,2] float64 needs 32 bytes; 16 are sent"),
     with_(VALID, q=b64t([2, 2], "AAAAAAAAAAAAAAAAAAAAAA==")))
case("base64_bad_padding", err(422, "invalid_field", ["/q/data", "/q"]),
     with_(VALID, q=b64t([1, 2], "AAAAAAAAAAAAAAAAAAAAA=A")))
case("base64_shape_1e9_by_1e9", err(422, "limit_exceeded", ["/q", "/q/shape"]),
     with_(VALID, q=b64t([1000000000, 1000000000], "AAAA")))
case("base64_shape_overflow_u64", err(422, "limit_exceeded", ["/q", "/q/shape"],
                                      note="2^32 * 2^32 * 8 overflows size_t"),
     with_(VALID, q=b64t([4294967296, 4294967296, 8], "AAAA")))
case("base64_shape_negative", err(422, "invalid_field", ["/q/shape/0", "/q/shape", "/q"]),
     with_(VALID, q=b64t([-1, 2], "AAAA")))
case("base64_shape_zero", err(422, ["empty_matrix", "invalid_field"], ["/q", "/q/shape", "/q/shape/0"]),
     with_(VALID, q=b64t([0, 2], "")))
case("base64_bad_dtype", err(422, "invalid_field", "/q/dtype"),
     with_(VALID, q=b64t([1, 2], "AAAAAAAAAAAAAAAAAAAAAA==", dtype="int8")))
case("base64_nan_payload", err(422, "non_finite", ["/q", "/q/data", "/q/0/0"],
                               note="little-endian float64 NaN 0x7ff8000000000000"),
     with_(VALID, q=b64t([1, 2], "AAAAAAAA+H8AAAAAAAAAAA==")))
case("base64_unknown_member", err(422, "invalid_field", "/q/extra"),
     with_(VALID, q={"shape": [1, 2], "dtype": "float64",
                     "data": "AAAAAAAAAAAAAAAAAAAAAA==", "extra": 1}))

# ---- options with invalid values (422 invalid_field) ---------------------
for name, field, value, path in [
    ("softmax_unknown", "softmax", "bogus", "/softmax"),
    ("softmax_number", "softmax", 5, "/softmax"),
    ("sink_logit_string", "sink_logit", "x", "/sink_logit"),
    ("causal_unknown", "causal", "sideways", "/causal"),
    ("causal_number", "causal", 1, "/causal"),
    ("alibi_string", "alibi", "yes", "/alibi"),
    ("alibi_slopes_string", "alibi", {"slopes": "x"}, "/alibi/slopes"),
    ("rope_not_object", "rope", "yes", "/rope"),
    ("rope_negative_base", "rope", {"base": -1}, "/rope/base"),
    ("rope_pairs_unknown", "rope", {"base": 10000, "pairs": "diagonal"}, "/rope/pairs"),
    ("scale_zero", "scale", 0, "/scale"),
    ("scale_negative", "scale", -1, "/scale"),
    ("scale_string", "scale", "x", "/scale"),
    ("empty_rows_unknown", "empty_rows", "ignore", "/empty_rows"),
    ("dtype_float8", "dtype", "float8", "/dtype"),
    ("return_unknown_item", "return", ["logits"], "/return/0"),
    ("return_not_array", "return", 7, "/return"),
    ("encoding_hex", "encoding", "hex", "/encoding"),
    ("digits_zero", "digits", 0, "/digits"),
    ("digits_18", "digits", 18, "/digits"),
    ("digits_fraction", "digits", 3.5, "/digits"),
    ("digits_string", "digits", "5", "/digits"),
    ("unknown_field", "temperature", 1, "/temperature"),
]:
    case("opt_" + name, err(422, "invalid_field", path), with_(VALID, **{field: value}))

case("opt_sink_without_logit", err(422, "invalid_field", ["/sink_logit", "/softmax"],
                                   note='"sink" needs sink_logit'),
     with_(VALID, softmax="sink"))
case("opt_alibi_slopes_wrong_count", err(422, "shape_mismatch", "/alibi/slopes",
                                         note="h=1 needs one slope"),
     with_(VALID, alibi={"slopes": [0.5, 0.25]}))
case("opt_rope_odd_dk", err(422, ["invalid_field", "shape_mismatch"], ["/rope", "/q"],
                            note="RoPE needs an even d_k"),
     with_(VALID, q=[[1, 0, 0]], k=[[1, 0, 0], [0, 1, 0]], rope={"base": 10000}))
case("empty_row_error", err(422, "empty_row", note='empty_rows "error" with a fully masked row'),
     with_(VALID, mask=[[False, False]], empty_rows="error"))

# ---- the fields of current models (DESIGN.md part 2) ---------------------
Q4 = [[[[1, 0]]], [[[0, 1]]]]
KV4 = {"k": [[[[1, 0], [0, 1]]], [[[1, 1], [0, 1]]]],
       "v": [[[[1, 2], [3, 4]]], [[[5, 6], [7, 8]]]]}
BATCH = dict(q=Q4, **KV4)
for name, expect, change in [
    ("positions_not_object", err(422, "invalid_field", "/positions"), {"positions": [0]}),
    ("positions_unknown_member", err(422, "invalid_field", "/positions/x"),
     {"positions": {"x": [0]}}),
    ("positions_negative", err(422, "invalid_field", "/positions/q/0"),
     {"positions": {"q": [-1]}}),
    ("positions_fraction", err(422, "invalid_field", "/positions/q/0"),
     {"positions": {"q": [0.5]}}),
    ("positions_beyond_2_53", err(422, "invalid_field", "/positions/q/0"),
     {"positions": {"q": [2 ** 53 + 1]}}),
    ("positions_k_wrong_length", err(422, "shape_mismatch", "/positions/k"),
     {"positions": {"k": [0]}}),
    ("positions_k_batch_without_batch", err(422, "shape_mismatch", "/positions/k"),
     {"positions": {"k": [[0, 1], [0, 1]]}}),
    ("segments_missing_k", err(422, "invalid_field", "/segments/k"),
     {"segments": {"q": [0]}}),
    ("segments_q_wrong_length", err(422, "shape_mismatch", "/segments/q"),
     {"segments": {"q": [0, 0], "k": [0, 0]}}),
    ("segments_k_string_id", err(422, "invalid_field", "/segments/k/1"),
     {"segments": {"q": [0], "k": [0, "a"]}}),
    ("window_not_object", err(422, "invalid_field", "/window"), {"window": 5}),
    ("window_left_negative", err(422, "invalid_field", "/window/left"),
     {"window": {"left": -1}}),
    ("window_right_fraction", err(422, "invalid_field", "/window/right"),
     {"window": {"right": 1.5}}),
    ("window_sinks_string", err(422, "invalid_field", "/window/sinks"),
     {"window": {"sinks": "4"}}),
    ("window_unknown_member", err(422, "invalid_field", "/window/size"),
     {"window": {"size": 3}}),
    ("softcap_zero", err(422, "invalid_field", "/softcap"), {"softcap": 0}),
    ("softcap_negative", err(422, "invalid_field", "/softcap"), {"softcap": -50}),
    ("softcap_string", err(422, "invalid_field", "/softcap"), {"softcap": "50"}),
    ("sink_logits_wrong_length", err(422, "shape_mismatch", "/sink_logit"),
     {"softmax": "sink", "sink_logit": [1, 2]}),
    ("sink_logits_null_entry", err(422, "invalid_field", "/sink_logit/0"),
     {"softmax": "sink", "sink_logit": [None]}),
    ("sink_logits_without_sink", err(422, "invalid_field", "/sink_logit"),
     {"sink_logit": [1]}),
    ("rope_dims_odd", err(422, "invalid_field", "/rope/dims"), {"rope": {"dims": 1}}),
    ("rope_dims_over_d_k", err(422, "invalid_field", "/rope/dims"), {"rope": {"dims": 4}}),
    ("rope_dims_negative", err(422, "invalid_field", "/rope/dims"), {"rope": {"dims": -2}}),
    ("rope_scaling_unknown_type", err(422, "invalid_field", "/rope/scaling/type"),
     {"rope": {"scaling": {"type": "dynamic", "factor": 2}}}),
    ("rope_scaling_missing_factor", err(422, "invalid_field", "/rope/scaling/factor"),
     {"rope": {"scaling": {"type": "linear"}}}),
    ("rope_scaling_factor_below_1", err(422, "invalid_field", "/rope/scaling/factor"),
     {"rope": {"scaling": {"type": "linear", "factor": 0.5}}}),
    ("rope_scaling_foreign_parameter", err(422, "invalid_field", "/rope/scaling/beta_fast"),
     {"rope": {"scaling": {"type": "linear", "factor": 2, "beta_fast": 32}}}),
    ("rope_scaling_ntk_two_dims", err(422, "invalid_field", "/rope/scaling",
                                      note="base' = base*factor^(r/(r-2)) needs r > 2"),
     {"rope": {"scaling": {"type": "ntk", "factor": 2}}}),
    ("rope_llama3_missing_original_max", err(422, "invalid_field",
                                             "/rope/scaling/original_max_position"),
     {"rope": {"scaling": {"type": "llama3", "factor": 8, "low_freq_factor": 1,
                           "high_freq_factor": 4}}}),
    ("rope_llama3_high_not_above_low", err(422, "invalid_field",
                                           "/rope/scaling/high_freq_factor"),
     {"rope": {"scaling": {"type": "llama3", "factor": 8, "low_freq_factor": 4,
                           "high_freq_factor": 4, "original_max_position": 8192}}}),
    ("rope_yarn_missing_original_max", err(422, "invalid_field",
                                           "/rope/scaling/original_max_position"),
     {"rope": {"scaling": {"type": "yarn", "factor": 4}}}),
    ("rope_yarn_attention_factor_zero", err(422, "invalid_field",
                                            "/rope/scaling/attention_factor"),
     {"rope": {"scaling": {"type": "yarn", "factor": 4, "original_max_position": 4096,
                           "attention_factor": 0}}}),
    ("rope_yarn_beta_fast_below_slow", err(422, "invalid_field", "/rope/scaling/beta_fast"),
     {"rope": {"scaling": {"type": "yarn", "factor": 4, "original_max_position": 4096,
                           "beta_fast": 1, "beta_slow": 2}}}),
    ("rope_yarn_base_1", err(422, "invalid_field", "/rope/base"),
     {"rope": {"base": 1, "scaling": {"type": "yarn", "factor": 4,
                                      "original_max_position": 4096}}}),
    ("rope_yarn_truncate_string", err(422, "invalid_field", "/rope/scaling/truncate"),
     {"rope": {"scaling": {"type": "yarn", "factor": 4, "original_max_position": 4096,
                           "truncate": "false"}}}),
    ("rope_yarn_truncate_number", err(422, "invalid_field", "/rope/scaling/truncate"),
     {"rope": {"scaling": {"type": "yarn", "factor": 4, "original_max_position": 4096,
                           "truncate": 0}}}),
    ("rope_truncate_not_yarn", err(422, "invalid_field", "/rope/scaling/truncate",
                                   note="truncate is a parameter of yarn alone"),
     {"rope": {"scaling": {"type": "linear", "factor": 2, "truncate": False}}}),
]:
    case("model_" + name, expect, with_(VALID, **change))
for name, expect, body in [
    ("batch_k_rank3", err(422, "shape_mismatch", "/k"),
     {"q": Q4, "k": [[[1, 0], [0, 1]]], "v": [[[1, 2], [3, 4]]]}),
    ("batch_sizes_differ", err(422, "shape_mismatch", "/k"),
     {"q": Q4, "k": [[[[1, 0], [0, 1]]]], "v": [[[[1, 2], [3, 4]]]]}),
    ("batch_mask_wrong_batch", err(422, "shape_mismatch", "/mask"),
     with_(BATCH, mask=[[[[True, True]]]] * 3)),
    ("batch_attn_bias_wrong_heads", err(422, "shape_mismatch", "/attn_bias"),
     with_(BATCH, attn_bias=[[[[0, 0]], [[0, 0]]]] * 2)),
    ("batch_mask_rank5", err(422, "invalid_field", "/mask/0/0/0/0"),
     with_(BATCH, mask=[[[[[True, True]]]]])),
    ("batch_positions_wrong_rows", err(422, "shape_mismatch", "/positions/q"),
     with_(BATCH, positions={"q": [[0], [0], [0]]})),
    ("batch_segments_wrong_rows", err(422, "shape_mismatch", "/segments/q"),
     with_(BATCH, segments={"q": [[0], [0], [1]], "k": [0, 0]})),
    ("batch_heads_out_of_range", err(422, "invalid_field", "/heads/0"),
     with_(BATCH, heads=[7])),
]:
    case("model_" + name, expect, body)
case("model_session_sinks_wrong_length", err(422, "shape_mismatch", "/sink_logit"),
     with_(SESSION, heads=2, softmax="sink", sink_logit=[1]), path="/v1/sessions")
case("model_session_softcap_zero", err(422, "invalid_field", "/softcap"),
     with_(SESSION, softcap=0), path="/v1/sessions")
case("model_session_rope_dims_odd", err(422, "invalid_field", "/rope/dims"),
     with_(SESSION, rope={"dims": 1}), path="/v1/sessions")
case("model_session_rope_yarn_truncate_string",
     err(422, "invalid_field", "/rope/scaling/truncate"),
     with_(SESSION, rope={"scaling": {"type": "yarn", "factor": 4,
                                      "original_max_position": 4096, "truncate": "no"}}),
     path="/v1/sessions")
case("model_session_window_negative",
     err(422, "invalid_field", "/window/left", setup={"session": SESSION}),
     {"q": [[1, 0]], "k": [[1, 0]], "v": [[1, 0]], "window": {"left": -3}},
     path="/v1/sessions/{{SID}}/attention")
# rolling sessions: the create's window, what their queries and truncates may ask
ROLLING = with_(SESSION, window={"left": 2})
ROLLED = {"session": ROLLING, "append": [{"k": [[1, 0]] * 200, "v": [[0, 1]] * 200}]}
case("session_rolling_window_right", err(422, "invalid_field", "/window/right",
                                         note="a rolling session is causal"),
     with_(SESSION, window={"left": 4, "right": 1}), path="/v1/sessions")
case("session_rolling_window_no_left", err(422, "invalid_field", "/window/left"),
     with_(SESSION, window={"sinks": 4}), path="/v1/sessions")
case("session_rolling_window_not_object", err(422, "invalid_field", "/window"),
     with_(SESSION, window=[4, 0]), path="/v1/sessions")
case("session_rolling_sinks_fraction", err(422, "invalid_field", "/window/sinks"),
     with_(SESSION, window={"left": 4, "sinks": 1.5}), path="/v1/sessions")
case("session_rolling_query_window", err(422, "invalid_field", "/window", setup=ROLLED),
     {"q": [[1, 0]], "window": {"left": 1}}, path="/v1/sessions/{{SID}}/attention")
case("session_rolling_query_not_causal", err(422, "invalid_field", "/causal", setup=ROLLED),
     {"q": [[1, 0]], "causal": False}, path="/v1/sessions/{{SID}}/attention")
case("session_rolling_query_top_left", err(422, "invalid_field", "/causal", setup=ROLLED),
     {"q": [[1, 0]], "causal": "top_left"}, path="/v1/sessions/{{SID}}/attention")
case("session_rolling_query_reach", err(409, "length_conflict", "/q", setup=ROLLED,
                                        note="rows 192..199 held: 20 query rows reach back "
                                             "to row 178"),
     {"q": [[1, 0]] * 20}, path="/v1/sessions/{{SID}}/attention")
case("session_rolling_truncate_dropped", err(409, "length_conflict", "/length", setup=ROLLED,
                                             note="rows 192..199 held, window left 2: "
                                                  "length 194..200"),
     {"length": 10}, path="/v1/sessions/{{SID}}/truncate")
V2_QKV = [{"name": "q", "shape": [1, 2], "datatype": "FP64", "data": [1, 0]},
          {"name": "k", "shape": [2, 2], "datatype": "FP64", "data": [1, 0, 0, 1]},
          {"name": "v", "shape": [2, 2], "datatype": "FP64", "data": [1, 2, 3, 4]}]
for name, body in [
    ("softcap_zero", {"inputs": V2_QKV, "parameters": {"softcap": 0}}),
    ("window_left_negative", {"inputs": V2_QKV, "parameters": {"window_left": -1}}),
    ("rope_dims_odd", {"inputs": V2_QKV, "parameters": {"rope_dims": 3}}),
    ("rope_scaling_unknown", {"inputs": V2_QKV, "parameters": {"rope_scaling": "dynamic"}}),
    ("rope_factor_without_scaling", {"inputs": V2_QKV, "parameters": {"rope_factor": 2}}),
    ("rope_truncate_string", {"inputs": V2_QKV, "parameters": {
        "rope_scaling": "yarn", "rope_factor": 2, "rope_original_max_position": 8,
        "rope_truncate": "false"}}),
    ("rope_truncate_without_scaling", {"inputs": V2_QKV, "parameters": {"rope_truncate": False}}),
    ("positions_negative", {"inputs": V2_QKV + [
        {"name": "positions_q", "shape": [1], "datatype": "INT64", "data": [-1]}]}),
    ("positions_fp64", {"inputs": V2_QKV + [
        {"name": "positions_q", "shape": [1], "datatype": "FP64", "data": [1]}]}),
    ("segments_q_alone", {"inputs": V2_QKV + [
        {"name": "segments_q", "shape": [1], "datatype": "INT32", "data": [0]}]}),
    ("sink_logits_wrong_shape", {"inputs": V2_QKV + [
        {"name": "sink_logits", "shape": [2], "datatype": "FP64", "data": [0, 1]}],
        "parameters": {"softmax": "sink"}}),
    ("mask_batch_mismatch", {"inputs": [
        {"name": "q", "shape": [2, 2, 1, 2], "datatype": "FP64", "data": [1, 0, 0, 1, 1, 1, 0, 2]},
        {"name": "k", "shape": [2, 1, 2, 2], "datatype": "FP64", "data": [1, 0, 0, 1, 1, 1, 2, 0]},
        {"name": "v", "shape": [2, 1, 2, 2], "datatype": "FP64", "data": [1, 2, 3, 4, 5, 6, 7, 8]},
        {"name": "mask", "shape": [3, 1, 1, 2], "datatype": "BOOL",
         "data": [True, False, True, True, False, True]}]}),
    ("attn_bias_heads_mismatch", {"inputs": [
        {"name": "q", "shape": [2, 2, 1, 2], "datatype": "FP64", "data": [1, 0, 0, 1, 1, 1, 0, 2]},
        {"name": "k", "shape": [2, 1, 2, 2], "datatype": "FP64", "data": [1, 0, 0, 1, 1, 1, 2, 0]},
        {"name": "v", "shape": [2, 1, 2, 2], "datatype": "FP64", "data": [1, 2, 3, 4, 5, 6, 7, 8]},
        {"name": "attn_bias", "shape": [2, 3, 1, 2], "datatype": "FP64",
         "data": [0.0] * 12}]}),
    ("batch_k_rank3", {"inputs": [
        {"name": "q", "shape": [2, 1, 1, 2], "datatype": "FP64", "data": [1, 0, 0, 1]},
        {"name": "k", "shape": [1, 2, 2], "datatype": "FP64", "data": [1, 0, 0, 1]},
        {"name": "v", "shape": [1, 2, 2], "datatype": "FP64", "data": [1, 2, 3, 4]}]}),
]:
    case("model_v2_" + name, {"status": 400, "error_shape": "v2"}, body,
         path="/v2/models/attention/infer")

# ---- POST /v1/verify: issue 16's inputs and the half dtypes ----------------
VERIFY = {"q": [[1, 0], [0, 1]], "k": [[1, 0], [0, 1], [1, 1]], "v": [[1], [2], [3]]}
for name, expect, change in [
    ("positions_negative", err(422, "invalid_field", "/positions/q/1"),
     {"positions": {"q": [0, -1]}}),
    ("positions_wrong_length", err(422, "shape_mismatch", "/positions/k"),
     {"positions": {"k": [0, 1]}}),
    ("positions_batch", err(422, "shape_mismatch", "/positions/q"),
     {"positions": {"q": [[0, 1], [1, 2]]}}),
    ("segments_q_alone", err(422, "invalid_field", "/segments/k"), {"segments": {"q": [0, 1]}}),
    ("segments_wrong_length", err(422, "shape_mismatch", "/segments/k"),
     {"segments": {"q": [0, 1], "k": [0, 1]}}),
    ("window_negative", err(422, "invalid_field", "/window/left"), {"window": {"left": -1}}),
    ("window_fraction", err(422, "invalid_field", "/window/sinks"), {"window": {"sinks": 1.5}}),
    ("softcap_zero", err(422, "invalid_field", "/softcap"), {"softcap": 0}),
    ("sinks_string", err(422, "invalid_field", "/sink_logit/1"),
     {"softmax": "sink", "sink_logit": [1, "x"]}),
    ("sinks_too_many", err(422, "invalid_field", "/sink_logit"),
     {"softmax": "sink", "sink_logit": list(range(17))}),
    ("rope_dims_odd", err(422, "invalid_field", "/rope/dims"), {"rope": {"dims": 1}}),
    ("rope_scaling_unknown", err(422, "invalid_field", "/rope/scaling/type"),
     {"rope": {"scaling": {"type": "dynamic", "factor": 2}}}),
    ("rope_yarn_truncate_string", err(422, "invalid_field", "/rope/scaling/truncate"),
     {"rope": {"scaling": {"type": "yarn", "factor": 4, "original_max_position": 32,
                           "truncate": "false"}}}),
    ("float16_input_overflow", err(422, "non_finite", "/v/2/0"),
     {"dtype": "float16", "v": [[1], [2], [70000]]}),
    ("float16_result_overflow", err(422, "non_finite", "/checks/0/data/scores_core/0/0"),
     {"dtype": "float16", "q": [[300, 300], [0, 1]], "k": [[300, 300], [0, 1], [1, 1]]}),
    # heads and batches
    ("batch_heads_not_multiple", err(422, "shape_mismatch", "/k"),
     {"q": [[[1, 0]], [[0, 1]], [[1, 1]]], "k": [[[1, 0]], [[0, 1]]], "v": [[[1]], [[2]]]}),
    ("batch_rank_mismatch", err(422, "shape_mismatch", "/k"), {"q": [[[1, 0]], [[0, 1]]]}),
    ("batch_size_mismatch", err(422, "shape_mismatch", "/k"),
     {"q": [[[[1, 0]]], [[[0, 1]]]], "k": [[[[1, 0]]]], "v": [[[[1]]]]}),
    ("batch_sinks_wrong_length", err(422, "shape_mismatch", "/sink_logit"),
     {"q": [[[1, 0]], [[0, 1]], [[1, 1]]], "k": [[[1, 0]]], "v": [[[1]]], "softmax": "sink",
      "sink_logit": [1, 2]}),
    ("batch_positions_wrong_batches", err(422, "shape_mismatch", "/positions/q"),
     {"q": [[[[1, 0]]], [[[0, 1]]]], "k": [[[[1, 0]]], [[[0, 1]]]], "v": [[[[1]]], [[[2]]]],
      "positions": {"q": [[0], [1], [2]]}}),
    ("batch_too_many_heads", err(422, "limit_exceeded", "/q", note="verify runs at most 1024 "
     "heads (batch elements times heads) a request"),
     {"q": [[[1, 0]]] * 1025, "k": [[[1, 0]]], "v": [[[1]]]}),
    ("batch_float16_result_overflow", err(422, "non_finite",
                                          "/elements/1/checks/0/data/scores_core/0/0"),
     {"dtype": "float16", "q": [[[1, 0]], [[300, 300]]], "k": [[[300, 300], [0, 1]]],
      "v": [[[1], [2]]]}),
    ("attn_bias", err(422, "invalid_field", "/attn_bias", note="the checks set attn_bias and "
     "mask themselves"), {"attn_bias": [[0, 0, 0], [0, 0, 0]]}),
]:
    case("verify_" + name, expect, with_(VERIFY, **change), path="/v1/verify")

# ---- limits (422) --------------------------------------------------------
case("limit_inputs_over_max_elements",
     err(422, "limit_exceeded", flags=SMALL_OUT, note="--max-elements 100; 3*60*2 inputs"),
     {"q": [[1, 0]] * 60, "k": [[1, 0]] * 60, "v": [[1, 2]] * 60})
case("limit_response_too_large",
     err(422, "response_too_large", flags=SMALL_OUT,
         note="--max-elements 100: 60 inputs fit, scores+weights 2*100 do not"),
     {"q": [[1, 0]] * 10, "k": [[1, 0]] * 10, "v": [[1, 2]] * 10})
case("limit_response_fits_when_output_only",
     {"status": 200, "flags": SMALL_OUT, "error_shape": "none",
      "note": "control: the same request with return [output] is 20 numbers"},
     {"q": [[1, 0]] * 10, "k": [[1, 0]] * 10, "v": [[1, 2]] * 10, "return": ["output"]})
case("limit_base64_response_too_large",
     err(422, "response_too_large", flags=SMALL_OUT,
         note="base64 encoding does not escape the output limit"),
     {"q": [[1, 0]] * 10, "k": [[1, 0]] * 10, "v": [[1, 2]] * 10, "encoding": "base64"})
ROWS15 = {"k": [[1, 0]] * 15, "v": [[0, 1]] * 15}
case("limit_session_kv_response_too_large",
     err(422, "response_too_large", flags=SMALL_OUT,
         setup={"session": SESSION, "append": [ROWS15, ROWS15]},
         note="30 cached rows: GET .../kv would print 120 numbers > --max-elements 100"),
     method="GET", path="/v1/sessions/{{SID}}/kv")
case("limit_session_attention_response_too_large",
     err(422, "response_too_large", flags=SMALL_OUT,
         setup={"session": SESSION, "append": [ROWS15, ROWS15]},
         note="2 queries x 30 keys: scores+weights+output = 124 numbers > 100"),
     {"q": [[1, 0], [0, 1]]}, path="/v1/sessions/{{SID}}/attention")
case("limit_session_append_over_max_elements",
     err(422, "limit_exceeded", flags=SMALL_OUT, setup={"session": SESSION}),
     {"k": [[1, 0]] * 40, "v": [[0, 1]] * 40}, path="/v1/sessions/{{SID}}/kv")
case("limit_session_max_tokens_huge", err(422, ["limit_exceeded", "invalid_field"], "/max_tokens",
                                          note="1e15 tokens can never be cached"),
     with_(SESSION, max_tokens=10 ** 15), path="/v1/sessions")

# ---- teaching returns: return qk/lse/stats, heads, weights_top_k, tokens (422) ---
case("teach_return_unknown_name", err(422, "invalid_field", "/return/1"),
     with_(VALID, **{"return": ["weights", "attention"]}))
case("teach_heads_not_array", err(422, "invalid_field", "/heads"), with_(VALID, heads=0))
case("teach_heads_empty", err(422, "invalid_field", "/heads"), with_(VALID, heads=[]))
case("teach_heads_negative", err(422, "invalid_field", "/heads/0"), with_(VALID, heads=[-1]))
case("teach_heads_fraction", err(422, "invalid_field", "/heads/0"), with_(VALID, heads=[0.5]))
case("teach_heads_out_of_range", err(422, "invalid_field", "/heads/1",
                                     note="a 2-D q has one head, index 0"),
     with_(VALID, heads=[0, 1]))
case("teach_heads_repeated", err(422, "invalid_field", "/heads/1"), with_(VALID, heads=[0, 0]))
case("teach_top_k_zero", err(422, "invalid_field", "/weights_top_k"),
     with_(VALID, weights_top_k=0))
case("teach_top_k_string", err(422, "invalid_field", "/weights_top_k"),
     with_(VALID, weights_top_k="4"))
case("teach_top_k_without_weights", err(422, "invalid_field", "/weights_top_k",
                                        note="top-k replaces the weights, so they must be asked for"),
     with_(VALID, weights_top_k=1, **{"return": ["output"]}))
case("teach_tokens_not_object", err(422, "invalid_field", "/tokens"),
     with_(VALID, tokens=["a"]))
case("teach_tokens_unknown_member", err(422, "invalid_field", "/tokens/v"),
     with_(VALID, tokens={"q": ["a"], "v": ["x", "y"]}))
case("teach_tokens_empty_object", err(422, "invalid_field", "/tokens"), with_(VALID, tokens={}))
case("teach_tokens_not_string", err(422, "invalid_field", "/tokens/k/1"),
     with_(VALID, tokens={"k": ["a", 7]}))
case("teach_tokens_too_long", err(422, "invalid_field", "/tokens/q/0",
                                  note="labels are at most 256 bytes of UTF-8"),
     with_(VALID, tokens={"q": ["\u00e9" * 129]}))
case("teach_tokens_nul", {"status": [400, 422], "code": ["invalid_json", "invalid_field"],
                          "note": "jansson refuses \\u0000 in strings (400); were it allowed, "
                                  "the label is refused at /tokens/q/0"},
     as_body(VALID)[:-1] + b',"tokens":{"q":["a\\u0000b"]}}')
case("teach_tokens_count_q", err(422, "shape_mismatch", "/tokens/q"),
     with_(VALID, tokens={"q": ["a", "b"]}))
case("teach_tokens_count_k", err(422, "shape_mismatch", "/tokens/k"),
     with_(VALID, tokens={"k": ["a"]}))
case("teach_top_k_response_too_large",
     err(422, "response_too_large", flags=SMALL_OUT,
         note="--max-elements 100: 10 rows of 8 indices and 8 values are 160 numbers"),
     {"q": [[1, 0]] * 10, "k": [[1, 0]] * 10, "v": [[1, 2]] * 10, "return": ["weights"],
      "weights_top_k": 8})
case("teach_session_heads_out_of_range",
     err(422, "invalid_field", "/heads/0", setup={"session": SESSION, "append": [ROWS15]}),
     {"q": [[1, 0]], "heads": [3]}, path="/v1/sessions/{{SID}}/attention")
case("teach_session_tokens_count",
     err(422, "shape_mismatch", "/tokens/k", setup={"session": SESSION, "append": [ROWS15]},
         note="tokens.k labels every cached key: 15"),
     {"q": [[1, 0]], "tokens": {"k": ["a"]}}, path="/v1/sessions/{{SID}}/attention")

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
         note="Content-Length 10 MB, only 1 KB sent: answer from the header, do not wait"),
     raw=(b"POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: 10000000\r\nConnection: close\r\n\r\n" + b" " * 1024))
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

# ---- sessions ----------------------------------------------------------------
UNKNOWN_ID = "AAAAAAAAAAAAAAAAAAAAAA"
case("session_unknown_get", err(404, "session_not_found"), method="GET",
     path="/v1/sessions/" + UNKNOWN_ID)
case("session_unknown_attention", err(404, "session_not_found"),
     {"q": [[1, 0]]}, path=f"/v1/sessions/{UNKNOWN_ID}/attention")
case("session_unknown_delete", err(404, "session_not_found"), method="DELETE",
     path="/v1/sessions/" + UNKNOWN_ID)
case("session_malformed_id", err(404, ["session_not_found", "not_found"]), method="GET",
     path="/v1/sessions/!!not*an*id!!")
case("session_malformed_long_id", err(404, ["session_not_found", "not_found"]),
     method="GET", path="/v1/sessions/" + "z" * 2000)
case("session_deleted_get", err(404, "session_not_found",
                                setup={"session": SESSION, "then": "delete"}),
     method="GET", path="/v1/sessions/{{SID}}")
case("session_deleted_append", err(404, "session_not_found",
                                   setup={"session": SESSION, "then": "delete"}),
     {"k": [[1, 0]], "v": [[1, 2]]}, path="/v1/sessions/{{SID}}/kv")
case("session_expired_get", err(404, "session_not_found",
                                setup={"session": with_(SESSION, ttl_s=1), "then": "expire",
                                       "sleep": 2.2}),
     method="GET", path="/v1/sessions/{{SID}}")
case("session_create_dk_zero", err(422, "invalid_field", "/d_k"), with_(SESSION, d_k=0),
     path="/v1/sessions")
case("session_create_dk_string", err(422, "invalid_field", "/d_k"), with_(SESSION, d_k="2"),
     path="/v1/sessions")
case("session_create_gqa_mismatch", err(422, ["shape_mismatch", "invalid_field"],
                                        ["/kv_heads", "/heads"]),
     with_(SESSION, heads=3, kv_heads=2), path="/v1/sessions")
case("session_create_unknown_field", err(422, "invalid_field", "/colour"),
     with_(SESSION, colour="red"), path="/v1/sessions")
case("session_create_bad_ttl", err(422, "invalid_field", "/ttl_s"), with_(SESSION, ttl_s=-5),
     path="/v1/sessions")
case("session_append_dk_mismatch", err(422, "shape_mismatch", ["/k", "/k/0"],
                                       setup={"session": SESSION}),
     {"k": [[1, 0, 0]], "v": [[1, 2]]}, path="/v1/sessions/{{SID}}/kv")
case("session_append_kv_rows_mismatch", err(422, "shape_mismatch", ["/v", "/k"],
                                            setup={"session": SESSION}),
     {"k": [[1, 0], [0, 1]], "v": [[1, 2]]}, path="/v1/sessions/{{SID}}/kv")
case("session_append_expected_length", err(409, "length_conflict", setup={"session": SESSION}),
     {"k": [[1, 0]], "v": [[1, 2]], "expected_length": 5}, path="/v1/sessions/{{SID}}/kv")
case("session_full", err(409, "session_full",
                         setup={"session": with_(SESSION, max_tokens=2)}),
     {"k": [[1, 0]] * 3, "v": [[1, 2]] * 3}, path="/v1/sessions/{{SID}}/kv")
case("session_attention_q_mismatch", err(422, "shape_mismatch", ["/q", "/q/0"],
                                         setup={"session": SESSION}),
     {"q": [[1, 0, 0]], "k": [[1, 0]], "v": [[1, 2]]},
     path="/v1/sessions/{{SID}}/attention")
case("session_truncate_negative", err(422, "invalid_field", "/length",
                                      setup={"session": SESSION}),
     {"length": -1}, path="/v1/sessions/{{SID}}/truncate")
case("session_truncate_beyond",
     err(422, ["invalid_field", "length_conflict"], ["/length", None],
         setup={"session": SESSION},
         note="truncating an empty session to 5 rows cannot roll back; 422 or 409"),
     {"length": 5}, path="/v1/sessions/{{SID}}/truncate")
case("session_method_put", err(405, "method_not_allowed", require_headers=["allow"],
                               setup={"session": SESSION}),
     SESSION, method="PUT", path="/v1/sessions/{{SID}}")
case("session_unknown_subroute", err(404, ["not_found", "session_not_found"],
                                     setup={"session": SESSION}),
     method="GET", path="/v1/sessions/{{SID}}/nothing")

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

# ---- Open Inference Protocol v2 (its own {"error":"..."} shape) ---------------
case("v2_infer_empty_body", {"status": 400, "error_shape": "v2",
                             "note": "found by fuzz_request: NULL body + 0 (UB) in api/v2.c"},
     b"", path="/v2/models/attention/infer", headers=["Content-Type: application/json"])
case("v2_infer_not_json", {"status": 400, "error_shape": "v2"},
     b"{\"inputs\": [", path="/v2/models/attention/infer")
case("v2_infer_header_length_too_big", {"status": 400, "error_shape": "v2"},
     b"{}", path="/v2/models/attention/infer",
     headers=["Inference-Header-Content-Length: 99999"])
V2QKV = [{"name": "q", "datatype": "FP64", "shape": [1, 2], "data": [1, 0]},
         {"name": "k", "datatype": "FP64", "shape": [2, 2], "data": [1, 0, 0, 1]},
         {"name": "v", "datatype": "FP64", "shape": [2, 1], "data": [1, 2]}]
case("v2_top_k_zero", {"status": 400, "error_shape": "v2"},
     {"inputs": V2QKV, "parameters": {"weights_top_k": 0}}, path="/v2/models/attention/infer")
case("v2_heads_bad_string", {"status": 400, "error_shape": "v2"},
     {"inputs": V2QKV, "parameters": {"heads": "0,,1"}}, path="/v2/models/attention/infer")
case("v2_heads_out_of_range", {"status": 400, "error_shape": "v2"},
     {"inputs": V2QKV, "parameters": {"heads": 1}}, path="/v2/models/attention/infer")
case("v2_tokens_not_bytes", {"status": 400, "error_shape": "v2"},
     {"inputs": V2QKV + [{"name": "tokens_k", "datatype": "FP64", "shape": [2], "data": [1, 2]}]},
     path="/v2/models/attention/infer")
case("v2_tokens_count", {"status": 400, "error_shape": "v2"},
     {"inputs": V2QKV + [{"name": "tokens_k", "datatype": "BYTES", "shape": [1], "data": ["a"]}]},
     path="/v2/models/attention/infer")
case("v2_top_k_output_without_k", {"status": 400, "error_shape": "v2"},
     {"inputs": V2QKV, "outputs": [{"name": "top_k_values"}]}, path="/v2/models/attention/infer")

# ---- capacity and authentication --------------------------------------------------
case("capacity_max_sessions", err(503, "capacity_exhausted", require_headers=["retry-after"],
                                  flags=["--max-sessions", "1"], setup={"session": SESSION},
                                  note="--max-sessions 1 and one live session"),
     SESSION, path="/v1/sessions")
case("capacity_cache_bytes", err(503, "capacity_exhausted", require_headers=["retry-after"],
                                 flags=["--max-cache-bytes", "4096"], setup={"session": SESSION},
                                 note="300 rows of K and V (9.6 KB) past a 4 KB cache"),
     {"k": [[1, 0]] * 300, "v": [[0, 1]] * 300}, path="/v1/sessions/{{SID}}/kv")
AUTH = ["--api-key", "s3cret-key"]
case("auth_missing", err(401, "unauthorized", flags=AUTH, require_headers=["www-authenticate"]),
     VALID)
case("auth_wrong_key", err(401, "unauthorized", flags=AUTH),
     VALID, headers=["Authorization: Bearer s3cret-kez"])
case("auth_wrong_scheme", err(401, "unauthorized", flags=AUTH),
     VALID, headers=["Authorization: Basic czNjcmV0LWtleQ=="])
case("auth_key_prefix", err(401, "unauthorized", flags=AUTH,
                            note="a prefix of the key is not the key"),
     VALID, headers=["Authorization: Bearer s3cret"])
case("auth_healthz_open", {"status": 200, "flags": AUTH, "error_shape": "none",
                           "note": "control: /healthz stays open with --api-key"},
     method="GET", path="/healthz")
case("auth_right_key_bad_body", err(400, "invalid_json", flags=AUTH,
                                    note="control: with the key, the body is judged"),
     b"{", headers=["Authorization: Bearer s3cret-key"])
case("timeout_ms_zero", err(422, "invalid_field", "/timeout_ms"), with_(VALID, timeout_ms=0))
case("timeout_ms_fraction", err(422, "invalid_field", "/timeout_ms"), with_(VALID, timeout_ms=2.5))
case("timeout_ms_string", err(422, "invalid_field", "/timeout_ms"), with_(VALID, timeout_ms="100"))
case("timeout_ms_session_negative", err(422, "invalid_field", "/timeout_ms",
                                        setup={"session": SESSION}),
     {"q": [[1, 0]], "k": [[1, 0]], "v": [[0, 1]], "timeout_ms": -1},
     path="/v1/sessions/{{SID}}/attention")
RATE = ["--rate-limit", "0.001", "--rate-burst", "1"]
case("rate_limited_after_burst",
     err(429, "rate_limited", flags=RATE, setup={"session": SESSION},
         require_headers=["retry-after"],
         note="--rate-limit 0.001 --rate-burst 1: the setup's session create took the one token"),
     VALID)
CORS = ["--cors-origins", "http://ok.example"]
case("cors_allowed_origin_error", err(400, "invalid_json", flags=CORS,
                                      require_headers=["access-control-allow-origin", "vary"],
                                      note="an allowed origin sees its errors"),
     b"{", headers=["Origin: http://ok.example"])
case("cors_other_origin_error", err(400, "invalid_json", flags=CORS,
                                    absent_headers=["access-control-allow-origin"]),
     b"{", headers=["Origin: http://evil.example"])

# ---- CORS: errors carry CORS-safe headers ---------------------------------------
case("cors_error_with_origin", err(400, "invalid_json"), b"{",
     headers=["Origin: http://evil.example"])
case("cors_preflight_unknown_route",
     {"status": [200, 204, 404], "error_shape": "any",
      "note": "a preflight never grants '*' with credentials"},
     method="OPTIONS", path="/v1/attention",
     headers=["Origin: http://evil.example", "Access-Control-Request-Method: POST"])


# ---- session import (POST /v1/sessions/import) ------------------------------------
# An export written here apart from core/persist.c, from the README's table
# (version 4): a float64 session, d_k = d_v = 2, one head.
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF


def export_body(rows, max_tokens=4096, version=4, first_row=0, magic=b"ATTNDSES",
                window=None, length=None):
    """window: (left, right, sinks) of a rolling session; length: its rows
    ever appended when rows were let go (rows are then the held ones)."""
    import struct
    p = struct.pack
    b = magic + p("<II", version, 0x01020304) + p("<I", 6) + b"r1.abc"
    b += p("<I", 0)                                     # float64, same storage
    b += p("<6Q", 1, 1, 2, 2, len(rows) if length is None else length, max_tokens)
    b += p("<2d", 600.0, 0.0)
    b += p("<dIdIdIII", 2 ** -0.5, 0, 0.0, 0, 10000.0, 0, 0, 0)
    b += p("<dIQI7d", 0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    win = (1, 0) + tuple(window) if window else (0, 0, -1, -1, 0)
    b += p("<QIIqqq", first_row, *win) + p("<3Q", 0, 0, 0)
    b += b"\0" * (-len(b) % 8)
    for k, _ in rows:
        b += p("<2d", *k)
    for _, v in rows:
        b += p("<2d", *v)
    return b + p("<I", crc32c(b))


IMPORT_OK = export_body([((1, 0), (1, 2)), ((0, 1), (3, 4))])


def import_case(name, expect, body, **kw):
    case(name, expect, body, path="/v1/sessions/import",
         content_type=kw.pop("content_type", "application/octet-stream"), **kw)


import_case("import_control_ok", {"status": 201, "error_shape": "none",
                                  "note": "control: the catalogue's own export imports"},
            IMPORT_OK)
import_case("import_truncated", err(422, "invalid_export", ""), IMPORT_OK[:-9])
import_case("import_header_only", err(422, "invalid_export", ""), IMPORT_OK[:30])
import_case("import_empty_body", err(422, "invalid_export", ""), b"",
            headers=["Content-Type: application/octet-stream"])
import_case("import_bad_checksum", err(422, "invalid_export", ""),
            IMPORT_OK[:-20] + bytes([IMPORT_OK[-20] ^ 1]) + IMPORT_OK[-19:])
import_case("import_foreign_magic", err(422, "invalid_export", "",
                                        note="a gzip stream is not an export"),
            b"\x1f\x8b\x08\x00" + IMPORT_OK[4:])
import_case("import_unknown_version", err(422, "invalid_export", "",
                                          note="version 5, with its checksum right"),
            export_body([((1, 0), (1, 2))], version=5))
import_case("import_trailing_bytes", err(422, "invalid_export", ""),
            IMPORT_OK[:-4] + b"\0" * 8 + IMPORT_OK[-4:])
import_case("import_nonfinite_row", err(422, "invalid_export", "",
                                        note="a NaN key behind a right checksum"),
            export_body([((float("nan"), 0), (1, 2))]))
import_case("import_rolling_window", err(422, "invalid_export", "",
                                         note="first_row 5 without a window"),
            export_body([((1, 0), (1, 2))], first_row=5))
# a rolled session: sinks 1 (front rows 0..63), left 2, rows 128..129 held
ROLLED_ROWS = [((1, 0), (1, 2))] * 66
import_case("import_rolled_control_ok", {"status": 201, "error_shape": "none",
                                         "note": "control: a rolled session imports"},
            export_body(ROLLED_ROWS, first_row=128, window=(2, -1, 1), length=130))
import_case("import_rolled_window_right", err(422, "invalid_export", "",
                                              note="a rolling window has no right side"),
            export_body(ROLLED_ROWS, first_row=128, window=(2, 3, 1), length=130))
import_case("import_rolled_first_row_unaligned", err(422, "invalid_export", "",
                                                     note="first_row is a page start"),
            export_body(ROLLED_ROWS, first_row=127, window=(2, -1, 1), length=129))
import_case("import_rolled_window_missing", err(422, "invalid_export", "",
                                                note="first_row 128 > length - left"),
            export_body(ROLLED_ROWS, first_row=128, window=(3, -1, 1), length=130))
import_case("import_rolled_rows_short", err(422, "invalid_export", "",
                                            note="65 rows where 66 are held"),
            export_body(ROLLED_ROWS[:65], first_row=128, window=(2, -1, 1), length=130))
import_case("import_json_body", err(415, "unsupported_media_type"), VALID,
            content_type="application/json")
import_case("import_over_max_tokens", err(422, "limit_exceeded", "",
                                          flags=["--max-tokens", "100"],
                                          note="the export's max_tokens 4096 over --max-tokens 100"),
            IMPORT_OK)
import_case("import_over_body_cap", err(413, "body_too_large", flags=SMALL_CAP,
                                        note="a whole export of 70 KB over --max-body-bytes 64 KiB"),
            export_body([((0, 0), (0, 0))] * 2200))
case("export_post", err(405, "method_not_allowed", require_headers=["allow"],
                        setup={"session": SESSION}),
     {}, path="/v1/sessions/{{SID}}/export")
case("export_unknown_session", err(404, "session_not_found"),
     method="GET", path="/v1/sessions/r1.AAAAAAAAAAAAAAAAAAAAAA/export")


def write_all():
    keep = set(cases)
    for entry in os.listdir(HERE):
        full = os.path.join(HERE, entry)
        if os.path.isdir(full) and entry not in keep:
            shutil.rmtree(full)
    for name, (expect, raw, gen) in sorted(cases.items()):
        d = os.path.join(HERE, name)
        os.makedirs(d, exist_ok=True)
        for f in ("request", "gen.py"):
            p = os.path.join(d, f)
            if os.path.exists(p):
                os.remove(p)
        if gen is not None:
            with open(os.path.join(d, "gen.py"), "w") as f:
                f.write(gen)
        else:
            with open(os.path.join(d, "request"), "wb") as f:
                f.write(raw)
        with open(os.path.join(d, "expect.json"), "w") as f:
            json.dump(expect, f, indent=1, sort_keys=True)
            f.write("\n")
    print(f"{len(cases)} cases written to {HERE}", file=sys.stderr)


if __name__ == "__main__":
    write_all()
