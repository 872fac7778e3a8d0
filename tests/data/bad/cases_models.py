"""tests/data/bad/cases_models.py — the fields of current models (DESIGN.md
part 2, issue 16) with bad values wherever they are taken: /v1/attention
(positions, segments, windows, softcap, per-head sinks, RoPE dims and
scalings, batches), sessions (create, queries, rolling windows), OIP v2
parameters and inputs, and POST /v1/verify.
"""
from catalogue import VALID, SESSION, case, err, with_

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
    ("kv_dtype_without_sequence", {"inputs": V2_QKV, "parameters": {"kv_dtype": "float16"}}),
    ("kv_dtype_int4", {"inputs": V2_QKV, "parameters": {
        "sequence_id": "bad-kv", "sequence_start": True, "kv_dtype": "int4"}}),
    ("window_right_at_sequence_start", {"inputs": V2_QKV, "parameters": {
        "sequence_id": "bad-roll", "sequence_start": True, "window_left": 1, "window_right": 0}}),
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
