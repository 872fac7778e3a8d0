#!/bin/sh
# tests/run.sh BUILD — runs every test against the binaries in BUILD:
# the C unit and in-process api tests, then the end-to-end suite (pytest)
# against BUILD/attnd. Ends with one line "N passed, N failed" over all.
# ATTND_TEST_ONLY=c           C tests (and the source checks) only
# ATTND_TEST_ONLY=concurrency only tests whose name mentions concurrency,
#                             test_attn (the core's helper-pool tests) and
#                             test_sched (the server's scheduler on libuv's pool)
# ATTND_VALGRIND=1            run the C tests under valgrind
# ATTND_BROWSER=0             skip the suites that need Chromium and node
# ATTND_TEST_EXEC=CMD         run each C test as CMD TEST (e.g. qemu-aarch64)
# ATTND_TEST_JOBS=N           run the C tests N at a time (default 1)
set -u
build=${1:-build}
only=${ATTND_TEST_ONLY:-}
passed=0; failed=0
log=$(mktemp); trap 'rm -f "$log"' EXIT

# House rules over the sources (banned calls, layer includes).
if [ "$only" != concurrency ]; then
    sh tests/check_sources.sh >"$log" 2>&1; rc=$?
    line=$(tail -n 1 "$log")
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/'); p=${p:-0}
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/'); f=${f:-0}
    if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    if [ $rc -ne 0 ]; then echo "== check_sources: FAILED"; cat "$log"; else echo "== check_sources: $line"; fi
fi

# run_lane LANES SUM: the C tests (after the filters), one "== name: ..."
# line each, their passed and failed counts to the file SUM. With LANES > 1
# the lanes take the next test not yet taken (an atomic mkdir claims it),
# so a lane that meets the slow tests does not hold up the others.
run_lane() {
    lanes=$1; lp=0; lf=0
    tlog=$(mktemp)
    for t in "$build"/tests/test_*; do
        [ -x "$t" ] || continue
        name=$(basename "$t")
        case "$only" in concurrency) case "$name" in *concurrency*|test_attn|test_sched) ;; *) continue ;; esac ;; esac
        # Under memcheck, which runs one thread at a time, the helper pool's
        # spin-watch tests ran past 10 minutes; make tsan and make asan run them.
        if [ "${ATTND_VALGRIND:-}" = 1 ] && [ "$name" = test_pool_concurrency ]; then continue; fi
        [ "$lanes" -le 1 ] || mkdir "$lanes_dir/$name.claim" 2>/dev/null || continue
        t0=$(date +%s)
        if [ "${ATTND_VALGRIND:-}" = 1 ]; then
            valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
                "$t" >"$tlog" 2>&1; rc=$?
        else
            ${ATTND_TEST_EXEC:-} "$t" >"$tlog" 2>&1; rc=$?
        fi
        secs=$(( $(date +%s) - t0 ))
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tlog" | tail -n 1)
        p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/'); p=${p:-0}
        f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/'); f=${f:-0}
        if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
        lp=$((lp + p)); lf=$((lf + f))
        if [ $rc -ne 0 ]; then
            echo "== $name: FAILED (exit $rc, ${secs} s)"; cat "$tlog"
        else
            echo "== $name: $line (${secs} s)"
        fi
    done
    rm -f "$tlog"
    echo "$lp $lf" >"$2"
}

# ATTND_TEST_JOBS=N runs the C tests in N lanes at once (make valgrind:
# memcheck runs a test on one CPU, and the CI's last minutes of it left
# the other idle); each lane's lines are printed when all are done.
jobs=${ATTND_TEST_JOBS:-1}
lanes_dir=$(mktemp -d)
if [ "$jobs" -le 1 ]; then
    run_lane 1 "$lanes_dir/0.sum"
else
    k=0
    while [ $k -lt "$jobs" ]; do
        run_lane "$jobs" "$lanes_dir/$k.sum" >"$lanes_dir/$k.out" 2>&1 &
        k=$((k + 1))
    done
    wait
    k=0
    while [ $k -lt "$jobs" ]; do cat "$lanes_dir/$k.out"; k=$((k + 1)); done
fi
k=0
while [ $k -lt "$jobs" ] || [ $k -eq 0 ]; do
    if [ -f "$lanes_dir/$k.sum" ]; then
        read -r lp lf <"$lanes_dir/$k.sum"
        passed=$((passed + lp)); failed=$((failed + lf))
    else
        echo "== lane $k of the C tests: FAILED (no result)"; failed=$((failed + 1))
    fi
    k=$((k + 1))
done
rm -rf "$lanes_dir"

# redocly lint of the OpenAPI document (npm @redocly/cli, tests/browser):
# 0 errors, 0 warnings but the ones justified in tests/browser/.redocly.lint-ignore.yaml.
if [ "$only" = "" ] && [ "${ATTND_BROWSER:-1}" != 0 ]; then
    (cd tests/browser && REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
        ./node_modules/.bin/redocly lint --config redocly.yaml --format=stylish \
        ../../server/web/openapi.json) >"$log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && ! grep -qE ' (warning|error) ' "$log"; then
        passed=$((passed + 1)); echo "== redocly lint: 1 passed, 0 failed"
    else
        failed=$((failed + 1)); echo "== redocly lint: FAILED"; grep -E ' (warning|error) ' "$log" || tail -n 20 "$log"
    fi
fi

if [ "$only" != c ] && [ -d tests/e2e ] && ls tests/e2e/test_*.py >/dev/null 2>&1; then
    kflag=""
    [ "$only" = concurrency ] && kflag="-k concurrency"
    # ATTND_BROWSER=0 (e.g. the container build): no Chromium/node suites.
    [ "${ATTND_BROWSER:-1}" = 0 ] && kflag="$kflag --ignore=tests/e2e/test_e2e_browser.py --ignore=tests/e2e/test_e2e_openapi.py"
    ATTND_BIN="$build/attnd" /usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=8 $kflag tests/e2e >"$log" 2>&1; rc=$?
    tail -n 40 "$log"
    summary=$(tail -n 1 "$log")
    p=$(echo "$summary" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); p=${p:-0}
    f=$(echo "$summary" | grep -oE '[0-9]+ (failed|error)' | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}'); f=${f:-0}
    # exit 5 = no tests collected (e.g. a -k filter matched none): not a failure
    if [ $rc -ne 0 ] && [ $rc -ne 5 ] && [ "$f" = 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
