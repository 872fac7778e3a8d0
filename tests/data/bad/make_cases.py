#!/usr/bin/env python3
"""tests/data/bad/make_cases.py — writes the hostile-input catalogue.

The catalogue is the folders beside this file: <case>/request holds the exact
raw HTTP bytes a client sends (or <case>/gen.py, whose generate() returns
them, for cases too big to keep in the repo), and <case>/expect.json the
answer the API's contract asks for. This script is how the folders were
written; the folders are the catalogue (tests/e2e/test_e2e_bad.py reads them).
The cases are written in the cases_*.py modules beside it (one a kind of
fault, MODULES below), with the helpers of catalogue.py; this script loads
them and writes every folder. Re-run it after editing a case there:
python3 tests/data/bad/make_cases.py

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
import importlib
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

MODULES = ["cases_json", "cases_fields", "cases_models", "cases_outputs",
           "cases_http", "cases_sessions", "cases_service"]


def load_all():
    """The cases of every module in MODULES (each adds its own to
    catalogue.cases as it is imported): name -> (expect, raw, gen)."""
    sys.dont_write_bytecode = True      # no __pycache__ among the case folders
    sys.path.insert(0, HERE)
    for name in MODULES:
        importlib.import_module(name)
    return importlib.import_module("catalogue").cases


def write_all(cases):
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
    write_all(load_all())
