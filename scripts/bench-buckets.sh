#!/usr/bin/env bash
# A PostgreSQL node of one bucket against one of several, side by side in one run: four
# `leaseq bench` runs at once (16 clients each), each on a queue of its own bucket (bq4, bq7,
# bq2 and bq5 lie in buckets 0 to 3 of 8: FNV-1a modulo 8), against a fresh schema per node.
# Prints the four runs' msg/s summed and the server's CPU per message (user + system ticks of
# /proc/PID/stat over the messages), per round and bucket count.
#
# Usage: scripts/bench-buckets.sh
#   LEASEQ_BIN        the binary (default: target/release/leaseq, built first)
#   LEASEQ_POSTGRES   the database (default: host=127.0.0.1 user=postgres dbname=test)
#   WORKLOAD          w1 (single sends, default) or w2 (batches of 10)
#   BUCKETS           the counts to compare (default: "1 8")
#   ROUNDS, DURATION  rounds (default 2) and seconds of each run (default 8)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
. scripts/lib.sh
bin="$(leaseq_binary)"
postgres="${LEASEQ_POSTGRES:-host=127.0.0.1 user=postgres dbname=test}"
workload="${WORKLOAD:-w1}" duration="${DURATION:-8}"
queues=(bq4 bq7 bq2 bq5)
scratch="$(mktemp -d -p "$repo_root/target" bench-buckets.XXXXXX)"
trap 'stop_server; rm -rf "$scratch"' EXIT
for round in $(seq 1 "${ROUNDS:-2}"); do
    for buckets in ${BUCKETS:-1 8}; do
        schema="bench_buckets_${buckets}_$$"
        psql -q "$postgres" -c "DROP SCHEMA IF EXISTS $schema CASCADE" 2>/dev/null
        port="$(free_port)"
        start_server "$port" "$scratch/server.log" "$bin" serve --postgres "$postgres" \
            --postgres-schema "$schema" --postgres-buckets "$buckets" \
            --listen "127.0.0.1:$port" --metrics false
        ticks_before=$(awk '{print $14 + $15}' "/proc/$server_pid/stat")
        runs=()
        for queue in "${queues[@]}"; do
            "$bin" bench --endpoint "http://127.0.0.1:$port" --workload "$workload" -c 16 \
                --duration "$duration" --queue "$queue" >"$scratch/$queue.log" 2>&1 &
            runs+=($!)
        done
        wait "${runs[@]}"
        ticks_after=$(awk '{print $14 + $15}' "/proc/$server_pid/stat")
        total=0 messages=0
        for queue in "${queues[@]}"; do
            rate=$(grep -oE '[0-9]+ msg/s' "$scratch/$queue.log" | head -1 | grep -oE '^[0-9]+')
            sent=$(grep -oE '\(([0-9]+) total\)' "$scratch/$queue.log" | head -1 | grep -oE '[0-9]+')
            total=$((total + ${rate:-0})) messages=$((messages + ${sent:-0}))
        done
        ticks=$((ticks_after - ticks_before))
        tick_us=$((1000000 / $(getconf CLK_TCK)))
        per_message=$(python3 -c "print(f'{$ticks * $tick_us / max($messages, 1):.1f}')")
        echo "round $round, $buckets bucket(s), $workload, 4 x 16 clients: $total msg/s, server CPU $per_message us/msg"
        stop_server
        psql -q "$postgres" -c "DROP SCHEMA IF EXISTS $schema CASCADE" 2>/dev/null
    done
done
