"""tests/data/bad/cases_fields.py — the fields of /v1/attention with wrong
values: wrong types, null elements, ragged and empty matrices, mismatched
shapes, values outside the dtype's range (float32, float16, bfloat16),
broken base64 tensors and options with invalid values (422).
"""
from catalogue import VALID, case, err, with_, without

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
# api/codec/base64.c (32- and 64-character blocks) meet the bad byte, not the
# tail.
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
    ("alibi_slopes_negative", "alibi", {"slopes": [-0.5]}, "/alibi/slopes/0"),
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
