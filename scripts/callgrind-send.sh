#!/usr/bin/env bash
# Instructions per durable JSON SendMessage, or per message consumed (user space, callgrind),
# A/B: instruction counts are stable on a busy machine where wall-clock figures are not
# (BENCHMARKS.md).
#
# For each binary: a server under callgrind (`--fsync always`, two runtime workers as on the 2-vCPU
# machines the bars are set on; with one, a lone request leads its fdatasync through
# `block_in_place`, see docs/design/wal.md)
# gets a warm-up, then N1 and, in a second run, N2 single-message sends from `leaseq bench` at
# concurrency 1; (instructions(N2) - instructions(N1)) / (N2 - N1) is the cost of one send with
# start-up, warm-up and shutdown cancelled out. Instructions are counted only while the measured
# phase runs (`callgrind_control -i on/off`), so that what follows it (deleting the queue, the
# checkpoint at shutdown: both grow with the messages left) does not count either.
#
# WORKLOAD=batch measures a message sent in a durable SendMessageBatch of 10 (W2's shape) instead:
# N1 and N2 messages, in batches, at concurrency 1.
#
# WORKLOAD=consume measures consuming instead (W3's shape: ReceiveMessage of 10, then
# DeleteMessageBatch of what it got, one consumer): both runs first fill the same N2 messages in
# batches of 10, then consume N1, or N2, of them; the difference divided by N2 - N1 is the cost
# of consuming one message.
#
# WORKLOAD=query-send and query-consume measure the same two shapes over the Query protocol (form
# bodies, XML answers), from a plain Python client (scripts/query_load.py): the sends one at a
# time, the consuming after the same fill in JSON batches.
#
# Usage: scripts/callgrind-send.sh BINARY... (default: build and use target/release/leaseq)
#   N1, N2   messages of the two runs (default 1000 and 3000)
#   WORKLOAD send (default), batch, consume, query-send or query-consume
#   BARE     1: also count, the same way, the bare hyper server (crates/server/examples/bare_http.rs)
#            answering the same single sends (WORKLOAD=send only): what a hyper server spends
#            per request under this generator (a yardstick, not a floor: leaseq's own HTTP/1.1
#            connection code costs less than hyper's)
#   KEEP     a directory to copy each run's callgrind output into (BINARYNAME.N.out), for
#            per-function costs: `callgrind_annotate --inclusive=yes` of the two runs, the
#            difference divided by N2 - N1 (the total alone varies with how often the runtime's
#            threads park and wake on a shared machine)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
. scripts/lib.sh
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
if [[ $# -eq 0 ]]; then
    cargo build -q --release -p leaseq
    set -- "$repo_root/target/release/leaseq"
fi
n1="${N1:-1000}" n2="${N2:-3000}" workload="${WORKLOAD:-send}"
case "$workload" in
send) what="durable SendMessage" ;;
batch) what="message sent in a durable SendMessageBatch of 10" ;;
consume) what="message consumed (receive 10 + delete batch, durable)" ;;
query-send) what="durable SendMessage over the Query protocol" ;;
query-consume) what="message consumed over the Query protocol (receive 10 + delete batch)" ;;
*) echo "WORKLOAD is send, batch, consume, query-send or query-consume, not $workload" >&2; exit 2 ;;
esac
scratch="$(mktemp -d -p "$repo_root/target" callgrind.XXXXXX)"
trap '[[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$scratch"' EXIT

instructions() { # binary messages [server command...] -> total Ir of the server's run
    local port data out
    port=$(free_port)
    data="$(mktemp -d -p "$scratch")" out="$data/callgrind.out"
    local server=("$1" serve --data-dir "$data/d" --listen "127.0.0.1:$port" --log warn --threads 2)
    # The bare server takes only its address (and runs tokio's default two workers here).
    [[ $# -gt 2 ]] && server=("${@:3}" "127.0.0.1:$port")
    # A server under valgrind starts slowly.
    READY_TIMEOUT_S=60 start_server "$port" /dev/null \
        valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" "${server[@]}"
    "$1" bench --endpoint "http://127.0.0.1:$port" --workload w1 -c 1 --messages 200 \
        --queue warm --keep >/dev/null 2>&1
    local endpoint="http://127.0.0.1:$port"
    if [[ "$workload" == query-send ]]; then
        python3 scripts/query_load.py "$port" create measured
        python3 scripts/query_load.py "$port" send measured 200
        callgrind_control -i on "$server_pid" >/dev/null 2>&1
        python3 scripts/query_load.py "$port" send measured "$2"
    elif [[ "$workload" == query-consume ]]; then
        "$1" bench --endpoint "$endpoint" --workload w2 -c 1 --messages "$((n2 + 200))" \
            --queue measured --keep --duration 600 >/dev/null 2>&1
        python3 scripts/query_load.py "$port" consume measured 200
        callgrind_control -i on "$server_pid" >/dev/null 2>&1
        python3 scripts/query_load.py "$port" consume measured "$2"
    elif [[ "$workload" != consume ]]; then
        local shape=w1
        [[ "$workload" == batch ]] && shape=w2
        callgrind_control -i on "$server_pid" >/dev/null 2>&1
        "$1" bench --endpoint "$endpoint" --workload "$shape" -c 1 --messages "$2" \
            --queue measured --keep --duration 600 >/dev/null 2>&1
    else
        "$1" bench --endpoint "$endpoint" --workload w2 -c 1 --messages "$n2" \
            --queue measured --keep --duration 600 >/dev/null 2>&1
        callgrind_control -i on "$server_pid" >/dev/null 2>&1
        "$1" bench --endpoint "$endpoint" --workload w3 -c 1 --backlog 0 --messages "$2" \
            --queue measured --keep --duration 600 >/dev/null 2>&1
    fi
    callgrind_control -i off "$server_pid" >/dev/null 2>&1
    # SIGINT: valgrind writes the profile as the server stops. The bare server has no handler
    # of its own, and a background job ignores SIGINT: it gets SIGTERM, whose default action
    # ends it the same way.
    if [[ $# -gt 2 ]]; then stop_server TERM; else stop_server INT; fi
    if [[ -n "${KEEP:-}" ]]; then
        mkdir -p "$KEEP"
        cp "$out" "$KEEP/$(basename "${server[0]}").$2.out"
    fi
    # With instrumentation switched on and off, callgrind writes the count in `totals:` (and a
    # `summary:` of 0).
    awk '/^(summary|totals):/ && $2 > n { n = $2 } END { print n }' "$out"
}

if [[ "${BARE:-}" == 1 ]]; then
    [[ "$workload" == send ]] || { echo "BARE=1 is for WORKLOAD=send" >&2; exit 2; }
    cargo build -q --release -p leaseq-server --example bare_http
    bare="$repo_root/target/release/examples/bare_http"
    a=$(instructions "$1" "$n1" "$bare")
    b=$(instructions "$1" "$n2" "$bare")
    printf '%-40s %8d instructions per request (POST, 200 "ok")\n' "bare hyper" $(((b - a) / (n2 - n1)))
fi
for bin in "$@"; do
    a=$(instructions "$bin" "$n1")
    b=$(instructions "$bin" "$n2")
    printf '%-40s %8d instructions per %s\n' "$bin" $(((b - a) / (n2 - n1))) "$what"
done
