"""tests/data/bad/cases_json.py — bodies that are not the JSON document an
API route reads: malformed JSON, invalid UTF-8, NUL bytes, duplicate keys,
nesting past API_MAX_JSON_DEPTH (400), and bodies under another media type
(415).
"""
from catalogue import VALID, BIG_CAP, as_body, case, err

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
case("json_number_1e400", err(422, "non_finite", "/q/0/0",
                              note="valid JSON grammar, but outside double"),
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
case("json_duplicate_key", err(400, "duplicate_key", "/q"),
     b'{"q":[[1,0]],"k":[[1,0]],"v":[[1,2]],"q":[[0,1]]}')
case("json_duplicate_nested_key", err(400, "duplicate_key", "/rope/base"),
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
