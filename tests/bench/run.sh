#!/bin/sh
# tests/bench/run.sh BUILD — `make bench` runs this after building BUILD/bench/*.
# Prints one section per part of the system; every figure sits next to a
# limit measured in the same run, as a ratio (the machine is shared and
# noisy, so only same-run ratios are comparable). BENCH_REPS sets the number
# of samples per figure (median reported; default 5).
#
# To add a section: write a function bench_<name> below and append its name
# to SECTIONS (or set SECTIONS in the environment to run a subset).
set -u
build=${1:-build}
reps=${BENCH_REPS:-5}

section() {
    echo
    echo "## $1"
}

# The attention core in-process, one thread (as each server worker runs it).
bench_core() {
    section "core: attention in-process (bench_core)"
    "$build/bench/bench_core" "$reps"
}

SECTIONS=${SECTIONS:-core}
status=0
for s in $SECTIONS; do
    "bench_$s" || { echo "bench section $s failed"; status=1; }
done
exit $status
