#!/usr/bin/env bash
# Durable-mode (`--fsync always`) latency and CPU against the disk's own fdatasync, A/B.
#
# Each round: bare fdatasync probes (4000 x pwrite 256 B + fdatasync on the data directory's
# filesystem, once extending a file and once over a zero-filled one), then W1 -c 1, W1 -c 64,
# W2 -c 64, and W2 -c 64 in memory (`--in-memory true`), against a fresh server of each binary in
# turn, so drift on a shared machine hits both alike. The bars (issue 4, BENCHMARKS.md): W1 -c 1
# p50 at most 2x the probe's p50; at most 25 us server CPU per message for W1, 10 for W2; durable
# W2 at least 50% of the in-memory W2 throughput.
#
# Usage: scripts/bench-durable.sh [rounds] [seconds]   (defaults: 2 8)
#   LEASEQ_BIN  the binary to measure (default: build and use target/release/leaseq)
#   LEASEQ_OLD  binaries to compare against (e.g. one built from main), space-separated; optional
#   WORKLOADS   default "w1:1 w1:64 w2:64 w2:64:mem" (workload:concurrency[:mem])
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
. scripts/lib.sh
rounds="${1:-2}" seconds="${2:-8}"
bins=("$(leaseq_binary)")
[[ -n "${LEASEQ_OLD:-}" ]] && read -r -a old <<<"$LEASEQ_OLD" && bins=("${old[@]}" "${bins[0]}")
scratch="$(mktemp -d -p "$repo_root/target" bench-durable.XXXXXX)" # on disk, not tmpfs
trap '[[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$scratch"' EXIT

probe() {
    # Two yardsticks: writes that extend the file (each fdatasync also commits the new size), and
    # writes over a file already zero-filled (what the log does, see docs/design/wal.md).
    python3 - "$scratch/probe" <<'EOF'
import os, sys, time
for mode in ("append", "overwrite"):
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    if mode == "overwrite":
        os.write(fd, bytes(4000 * 256))
        os.fsync(fd)
    block, samples = b"x" * 256, []
    for i in range(4000):
        started = time.perf_counter()
        os.pwrite(fd, block, i * 256)
        os.fdatasync(fd)
        samples.append(time.perf_counter() - started)
    os.close(fd)
    samples.sort()
    print("probe  fdatasync %-9s  p50 %4.0f us  p99 %5.0f us  %5.0f/s" % (
        mode, samples[2000] * 1e6, samples[3960] * 1e6, len(samples) / sum(samples)))
EOF
}

run() { # binary workload concurrency [mem]
    local port data mode=()
    [[ "${4:-}" == mem ]] && mode=(--in-memory true)
    port=$(free_port)
    data="$(mktemp -d -p "$scratch")"
    start_server "$port" /dev/null \
        "$1" serve --data-dir "$data" --listen "127.0.0.1:$port" --log warn "${mode[@]}"
    "$1" bench --endpoint "http://127.0.0.1:$port" --workload "$2" -c "$3" --duration "$seconds" \
        --server-pid "$server_pid" --json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)["run"]; a = r["actions"][0]; l = a["latency_us"]
print("%-3s -c %-3s %7.0f msg/s  p50 %5d us  p99 %6d us  server %5.1f us/msg  bench %5.1f us/msg%s" % (
    sys.argv[1], sys.argv[2], r["messages"] / r["elapsed_s"], l["p50"], l["p99"],
    r["server_cpu"]["us_per_message"], r["generator_cpu"]["us_per_message"], sys.argv[3]))' \
        "$2" "$3" "${4:+  (in memory)}"
    stop_server
    rm -rf "$data"
}

for round in $(seq 1 "$rounds"); do
    echo "round $round  $(date -u +%H:%M:%S)  load $(cut -d' ' -f1-3 /proc/loadavg)"
    probe
    for workload in ${WORKLOADS:-w1:1 w1:64 w2:64 w2:64:mem}; do
        IFS=: read -r name concurrency mode <<<"$workload"
        for bin in "${bins[@]}"; do
            printf '%-22s ' "$(basename "$bin")"
            run "$bin" "$name" "$concurrency" "$mode"
        done
    done
done
