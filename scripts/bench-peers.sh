#!/usr/bin/env bash
# leaseq and its peers side by side, in one run, with the method of BENCHMARKS.md's "Peers
# measured here" table: Python clients, 2 processes x 32 in flight, 256 B, one message per
# request; a produce phase of [seconds], then a consume phase (receive + ack) that drains it.
# Each line gives msg/s, the server's CPU us/msg (/proc utime+stime) and the clients' CPU us/msg.
#
#   bare      the bare-HTTP yardstick (crates/server/examples/bare_http.rs), driven by
#             `wrk -t1 -c64` and by the same Python harness (POST 256 B); per request
#   leaseq    a fresh server for each policy of LEASEQ_FSYNC: SendMessage; ReceiveMessage (10,
#             wait 1 s) + DeleteMessageBatch; then `leaseq bench --workload w1 -c 64` on another
#             fresh one. `never` is the durability NATS JetStream runs with by default (written to
#             the OS at once, fsynced every 2 minutes), so it is the like-for-like comparison
#   nats      the running NATS JetStream (127.0.0.1:4222): a fresh file-store stream, js.publish,
#             a durable pull consumer (fetch 10, ack each); the stream is deleted afterwards
#   rabbitmq  the running RabbitMQ (127.0.0.1:5672, guest): a fresh quorum queue, confirms,
#             persistent messages, prefetch 64 with manual acks; the queue is deleted afterwards
# A system that is not there is reported as "skipped (why)". Exits 1 if any request failed.
#
# Usage: scripts/bench-peers.sh [rounds] [seconds]   (defaults: 1 10)
#   LEASEQ_BIN  the binary to measure (default: build and use target/release/leaseq)
#   SYSTEMS     default "bare leaseq nats rabbitmq"
#   LEASEQ_FSYNC  leaseq's --fsync policies to run, default "always never"
# The Python clients (nats-py, aio-pika, aiohttp, from PyPI) live in the venv that
# `scripts/client-venvs.sh peers` makes under target/venvs/peers; wrk comes from Debian.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
. scripts/lib.sh
rounds="${1:-1}" seconds="${2:-10}"
systems="${SYSTEMS:-bare leaseq nats rabbitmq}"
driver="$repo_root/scripts/bench_peers.py"
scratch="$(mktemp -d -p "$repo_root/target" bench-peers.XXXXXX)" # on disk, not tmpfs
failed=0
trap '[[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$scratch"' EXIT

# The clients' venv, made by scripts/client-venvs.sh.
venv="${LEASEQ_VENVS_DIR:-$repo_root/target/venvs}/peers"

drive() { # system [driver args...]: one driver run; a failure is remembered, not fatal
    "$py" "$driver" "$@" --seconds "$seconds" || failed=1
}

run_bare() {
    local port
    port=$(free_port)
    start_server "$port" /dev/null target/release/examples/bare_http "127.0.0.1:$port"
    drive wrk --server-pid "$server_pid" --endpoint "http://127.0.0.1:$port/"
    drive bare --server-pid "$server_pid" --endpoint "http://127.0.0.1:$port/"
    stop_server
}

run_leaseq() {
    local port data fsync client
    for fsync in ${LEASEQ_FSYNC:-always never}; do
        for client in python rust; do
            port=$(free_port)
            data="$(mktemp -d -p "$scratch")"
            start_server "$port" /dev/null "$leaseq" serve --data-dir "$data" \
                --listen "127.0.0.1:$port" --log warn --fsync "$fsync"
            if [[ "$client" == python ]]; then
                drive leaseq --server-pid "$server_pid" --endpoint "http://127.0.0.1:$port/" \
                    --note "fsync $fsync"
            else
                "$leaseq" bench --endpoint "http://127.0.0.1:$port" --workload w1 -c 64 \
                    --duration "$seconds" --server-pid "$server_pid" --json 2>/dev/null \
                    | python3 "$driver" leaseq-bench --note "fsync $fsync" || failed=1
            fi
            stop_server
            rm -rf "$data"
        done
    done
}

run_peer() { # system process-lookup...: a server that is already running on this machine
    local pid
    if ! pid=$("${@:2}" | head -n 1) || [[ -z "$pid" ]]; then
        printf '%-9s skipped (no server process: %s)\n' "$1" "${*:2}"
        return 0
    fi
    drive "$1" --server-pid "$pid"
}

# What every system needs, before the clock starts.
for system in $systems; do
    case "$system" in
        bare)
            cargo build -q --release -p leaseq-server --example bare_http
            command -v wrk >/dev/null || apt-get install -y -q wrk >/dev/null
            ;;
        leaseq)
            leaseq="$(leaseq_binary)"
            ;;
        nats | rabbitmq) ;;
        *) echo "bench-peers: unknown system $system (bare leaseq nats rabbitmq)" >&2; exit 2 ;;
    esac
done
if scripts/client-venvs.sh peers >&2; then
    py="$venv/bin/python"
else
    echo "bench-peers: the Python venv could not be made; its systems will fail" >&2
    py=python3
fi

echo "bench-peers  $(date -u '+%Y-%m-%d %H:%M:%S UTC')  load $(cut -d' ' -f1-3 /proc/loadavg)" \
    " nproc $(nproc)  $rounds round(s) x ${seconds} s  clients: 2 processes x 32 in flight, 256 B"
# The versions measured: the Debian packages of the peers, and the Python clients (the packages
# client-venvs.sh recorded in the venv's stamp).
echo "versions  $(dpkg-query -W -f '${Package} ${Version}  ' nats-server rabbitmq-server wrk \
    2>/dev/null || true)$("$py" -c 'import sys; from importlib.metadata import version as v
print("python", sys.version.split()[0], *(f"{p} {v(p)}" for p in sys.argv[1:]))' \
    $(cat "$venv/.leaseq-requirements" 2>/dev/null) 2>/dev/null || true)"
for round in $(seq 1 "$rounds"); do
    echo "round $round  $(date -u +%H:%M:%S)  load $(cut -d' ' -f1-3 /proc/loadavg)"
    for system in $systems; do
        case "$system" in
            bare) run_bare ;;
            leaseq) run_leaseq ;;
            nats) run_peer nats pgrep -x nats-server ;;
            rabbitmq) run_peer rabbitmq pgrep -x beam.smp ;;
        esac
    done
done
exit "$failed"
