#!/usr/bin/env bash
# The fairness benchmark (docs/design/fairness.md, "Benchmark"): quiet tenants' dwell time with
# fairness on, off and without the noisy tenant, and the cost against a plain standard queue, on
# the engine with a fake clock. Runs the overload case (sends 125% of the consumers' capacity)
# and the 80% case.
#
# Then, with `server` as the first argument, the cost at the server: a fresh release
# `leaseq serve` (durable, --fsync always) and `leaseq bench --workload w4` (producers and
# consumers at once) on a plain standard queue and on a fair one (51 tenants, t0 sending 20x
# the others), alternated for [rounds] rounds in one run; each line gives msg/s and the server's
# CPU us/msg.
#
# Usage: scripts/bench-fairness.sh            (LEASEQ_FAIR_BENCH_SECONDS=300 by default; see
#                                              the bench's header for the other variables)
#        scripts/bench-fairness.sh server [rounds] [seconds] [concurrency]   (defaults 2 20 16)
#   LEASEQ_BIN  the binary to measure in the server run (default: build target/release/leaseq)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
. scripts/lib.sh

if [[ "${1:-}" != "server" ]]; then
    for load in 125 80; do
        LEASEQ_FAIR_BENCH_LOAD=$load cargo bench -q -p leaseq-core --bench fairness
    done
    exit 0
fi

rounds="${2:-2}" seconds="${3:-20}" concurrency="${4:-16}"
leaseq="$(leaseq_binary)"
scratch="$(mktemp -d -p "$repo_root/target" bench-fairness.XXXXXX)" # on disk, not tmpfs
trap '[[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$scratch"' EXIT
port="$(free_port)"

start_server "$port" "$scratch/log" \
    "$leaseq" serve --listen "127.0.0.1:$port" --data-dir "$scratch/data" --fsync always

summary() { # reads bench --json on stdin, prints one line
    python3 -c '
import json, sys
run = json.load(sys.stdin)["run"]
rate = run["messages_deleted"] / run["elapsed_s"]
cpu = (run.get("server_cpu") or {}).get("us_per_message")
e2e = run.get("end_to_end_latency_us") or {}
p50, p99 = e2e.get("p50", 0) / 1000, e2e.get("p99", 0) / 1000
print(f"{sys.argv[1]:<6} {rate:>8.0f} msg/s deleted   server CPU {cpu or 0:5.1f} us/msg   "
      f"end-to-end p50 {p50:.1f} ms p99 {p99:.1f} ms")
' "$1"
}

echo "== W4 c=$concurrency, ${seconds} s per run, $rounds rounds, fsync always"
for round in $(seq 1 "$rounds"); do
    for kind in plain fair; do
        extra=()
        [[ "$kind" == fair ]] && extra=(--tenants 51 --noisy-weight 20)
        "$leaseq" bench --endpoint "http://127.0.0.1:$port" --workload w4 -c "$concurrency" \
            --duration "$seconds" --server-pid "$server_pid" --json "${extra[@]}" 2>/dev/null \
            | summary "$kind"
    done
done
