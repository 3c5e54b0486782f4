#!/usr/bin/env bash
# Fills a durable server with a backlog and measures what it costs: server RSS with the backlog,
# disk use, and start-up time after kill -9 and after a graceful stop (the issue 4 figures).
#
#   scripts/measure-backlog.sh [messages] [message-bytes]      (defaults: 10000000 1024)
#
# Needs a release build (cargo build --release -p leaseq) and about messages × bytes × 1.3 of
# free disk under ${LEASEQ_MEASURE_DIR:-/tmp/leaseq-backlog}.
set -euo pipefail
cd "$(dirname "$0")/.."

messages=${1:-10000000}
bytes=${2:-1024}
dir=${LEASEQ_MEASURE_DIR:-/tmp/leaseq-backlog}
port=${LEASEQ_MEASURE_PORT:-9411}
leaseq=target/release/leaseq
endpoint=http://127.0.0.1:$port

rss_mib() { awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }

start() {
    "$leaseq" serve --data-dir "$dir" --listen "127.0.0.1:$port" >>"$dir.log" 2>&1 &
    server=$!
    local started
    started=$(date +%s%N)
    until curl -sf "$endpoint/health" >/dev/null; do sleep 0.05; done
    echo "start-up: $(( ($(date +%s%N) - started) / 1000000 )) ms, RSS $(rss_mib "$server") MiB"
    grep "recovered state" "$dir.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g' || true
}

rm -rf "$dir" "$dir.log"
start
"$leaseq" bench --endpoint "$endpoint" --workload w2 -c 64 --message-size "$bytes" \
    --messages "$messages" --duration 3600 --queue backlog --keep --server-pid "$server" |
    grep -v '^run '
sleep 5
echo "backlog of $messages × $bytes B: server RSS $(rss_mib "$server") MiB, disk $(du -sh "$dir" | cut -f1)"

kill -9 "$server"; wait "$server" 2>/dev/null || true
echo "after kill -9:"
start
echo "backlog after restart: RSS $(rss_mib "$server") MiB"
kill -TERM "$server"; wait "$server" 2>/dev/null || true
echo "after a graceful stop (checkpoint at shutdown):"
start
kill -TERM "$server"; wait "$server" 2>/dev/null || true
echo "disk after the shutdown checkpoint: $(du -sh "$dir" | cut -f1)"
