#!/usr/bin/env bash
# The fairness benchmark (docs/design/fairness.md, "Benchmark"): quiet tenants' dwell time with
# fairness on, off and without the noisy tenant, and the cost against a plain standard queue, on
# the engine with a fake clock. Runs the overload case (sends 125% of the consumers' capacity)
# and the 80% case.
#
# With `server` as the first argument, the cost at the server: a fresh release `leaseq serve`
# (durable, --fsync always) and `leaseq bench --workload w4` (producers and consumers at once)
# on a plain standard queue and on a fair one (51 tenants, t0 sending 20x the others),
# alternated for [rounds] rounds in one run; each line gives msg/s and the server's CPU us/msg.
#
# With `dwell` as the first argument, the dwell times at the server: the same server, consumers
# that hold each message [work_ms] ms (a handler) and producers paced at random times (open
# loop). It first measures what the consumers take (a backlog, no producers), then sends at
# [load]% of that: 1 noisy tenant at 20x the rate of each of 50 quiet ones, on a fair queue, on
# one with LeaseqFairQueue=false, and the 50 quiet ones alone (no-noisy); then a plain queue at
# the same rate. Each line gives the quiet tenants' (and t0's) send -> receive p50/p99, the
# delivered rate and the server's CPU us/msg.
#
# Usage: scripts/bench-fairness.sh            (LEASEQ_FAIR_BENCH_SECONDS=300 by default; see
#                                              the bench's header for the other variables)
#        scripts/bench-fairness.sh server [rounds] [seconds] [concurrency]   (defaults 2 20 16)
#        scripts/bench-fairness.sh dwell [seconds] [consumers] [work_ms] [rounds] [load...]
#                                             (defaults 30 16 20 1, loads 125 80; with several
#                                             rounds it ends with each figure's median)
#   LEASEQ_BIN  the binary to measure at the server (default: build target/release/leaseq)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
. scripts/lib.sh

mode="${1:-engine}"
if [[ "$mode" != server && "$mode" != dwell ]]; then
    for load in 125 80; do
        LEASEQ_FAIR_BENCH_LOAD=$load cargo bench -q -p leaseq-core --bench fairness
    done
    exit 0
fi

leaseq="$(leaseq_binary)"
scratch="$(mktemp -d -p "$repo_root/target" bench-fairness.XXXXXX)" # on disk, not tmpfs
trap '[[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$scratch"' EXIT
port="$(free_port)"

start_server "$port" "$scratch/log" \
    "$leaseq" serve --listen "127.0.0.1:$port" --data-dir "$scratch/data" --fsync "${LEASEQ_FSYNC:-always}"

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

if [[ "$mode" == dwell ]]; then
    seconds="${2:-30}" consumers="${3:-16}" work_ms="${4:-20}" rounds="${5:-1}"
    loads=("${@:6}")
    ((${#loads[@]} > 0)) || loads=(125 80)
    bench() {
        "$leaseq" bench --endpoint "http://127.0.0.1:$port" --server-pid "$server_pid" --json \
            --consumers "$consumers" --receive-max 1 --wait-time-seconds 5 --work-ms "$work_ms" \
            "$@" 2>/dev/null
    }
    capacity="$(bench --producers 0 --backlog $((consumers * 1000 * 15 / work_ms)) --duration 10 \
        | python3 -c 'import json, sys; run = json.load(sys.stdin)["run"]; print(round(run["messages_deleted"] / run["elapsed_s"]))')"
    echo "== dwell: $consumers consumers holding each message $work_ms ms take $capacity msg/s" \
        "(measured); ${seconds} s per run, 16 paced producers, fsync ${LEASEQ_FSYNC:-always}, $rounds round(s)"
    printf '%-5s %-9s %9s %9s %10s %10s %10s %10s %9s\n' load run "sent/s" "deleted/s" \
        "quiet p50" "quiet p99" "t0 p50" "t0 p99" "CPU us/msg"
    results="$scratch/dwell.jsonl"
    for round in $(seq 1 "$rounds"); do
        for load in "${loads[@]}"; do
            rate=$((capacity * load / 100))
            for kind in fair unfair no-noisy plain; do
                case $kind in
                fair) extra=(--tenants 51 --noisy-weight 20 --rate "$rate") ;;
                unfair) extra=(--tenants 51 --noisy-weight 20 --rate "$rate"
                    --queue-attribute LeaseqFairQueue=false) ;;
                # The 50 quiet tenants alone, at their share of the rate (50 of 70 sends).
                no-noisy) extra=(--tenants 50 --noisy-weight 1 --rate $((rate * 50 / 70))) ;;
                plain) extra=(--rate "$rate") ;;
                esac
                bench --producers 16 --duration "$seconds" "${extra[@]}" \
                    | python3 "$repo_root/scripts/fairness_dwell.py" line "$load" "$kind" "$results"
            done
        done
    done
    python3 "$repo_root/scripts/fairness_dwell.py" summary "$results"
    exit 0
fi

rounds="${2:-2}" seconds="${3:-20}" concurrency="${4:-16}"
echo "== W4 c=$concurrency, ${seconds} s per run, $rounds rounds, fsync ${LEASEQ_FSYNC:-always}"
for round in $(seq 1 "$rounds"); do
    for kind in plain fair; do
        extra=()
        [[ "$kind" == fair ]] && extra=(--tenants 51 --noisy-weight 20)
        "$leaseq" bench --endpoint "http://127.0.0.1:$port" --workload w4 -c "$concurrency" \
            --duration "$seconds" --server-pid "$server_pid" --json "${extra[@]}" 2>/dev/null \
            | summary "$kind"
    done
done
