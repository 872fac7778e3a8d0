#!/bin/sh
# tests/bench/bench_journal.sh BUILD — what the journal of --state-dir costs:
# session appends of 64 rows, d_k = d_v = 128, float32 as base64 (the append
# path with the least parsing, so the journal's share is the largest), by
# wrk -t4 -c4 (each connection its own session, tests/bench/append.lua),
# against a fresh daemon per run in three modes: no --state-dir (the
# limit), --fsync everysec (goal >= 0.80 of the limit) and --fsync always
# (reported). Runs alternate the modes so slow phases of the shared machine
# hit each; medians over BENCH_REPS runs of DUR. Also the daemon's CPU
# microseconds per append (/proc/PID/stat), which others' load on a shared
# machine moves far less than appends/s. The state directory is on the disk
# under TMPDIR. Prints BENCHROW lines (format: tests/bench/run.sh).
# env: BENCH_REPS (3), DUR (3s)
set -u
build=${1:?usage: bench_journal.sh BUILD}
reps=${BENCH_REPS:-3}
dur=${DUR:-3s}
py=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/attnd_bench_journal.XXXXXX")
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$py" - "$tmp/body.json" <<'PY'
import base64, json, random, struct, sys
rnd = random.Random(5)
def t():
    data = struct.pack("<%df" % (64 * 128), *(rnd.uniform(-1, 1) for _ in range(64 * 128)))
    return {"shape": [64, 128], "dtype": "float32", "data": base64.b64encode(data).decode()}
json.dump({"k": t(), "v": t()}, open(sys.argv[1], "w"))
PY

hz=$(getconf CLK_TCK)

# cpu_ticks PID: user + system clock ticks of the process so far
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# run MODE: one wrk run against a fresh daemon; appends its rps to $tmp/MODE
run() {
    mode=$1
    rm -rf "$tmp/state" "$tmp/port"
    set -- --port 0 --port-file "$tmp/port" --max-tokens 100000000 --max-cache-bytes 16g \
        --max-sessions 16 --workers 2 --log-file "$tmp/log"
    [ "$mode" != none ] && set -- "$@" --state-dir "$tmp/state" --fsync "$mode"
    "$build/attnd" "$@" &
    pid=$!
    i=0
    while [ ! -s "$tmp/port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    url="http://127.0.0.1:$(cat "$tmp/port")"
    sids=""
    for c in 1 2 3 4; do
        sid=$(curl -s -X POST -H 'Content-Type: application/json' \
              -d '{"d_k":128,"d_v":128,"dtype":"float32"}' "$url/v1/sessions" |
              "$py" -c 'import json,sys; print(json.load(sys.stdin)["id"])') || return 1
        sids="$sids $sid"
    done
    t0=$(cpu_ticks "$pid")
    ATTND_SIDS=$sids wrk -t4 -c4 -d"$dur" --timeout 5s -s "$here/append.lua" "$url" -- "$tmp/body.json" \
        > "$tmp/out" 2>&1
    t1=$(cpu_ticks "$pid")
    line="$(grep '^wrk_result' "$tmp/out") cpu_ticks=$((t1 - t0))" || { cat "$tmp/out"; return 1; }
    echo "$mode $line"
    echo "$line" >> "$tmp/$mode"
    kill "$pid"; wait "$pid" 2>/dev/null; pid=""
}

r=0
while [ $r -lt "$reps" ]; do
    for mode in none everysec always; do
        run $mode || { echo "journal bench: a run failed"; exit 1; }
    done
    r=$((r + 1))
done

"$py" - "$tmp" "$hz" <<'PY'
import statistics, sys
d, hz = sys.argv[1], int(sys.argv[2])
def med(mode):
    rows = [dict(kv.split("=") for kv in l.split()[1:]) for l in open(f"{d}/{mode}")]
    errs = sum(int(r["err_status"]) + int(r["err_other"]) for r in rows)
    cpu = statistics.median(int(r["cpu_ticks"]) * 1e6 / hz / int(r["requests"]) for r in rows)
    return statistics.median(float(r["rps"]) for r in rows), errs, cpu
base, e0, cpu0 = med("none")
for mode, goal in (("everysec", 0.8), ("always", None)):
    val, e, cpu = med(mode)
    ratio = val / base
    met = "-" if goal is None else ("PASS" if ratio >= goal and e == 0 else "MISS")
    print("BENCHROW|session appends 64x128 f32 base64, --fsync %s (issue 19)|no --state-dir appends/s|%.0f|-|-|%.0f|appends/s|%.2f of no journal; CPU %.0f vs %.0f us an append; %d errors|%s|%s"
          % (mode, base, val, ratio, cpu, cpu0, e + e0, ">= 0.80" if goal else "reported", met))
PY
