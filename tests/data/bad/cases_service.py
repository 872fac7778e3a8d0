"""tests/data/bad/cases_service.py — the service around the routes: the Open
Inference Protocol v2 route (its own {"error":"..."} shape), capacity
(503), authentication with --api-key (401), request deadlines, rate
limits (429) and CORS.
"""
from catalogue import VALID, SESSION, case, err, with_

# ---- Open Inference Protocol v2 (its own {"error":"..."} shape) ---------------
case("v2_infer_empty_body", {"status": 400, "error_shape": "v2",
                             "note": "found by fuzz_request: NULL body + 0 (UB) in "
                                     "api/v2/v2.c"},
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
