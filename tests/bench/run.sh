#!/bin/sh
# tests/bench/run.sh BUILD — `make bench` runs this after building BUILD/attnd
# and BUILD/bench/*. Prints one section per part of the system; every figure
# sits next to a limit measured in the same run, as a ratio (the machine is
# shared and noisy, so only same-run ratios are comparable). BENCH_REPS sets
# the number of samples per figure (median reported; default 5).
#
# Sections (SECTIONS="core json http fair journal move roll" by default; any subset, e.g.
# SECTIONS=http make bench):
#   core   the attention core in-process (bench_core), and how promptly the
#          helper pool joins a job (bench_pool)
#   json   JSON numbers in/out and base64 through api_handle (bench_api)
#   http   wrk against the daemon: small requests vs libmicrohttpd's hello,
#          medium JSON vs the FastAPI peer, base64 tensors vs MHD echo, one
#          large request from the client vs its compute in-process
#          (tests/bench/bench_http.sh; loopback only, servers stopped by PID)
#   fair   a small client's p99 while another keeps 24 large requests in
#          flight, then while it keeps them itself, against its p99 alone
#          (tests/bench/bench_fair.py, ~2 min)
#   journal session appends with --state-dir (--fsync everysec, always) vs
#          without (tests/bench/bench_journal.sh)
#   move   session export and import of 128 MiB of rows: in-process vs a
#          memcpy (bench_core, BENCH_MOVE_ONLY=1) and over HTTP vs MHD's
#          echo of the same bytes (tests/bench/bench_move.py)
#   roll   steady-state decode on a rolling session (window 1023, sinks 4)
#          over 16k tokens: time per token at 2k..16k tokens, vs a plain
#          session of the held rows, and the bytes held (bench_roll)
#
# Every bench program prints its results as lines
#   BENCHROW|what|limit name|limit|peer name|peer|attnd|unit|ratio|goal|PASS/MISS
# and this script ends with one markdown table of all of them.
#
# To add a section: write a function bench_<name> below and append its name
# to SECTIONS (or set SECTIONS in the environment to run a subset).
set -u
build=${1:-build}
reps=${BENCH_REPS:-5}
here=$(cd "$(dirname "$0")" && pwd)
shared=${SHARED:-$here/../../../shared/bench}
out=$(mktemp "${TMPDIR:-/tmp}/attnd_bench_out.XXXXXX")
trap 'rm -f "$out"' EXIT

section() {
    echo
    echo "## $1"
}

# The attention core in-process, one thread (as each server worker runs it).
bench_core() {
    section "core: attention in-process (bench_core)"
    "$build/bench/bench_core" "$reps" &&
        "$build/bench/bench_pool"
}

# JSON numbers and base64 tensors through the api entry points.
bench_json() {
    section "api: JSON numbers in/out, base64 tensors in-process (bench_api)"
    "$build/bench/bench_api" "$reps" "$shared/req/small_n4_L4_d8.json"
}

# HTTP over loopback: about 3 x 2 x DUR per load, plus start-up.
bench_http() {
    section "HTTP: wrk -t2 -c32 against build/attnd (bench_http.sh)"
    n=$((reps < 3 ? reps : 3))
    for load in small medium b64 large; do
        BENCH_REPS=$n SHARED="$shared" sh "$here/bench_http.sh" "$build" "$load" ||
            { echo "http load $load failed"; return 1; }
    done
}

# Fairness of the compute pool: one small-request client beside 24 large
# requests in flight from another key, then from its own key.
bench_fair() {
    section "fairness: small requests beside 24 large in flight (bench_fair.py)"
    "${PYTHON:-/usr/bin/python3}" "$here/bench_fair.py" "$build/attnd" &&
        "${PYTHON:-/usr/bin/python3}" "$here/bench_fair.py" "$build/attnd" one
}

# The journal of --state-dir: appends with and without it.
bench_journal() {
    section "journal: session appends with --state-dir vs without (bench_journal.sh)"
    BENCH_REPS=$((reps < 3 ? 3 : reps)) sh "$here/bench_journal.sh" "$build"
}

# Moving a session: export and import, in-process and over loopback HTTP.
bench_move() {
    section "move: session export/import, 16384 rows x 8 heads x d=128 f32 (bench_core, bench_move.py)"
    BENCH_MOVE_ONLY=1 "$build/bench/bench_core" "$reps" &&
        BENCH_REPS=$reps "${PYTHON:-/usr/bin/python3}" "$here/bench_move.py" "$build"
}

bench_roll() {
    section "roll: steady-state decode on a rolling session (bench_roll)"
    "$build/bench/bench_roll" "$((reps < 3 ? reps : 3))"
}

# The final table from every BENCHROW line of the run.
table() {
    echo
    echo "## Results (same-run ratios; medians)"
    echo
    echo "| what | same-run limit | peer | attnd | ratio | goal | met |"
    echo "|---|---|---|---|---|---|---|"
    grep '^BENCHROW|' "$out" | while IFS='|' read -r _ what lname lval pname pval val unit ratio goal met; do
        limit="-"
        [ "$lname" != "-" ] && limit="$lname $lval"
        peer="-"
        [ "$pname" != "-" ] && peer="$pname $pval"
        echo "| $what | $limit | $peer | $val $unit | $ratio | $goal | $met |"
    done
}

SECTIONS=${SECTIONS:-core json http fair journal move roll}
status=0
for s in $SECTIONS; do
    { "bench_$s" 2>&1 || echo "bench section $s failed"; } | tee -a "$out"
done
table
grep -q '^bench section .* failed' "$out" && status=1
exit $status
