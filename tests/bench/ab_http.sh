#!/bin/bash
# tests/bench/ab_http.sh REPS DUR BIN... — the small request (n=L=4 d=8)
# against two or more attnd binaries side by side, next to
# ../shared/bench/mhd_server.c's hello (pool of 2, epoll): for a change
# whose effect is smaller than the host's drift between separate runs.
# Every server is started once; the wrk runs (-t2 -c32, DUR each) then
# alternate hello, BIN1, BIN2, ... REPS times, so slow phases of the host
# hit all of them. Prints per server the median req/s, its CPU per request
# (utime + stime from /proc/PID/stat over that run) and every run's req/s.
#   tests/bench/ab_http.sh 9 3s /tmp/before/build/attnd build/attnd
# The hello needs build/bench/mhd_server (make bench builds it).
set -u
reps=${1:?usage: ab_http.sh REPS DUR BIN...}
dur=${2:?usage: ab_http.sh REPS DUR BIN...}
shift 2
[ $# -ge 1 ] || { echo "usage: ab_http.sh REPS DUR BIN..." >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SHARED:-$root/../shared/bench}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/attnd_ab.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

labels=(hello)
port=$(free_port)
"$root/build/bench/mhd_server" "$port" 2 epoll >/dev/null 2>&1 &
pids+=($!)
pid_of=([0]=$!)
url_of=([0]="http://127.0.0.1:$port/")
i=1
for bin in "$@"; do
    "$bin" --host 127.0.0.1 --port 0 --port-file "$tmp/$i.port" \
        --log-file "$tmp/$i.log" --max-connections-per-ip 1000 &
    pids+=($!)
    pid_of[$i]=$!
    labels+=("$bin")
    n=0
    while [ ! -s "$tmp/$i.port" ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    [ -s "$tmp/$i.port" ] || { echo "$bin did not start" >&2; exit 1; }
    url_of[$i]="http://127.0.0.1:$(cat "$tmp/$i.port")/v1/attention"
    i=$((i + 1))
done
sleep 0.5
tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for r in $(seq "$reps"); do
    for j in "${!labels[@]}"; do
        c0=$(cpu_ticks "${pid_of[$j]}")
        if [ "$j" = 0 ]; then
            out=$(wrk -t2 -c32 -d"$dur" -s "$shared/wrk/get.lua" "${url_of[$j]}")
        else
            out=$(wrk -t2 -c32 -d"$dur" -s "$shared/wrk/post_json.lua" "${url_of[$j]}" \
                -- "$shared/req/small_n4_L4_d8.json")
        fi
        c1=$(cpu_ticks "${pid_of[$j]}")
        line=$(echo "$out" | grep '^wrk_result')
        reqs=$(echo "$line" | sed -E 's/.*requests=([0-9]+).*/\1/')
        rps=$(echo "$line" | sed -E 's/.*rps=([0-9.]+).*/\1/')
        echo "$j $rps $(( (c1 - c0) * 1000000 / tck ))" "$reqs" >> "$tmp/runs"
    done
done

hello=0
for j in "${!labels[@]}"; do
    grep "^$j " "$tmp/runs" | sort -k2 -n | awk -v name="${labels[$j]}" -v j="$j" -v h="$hello" '
        { rps[NR] = $2; cpu[NR] = $4 ? $3 / $4 : 0 }
        END {
            m = int((NR + 1) / 2)
            printf "%s: median %.0f req/s, %.2f us CPU per request", name, rps[m], cpu[m]
            if (j > 0 && h > 0) printf ", %.3f of hello", rps[m] / h
            printf "; runs"
            for (i = 1; i <= NR; i++) printf " %.0f", rps[i]
            print ""
        }'
    if [ "$j" = 0 ]; then
        hello=$(grep '^0 ' "$tmp/runs" | sort -k2 -n | awk '{r[NR] = $2} END {print r[int((NR + 1) / 2)]}')
    fi
done
