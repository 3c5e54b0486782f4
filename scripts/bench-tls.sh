#!/usr/bin/env bash
# TLS against plain HTTP, side by side: W2 (SendMessageBatch of 10, 256-byte bodies) at c=64 on
# an in-memory server, once over plain HTTP/1.1 and once over HTTPS (HTTP/1.1 over TLS, the
# generator verifying a CA made here with openssl), in turn for each round, and the ratio of
# their throughputs (issue "Safe to expose": TLS at least 70% of plain).
#
#   scripts/bench-tls.sh [rounds] [seconds]     (default 3 × 10)
#
# LEASEQ_BIN=path uses that binary (default: target/release/leaseq, built if missing).
# LEASEQ_BENCH_CONCURRENCY (default 64) and LEASEQ_BENCH_WORKLOAD (default w2) change the load.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
. scripts/lib.sh
rounds="${1:-3}"
seconds="${2:-10}"
concurrency="${LEASEQ_BENCH_CONCURRENCY:-64}"
workload="${LEASEQ_BENCH_WORKLOAD:-w2}"
bin="${LEASEQ_BIN:-$repo_root/target/release/leaseq}"
if [[ -z "${LEASEQ_BIN:-}" && ! -x "$bin" ]]; then
    cargo build --release -p leaseq
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/leaseq-bench-tls.XXXXXX")"
cleanup() {
    stop_server
    rm -rf "$work"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=leaseq bench CA" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
    -keyout "$work/key.pem" -out "$work/server.csr" 2>/dev/null
printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
    "extendedKeyUsage=serverAuth" >"$work/server.ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
    -CAcreateserial -days 2 -extfile "$work/server.ext" -out "$work/cert.pem" 2>/dev/null

# One measured run: starts a server with "$@" on a fresh port, benches it, stops it; writes
# the throughput (msg/s) of its measured phase and the server's CPU per message to
# $work/SCHEME.result.
run() {
    local scheme="$1"; shift
    local port; port="$(free_port)"
    # A TCP probe: the HTTPS run's /health is not plain HTTP.
    start_server --tcp "$port" "$work/server.log" "$bin" serve --listen "127.0.0.1:$port" \
        --in-memory true --admin-listen 127.0.0.1:0 --log warn "$@"
    local extra=()
    [[ "$scheme" == https ]] && extra=(--ca-bundle "$work/ca.pem")
    "$bin" bench --endpoint "$scheme://localhost:$port" "${extra[@]}" --workload "$workload" \
        -c "$concurrency" --duration "$seconds" --server-pid "$server_pid" --json \
        >"$work/$scheme.json" 2>"$work/$scheme.progress"
    stop_server
    python3 - "$work/$scheme.json" >"$work/$scheme.result" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["run"]
server = (run.get("server_cpu") or {}).get("us_per_message")
print(f"{run['messages_sent'] / run['elapsed_s']:.0f} {server or 0:.2f}")
PY
}

echo "== $workload c=$concurrency, ${seconds}s per run, $rounds rounds, $bin"
plain_total=0; tls_total=0
for round in $(seq 1 "$rounds"); do
    run http
    read -r plain plain_cpu <"$work/http.result"
    run https --tls-cert "$work/cert.pem" --tls-key "$work/key.pem"
    read -r tls tls_cpu <"$work/https.result"
    echo "round $round: plain $plain msg/s (server ${plain_cpu} µs/msg), TLS $tls msg/s" \
        "(server ${tls_cpu} µs/msg): TLS/plain $(python3 -c "print(f'{$tls/$plain:.0%}')")"
    plain_total=$((plain_total + plain)); tls_total=$((tls_total + tls))
done
echo "mean: plain $((plain_total / rounds)) msg/s, TLS $((tls_total / rounds)) msg/s, TLS/plain $(python3 -c "print(f'{$tls_total/$plain_total:.0%}')")"
