#!/usr/bin/env bash
# Server CPU per single-message request, leaseq beside the bare-HTTP yardstick, under the same
# generator and concurrency (issue 23's first bar): `wrk -t1 -c64` POSTs 256 B to the bare hyper
# server (crates/server/examples/bare_http.rs), and a durable SendMessage of a 256 B body (AWS
# JSON 1.0) to leaseq (`--fsync always`, a fresh data directory per run). Rounds alternate the
# systems, so each ratio is of figures measured minutes apart on the same machine.
#
# Each line: requests/s, the server's CPU per request (/proc utime+stime over the run) and, for
# leaseq, its ratio to the bare server's figure of the same round.
#
# Usage: scripts/bench-request-path.sh [BINARY...]   (default: build and use target/release/leaseq)
#   ROUNDS (default 3), DURATION (seconds per run, default 10), CONNECTIONS (default 64),
#   FSYNC (default always)
# wrk comes from Debian (`apt-get install wrk`).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
. scripts/lib.sh
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
rounds="${ROUNDS:-3}" seconds="${DURATION:-10}" connections="${CONNECTIONS:-64}"
fsync="${FSYNC:-always}"
if [[ $# -eq 0 ]]; then
    set -- "$(leaseq_binary)"
fi
cargo build -q --release -p leaseq-server --example bare_http
scratch="$(mktemp -d -p "$repo_root/target" bench-request-path.XXXXXX)" # on disk, not tmpfs
trap '[[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$scratch"' EXIT

ticks="$(getconf CLK_TCK)"
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

body="$(printf 'x%.0s' $(seq 1 256))"

# drive LUA URL: wrk's run; prints "requests cpu_us_per_request requests_per_s"
drive() {
    local before after out requests elapsed
    before=$(cpu_ticks "$server_pid")
    out=$(wrk -t1 -c"$connections" -d"${seconds}s" -s "$1" "$2" 2>&1)
    after=$(cpu_ticks "$server_pid")
    if grep -q -e "Non-2xx" -e "Socket errors" <<<"$out"; then
        echo "wrk reported errors:" >&2
        echo "$out" >&2
        exit 1
    fi
    requests=$(grep -oE '^ *[0-9]+ requests in' <<<"$out" | grep -oE '[0-9]+')
    elapsed=$(grep -oE 'requests in [0-9.]+(us|ms|s|m)' <<<"$out" | awk '{ v = $3; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v); f = (u == "ms") ? 1e-3 : (u == "us") ? 1e-6 : (u == "m") ? 60 : 1; print v * f }')
    awk -v r="$requests" -v t="$((after - before))" -v hz="$ticks" -v e="$elapsed" \
        'BEGIN { printf "%d %.2f %.0f\n", r, t / hz * 1e6 / r, r / e }'
}

bare_lua="$scratch/bare.lua"
cat >"$bare_lua" <<LUA
wrk.method = "POST"
wrk.body = "$body"
LUA

for round in $(seq 1 "$rounds"); do
    port=$(free_port)
    start_server "$port" /dev/null target/release/examples/bare_http "127.0.0.1:$port"
    read -r _ bare_cpu bare_rate < <(drive "$bare_lua" "http://127.0.0.1:$port/")
    stop_server
    printf 'round %d  %-40s %8.0f req/s  %6.2f us/req\n' "$round" "bare hyper (POST 256 B)" "$bare_rate" "$bare_cpu"
    for bin in "$@"; do
        port=$(free_port)
        data="$(mktemp -d -p "$scratch")"
        start_server "$port" /dev/null "$bin" serve --data-dir "$data/d" --listen "127.0.0.1:$port" \
            --log warn --fsync "$fsync"
        url="http://127.0.0.1:$port"
        curl -sf -X POST -H 'Content-Type: application/x-amz-json-1.0' \
            -H 'X-Amz-Target: AmazonSQS.CreateQueue' -d '{"QueueName":"bench"}' "$url/" >/dev/null
        lua="$data/send.lua"
        cat >"$lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-amz-json-1.0"
wrk.headers["X-Amz-Target"] = "AmazonSQS.SendMessage"
wrk.body = '{"QueueUrl":"$url/000000000000/bench","MessageBody":"$body"}'
LUA
        read -r _ cpu rate < <(drive "$lua" "$url/")
        stop_server
        printf 'round %d  %-40s %8.0f req/s  %6.2f us/req  %.2fx bare\n' "$round" \
            "$(basename "$bin") SendMessage --fsync $fsync" "$rate" "$cpu" \
            "$(awk -v a="$cpu" -v b="$bare_cpu" 'BEGIN { print a / b }')"
        rm -rf "$data"
    done
done
