#!/usr/bin/env bash
# The cost of metrics: `leaseq bench` against `leaseq serve --in-memory true` with metrics on and
# off, alternating (on, off, on, off) so drift on a shared machine hits both alike. Prints one
# line per run: workload, metrics, msg/s.
#
# Usage: scripts/bench-metrics.sh [workload] [concurrency] [seconds] [rounds]
#        (defaults: w2 64 10 2). Builds the release binary first unless LEASEQ_BIN is set.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
. scripts/lib.sh
workload="${1:-w2}" concurrency="${2:-64}" seconds="${3:-10}" rounds="${4:-2}"
bin="$(leaseq_binary)"
trap '[[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; true' EXIT

for round in $(seq 1 "$rounds"); do
    for metrics in true false; do
        port=$(free_port)
        start_server "$port" /dev/null env -u LEASEQ_METRICS "$bin" serve --in-memory true \
            --metrics "$metrics" --listen "127.0.0.1:$port" --log warn
        rate=$("$bin" bench --endpoint "http://127.0.0.1:$port" --workload "$workload" \
            -c "$concurrency" --duration "$seconds" --json 2>/dev/null |
            python3 -c 'import json,sys; r=json.load(sys.stdin)["run"]; print("%.0f" % (r["messages"] / r["elapsed_s"]))')
        stop_server
        echo "round $round  $workload -c $concurrency  metrics=$metrics  $rate msg/s"
    done
done
