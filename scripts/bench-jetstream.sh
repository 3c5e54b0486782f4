#!/usr/bin/env bash
# leaseq beside NATS JetStream, driven by the same Rust load generator (`leaseq bench`, whose
# `--jetstream` driver publishes with acks, publishes asynchronously with acks in flight, pulls
# and acks), in one run: W1 single sends at c=64, W2 batches of 10 at c=64 (JetStream: 10
# asynchronous publishes in flight per worker), W3 consume at c=16 from a backlog. Each line gives
# msg/s, the p50 of the send (W3: the receive) and the server's CPU us/msg (/proc of the server process).
#
# leaseq runs fresh for each policy of LEASEQ_FSYNC (default "always never"); JetStream is the
# machine's running nats-server (127.0.0.1:4222, or NATS_URL), a fresh file-stored stream per
# run, at its default durability (no fsync per message; see BENCHMARKS.md): the pair of leaseq
# `--fsync never`. The pair of `--fsync always` is a JetStream that fsyncs every write
# (`sync_interval: always`): a private nats-server started here with that setting, where the
# machine's nats-server version has it (2.10 and later); otherwise its line says why not.
#
# First, the ceiling of single sends over HTTP/1.1 under this generator: W1 c=64 against the
# bare hyper server (crates/server/examples/bare_http.rs, which answers 200 and does nothing
# else), so that leaseq's W1 can be read against what any HTTP server reaches on the machine.
#
# Usage: scripts/bench-jetstream.sh [seconds] [backlog]   (defaults 10 and 100000)
#   LEASEQ_BIN  the binary (default: build and use target/release/leaseq)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
. scripts/lib.sh
seconds="${1:-10}" backlog="${2:-100000}"
nats_url="${NATS_URL:-nats://127.0.0.1:4222}"
leaseq="$(leaseq_binary)"
scratch="$(mktemp -d -p "$repo_root/target" bench-jetstream.XXXXXX)" # on disk, not tmpfs
trap '[[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$scratch"' EXIT

nats_pid="$(pgrep -o -x nats-server || true)"
[[ -n "$nats_pid" ]] || echo "bench-jetstream: no nats-server process here; JetStream's CPU is not reported" >&2

line() { # label, then bench --json on stdin
    python3 -c '
import json, sys
r = json.load(sys.stdin)["run"]
count = max(r["messages_sent"], r["messages_deleted"])
rate = count / r["elapsed_s"]
cpu = (r.get("server_cpu") or {}).get("us_per_message")
# The p50 of the first action of the phase: the send, or in W3 the receive.
p50 = next((a["latency_us"]["p50"] for a in r["actions"] if a["requests"]), 0)
errors = sum(a["errors"] + a["failed_entries"] for a in r["actions"])
cpu = "-" if cpu is None else f"{cpu:.1f}"
print(f"{sys.argv[1]:<34} {rate:>9.0f} msg/s  p50 {p50:>6} us  server CPU {cpu:>6} us/msg  errors {errors}")
' "$1"
}

workloads() { # label, pid, bench target args...
    local label="$1" pid="$2"
    shift 2
    local pid_args=()
    [[ -n "$pid" ]] && pid_args=(--server-pid "$pid")
    "$leaseq" bench "$@" "${pid_args[@]}" --workload w1 -c 64 --duration "$seconds" --json 2>/dev/null | line "$label W1 c=64"
    "$leaseq" bench "$@" "${pid_args[@]}" --workload w2 -c 64 --duration "$seconds" --json 2>/dev/null | line "$label W2 c=64"
    "$leaseq" bench "$@" "${pid_args[@]}" --workload w3 -c 16 --backlog "$backlog" --duration "$seconds" \
        --json 2>/dev/null | line "$label W3 c=16"
}

cargo build -q --release -p leaseq-server --example bare_http
port="$(free_port)"
start_server "$port" /dev/null target/release/examples/bare_http "127.0.0.1:$port"
"$leaseq" bench --endpoint "http://127.0.0.1:$port" --server-pid "$server_pid" --workload w1 \
    -c 64 --duration "$seconds" --json 2>/dev/null | line "bare hyper (HTTP ceiling) W1 c=64"
stop_server

for fsync in ${LEASEQ_FSYNC:-always never}; do
    port="$(free_port)"
    start_server "$port" "$scratch/log-$fsync" \
        "$leaseq" serve --listen "127.0.0.1:$port" --data-dir "$scratch/data-$fsync" \
        --fsync "$fsync" --log warn
    workloads "leaseq --fsync $fsync" "$server_pid" --endpoint "http://127.0.0.1:$port"
    stop_server
done
workloads "JetStream (default durability)" "$nats_pid" --jetstream "$nats_url"

# JetStream at leaseq's `always`: its own server, since sync_interval is a server setting.
nats_port="$(free_port)"
cat >"$scratch/nats-always.conf" <<EOF
listen: 127.0.0.1:$nats_port
jetstream {
  store_dir: "$scratch/nats-always"
  sync_interval: always
}
EOF
if refused="$(nats-server -t -c "$scratch/nats-always.conf" 2>&1)"; then
    start_server --tcp "$nats_port" "$scratch/log-nats-always" nats-server -c "$scratch/nats-always.conf"
    workloads "JetStream (sync_interval always)" "$server_pid" --jetstream "nats://127.0.0.1:$nats_port"
    stop_server
else
    echo "JetStream (sync_interval always): not run: $(nats-server --version 2>&1) refuses the setting (${refused##*: })"
fi
