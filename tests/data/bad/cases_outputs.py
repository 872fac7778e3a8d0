"""tests/data/bad/cases_outputs.py — what a request asks back: inputs and
responses past --max-elements (422), and the teaching returns (return
names, heads, weights_top_k, tokens) with bad values.
"""
from catalogue import VALID, SESSION, SMALL_OUT, as_body, case, err, with_

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
