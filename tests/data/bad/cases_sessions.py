"""tests/data/bad/cases_sessions.py — the session routes: unknown, deleted
and expired sessions, bad creates, appends, queries and truncates, and
session import (exports made here apart from core/persist.c) and export.
"""
from catalogue import VALID, SESSION, SMALL_CAP, case, err, with_

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
