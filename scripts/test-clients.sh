#!/usr/bin/env bash
# Client-compatibility tests: real SQS clients against a real `leaseq serve`.
#
#   1. builds the server (debug), 2. creates the client venvs (scripts/client-venvs.sh),
#   3. starts `leaseq serve` on a free loopback port with a fresh data directory,
#   4. runs tests/clients with current boto3 (AWS JSON 1.0 protocol, plus the `aws` CLI) and
#      with boto3 1.28.70 (Query protocol), each run with its own queue-name prefix,
#   5. stops the server (always, via trap) and exits non-zero if anything failed.
#
# Environment: LEASEQ_BIN=path uses that binary and skips the build; PYTEST_ARGS adds pytest
# arguments (e.g. PYTEST_ARGS='-k lease'); LEASEQ_KEEP_DATA=1 keeps the data directory.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
started_at=$(date +%s)

if [[ -n "${LEASEQ_BIN:-}" ]]; then
    server_bin="$LEASEQ_BIN"
else
    echo "== cargo build -p leaseq"
    cargo build -p leaseq
    server_bin="$repo_root/target/debug/leaseq"
fi

echo "== client venvs"
scripts/client-venvs.sh
venvs_dir="${LEASEQ_VENVS_DIR:-$repo_root/target/venvs}"
python="$venvs_dir/json/bin/python"

data_dir="$(mktemp -d "${TMPDIR:-/tmp}/leaseq-clients.XXXXXX")"
server_log="$data_dir.log"
server_pid=""
auth_pid=""

cleanup() {
    if [[ -n "$auth_pid" ]] && kill -0 "$auth_pid" 2>/dev/null; then
        kill -TERM "$auth_pid" 2>/dev/null || true
        wait "$auth_pid" 2>/dev/null || true
    fi
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null || true
        # Graceful shutdown should be quick; do not hang the caller if it is not.
        for _ in $(seq 1 50); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$server_pid" 2>/dev/null; then
            echo "test-clients: server did not stop within 5 s of SIGTERM; killing it" >&2
            kill -KILL "$server_pid" 2>/dev/null || true
        fi
        wait "$server_pid" 2>/dev/null || true
    fi
    if [[ -z "${LEASEQ_KEEP_DATA:-}" ]]; then
        rm -rf "$data_dir" "$server_log"
    else
        echo "test-clients: kept $data_dir and $server_log" >&2
    fi
}
trap cleanup EXIT

# A free port: bind port 0 and release it. Another process could take it in between; the
# health check below would then fail loudly rather than test the wrong server.
port="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
endpoint="http://127.0.0.1:$port"

echo "== starting $server_bin serve on $endpoint (data in $data_dir)"
"$server_bin" serve --listen "127.0.0.1:$port" --data-dir "$data_dir" >"$server_log" 2>&1 &
server_pid=$!

health_timeout_s=30
if ! "$python" - "$endpoint" "$health_timeout_s" "$server_pid" <<'PY'
import os, sys, time, urllib.request
endpoint, timeout_s, pid = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + timeout_s
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("server exited before answering /health")
    try:
        with urllib.request.urlopen(endpoint + "/health", timeout=1) as response:
            if response.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit(f"/health did not answer 200 within {timeout_s:.0f}s")
PY
then
    echo "test-clients: server failed to start; its log:" >&2
    cat "$server_log" >&2
    exit 1
fi
echo "== server up: $(head -n 3 "$server_log" | tr '\n' ' ')"

failures=()
run_pytest() {
    local venv="$1" protocol="$2"
    echo
    echo "== pytest: $venv venv ($protocol protocol)"
    local status=0
    # shellcheck disable=SC2086 # PYTEST_ARGS is word-split on purpose
    LEASEQ_ENDPOINT="$endpoint" LEASEQ_QUEUE_PREFIX="$venv" LEASEQ_EXPECT_PROTOCOL="$protocol" \
        timeout 600 "$venvs_dir/$venv/bin/python" -m pytest tests/clients \
        -p no:cacheprovider -q -rfEs --durations=5 --color=no ${PYTEST_ARGS:-} || status=$?
    if [[ $status -ne 0 ]]; then
        failures+=("pytest $venv ($protocol) exited $status")
    fi
}
run_pytest json json
run_pytest query query

# The same clients against a server with auth = "sigv4" (tests/clients-auth: right and wrong
# keys, two accounts), on its own port, in memory.
auth_port="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
auth_endpoint="http://127.0.0.1:$auth_port"
echo
echo "== starting $server_bin serve --auth sigv4 on $auth_endpoint"
LEASEQ_CREDENTIALS="AKIACLIENTS1:clients-secret-1:111111111111,AKIACLIENTS2:clients-secret-2:222222222222" \
    "$server_bin" serve --listen "127.0.0.1:$auth_port" --in-memory true --auth sigv4 \
    --admin-listen 127.0.0.1:0 >"$server_log.auth" 2>&1 &
auth_pid=$!
for _ in $(seq 1 100); do
    "$python" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/health', timeout=1)" \
        "$auth_endpoint" 2>/dev/null && break
    sleep 0.1
done
for venv in json query; do
    echo
    echo "== pytest: $venv venv against auth = sigv4"
    status=0
    LEASEQ_AUTH_ENDPOINT="$auth_endpoint" timeout 300 "$venvs_dir/$venv/bin/python" -m pytest \
        tests/clients-auth -p no:cacheprovider -q -rfEs --color=no || status=$?
    if [[ $status -ne 0 ]]; then
        failures+=("pytest $venv against auth = sigv4 exited $status")
        tail -n 20 "$server_log.auth"
    fi
done
rm -f "$server_log.auth"

if ! kill -0 "$server_pid" 2>/dev/null; then
    failures+=("the server died during the tests")
    echo "test-clients: the server is no longer running; its log:" >&2
    tail -n 50 "$server_log" >&2
fi

echo
echo "== client tests finished in $(( $(date +%s) - started_at ))s"
if [[ ${#failures[@]} -gt 0 ]]; then
    printf 'FAILED: %s\n' "${failures[@]}"
    echo "(last lines of the server log)"
    tail -n 20 "$server_log"
    exit 1
fi
echo "all client tests passed"
