#!/usr/bin/env bash
# Client-compatibility tests: real SQS clients against a real `leaseq serve`.
#
#   1. builds the server (debug), 2. creates the client venvs (scripts/client-venvs.sh) and
#      installs the JavaScript clients from tests/clients-js/package-lock.json (`npm ci`),
#   3. starts `leaseq serve` on a free loopback port with a fresh data directory,
#   4. runs, each with its own queue names:
#      - tests/clients with current boto3 (AWS JSON 1.0 protocol, plus the `aws` CLI) and with
#        boto3 1.28.70 (Query protocol),
#      - tests/clients-js (node --test): @aws-sdk/client-sqs v3, sqs-producer + sqs-consumer and
#        README's JavaScript snippets,
#      - tests/clients-celery: Celery workers on kombu's SQS transport,
#      - tests/clients-aiobotocore: aiobotocore,
#      - tests/clients-terraform: Terraform's AWS provider, if the machine has it in a local
#        provider mirror (it starts and restarts its own server); else a SKIPPED line says why,
#      - with the boto3 suites: tests/clients-auth (a server with auth = "sigv4") and
#        tests/clients-tls (the aws CLI and boto3 over HTTPS with a CA bundle; certificates made
#        with openssl, which the TLS run needs),
#   5. stops the server (always, via trap) and exits non-zero if anything failed.
#
# Environment: LEASEQ_BIN=path uses that binary and skips the build; PYTEST_ARGS adds pytest
# arguments (e.g. PYTEST_ARGS='-k lease'); LEASEQ_KEEP_DATA=1 keeps the data directory;
# LEASEQ_TF_MIRROR=dir names the Terraform provider mirror (a directory holding
# registry.terraform.io/hashicorp/aws/...) instead of looking in the usual places;
# LEASEQ_CLIENT_SUITES="boto3 js celery aio terraform" picks suites (default: all).
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
suites=" ${LEASEQ_CLIENT_SUITES:-boto3 js celery aio terraform} "

# The JavaScript clients, exactly as package-lock.json pins them. `npm ci` runs again only when
# the lock file changed (node_modules keeps a copy of the one it was installed from).
js_dir="$repo_root/tests/clients-js"
if [[ "$suites" == *" js "* ]]; then
    command -v node >/dev/null || { echo "test-clients: node is not installed (Node 20+ needed)" >&2; exit 1; }
    if ! cmp -s "$js_dir/package-lock.json" "$js_dir/node_modules/.leaseq-package-lock.json"; then
        echo "== npm ci (tests/clients-js)"
        (cd "$js_dir" && npm ci --no-audit --no-fund --loglevel=error)
        cp "$js_dir/package-lock.json" "$js_dir/node_modules/.leaseq-package-lock.json"
    fi
    echo "== node $(node --version); $(cd "$js_dir" && node -e 'for (const p of ["@aws-sdk/client-sqs", "sqs-producer", "sqs-consumer"]) process.stdout.write(`${p} ${require(`./node_modules/${p}/package.json`).version}; `)')"
fi

# Terraform's AWS provider from a local mirror: the usual places of one, or LEASEQ_TF_MIRROR. A
# CI machine without it skips the Terraform scenario (and says so) rather than downloading it.
find_terraform_mirror() {
    local dir
    for dir in ${LEASEQ_TF_MIRROR:-} "$HOME/.terraform.d/plugins" "$HOME/.local/share/terraform/plugins" \
        /usr/local/share/terraform/plugins /usr/share/terraform/plugins /opt/tf-plugins \
        /opt/terraform/plugins; do
        if compgen -G "$dir/registry.terraform.io/hashicorp/aws/*/linux_amd64/terraform-provider-aws*" >/dev/null; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}

data_dir="$(mktemp -d "${TMPDIR:-/tmp}/leaseq-clients.XXXXXX")"
server_log="$data_dir.log"
server_pid=""
auth_pid=""
tls_pid=""

cleanup() {
    if [[ -n "${terraform_pid:-}" ]] && kill -0 "$terraform_pid" 2>/dev/null; then
        # The Terraform run's `timeout` passes the signal on to its pytest.
        pkill -TERM -P "$terraform_pid" 2>/dev/null || true
        wait "$terraform_pid" 2>/dev/null || true
    fi
    if [[ -n "$auth_pid" ]] && kill -0 "$auth_pid" 2>/dev/null; then
        kill -TERM "$auth_pid" 2>/dev/null || true
        wait "$auth_pid" 2>/dev/null || true
    fi
    if [[ -n "$tls_pid" ]] && kill -0 "$tls_pid" 2>/dev/null; then
        kill -TERM "$tls_pid" 2>/dev/null || true
        wait "$tls_pid" 2>/dev/null || true
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
        rm -rf "$data_dir" "$server_log" "$data_dir.terraform.log" "$data_dir.terraform.log.took"
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
run_suite() {
    local label="$1"
    shift
    echo
    echo "== $label"
    local status=0
    LEASEQ_ENDPOINT="$endpoint" timeout 600 "$@" || status=$?
    if [[ $status -ne 0 ]]; then
        failures+=("$label exited $status")
    fi
}
# pytest in a venv: `run_suite LABEL "${pytest_in[@]/VENV/celery}" tests/...`.
# shellcheck disable=SC2206 # PYTEST_ARGS is word-split on purpose
pytest_in=("$venvs_dir/VENV/bin/python" -m pytest -p no:cacheprovider -q -rfEs --durations=3 --color=no ${PYTEST_ARGS:-})
suite_started() { suite_started_at=$(date +%s); }
suite_took() { timings+=("$1 $(( $(date +%s) - suite_started_at ))s"); }
timings=()

if [[ "$suites" == *" boto3 "* ]]; then
    suite_started; run_pytest json json; run_pytest query query; suite_took boto3
fi
# Terraform's scenario is mostly waiting (the AWS provider reads a queue's attributes six times,
# 5 s apart, after every change, and starts its 700 MB binary three times per command), so it
# runs on its own server beside the suites below. Not beside the boto3 ones: the provider's
# start-ups load both cores, and the aws CLI test's 5 s leases do not survive that.
terraform_pid=""
terraform_log="$data_dir.terraform.log"
if [[ "$suites" == *" terraform "* ]]; then
    if ! command -v terraform >/dev/null; then
        echo; echo "== SKIPPED Terraform: no terraform on PATH"
    elif ! tf_mirror="$(find_terraform_mirror)"; then
        echo; echo "== SKIPPED Terraform: no AWS provider in a local mirror (looked in LEASEQ_TF_MIRROR," \
            "~/.terraform.d/plugins, ~/.local/share/terraform/plugins, /usr/local/share/terraform/plugins," \
            "/usr/share/terraform/plugins, /opt/tf-plugins, /opt/terraform/plugins)"
    else
        echo; echo "== Terraform scenario started in the background: $(TF_CLI_CONFIG_FILE=/dev/null terraform version | head -n 1)," \
            "AWS provider from $tf_mirror"
        (
            tf_started_at=$(date +%s)
            status=0
            LEASEQ_TF_MIRROR="$tf_mirror" LEASEQ_BIN="$server_bin" timeout 900 \
                "${pytest_in[@]/VENV/json}" tests/clients-terraform || status=$?
            echo $(( $(date +%s) - tf_started_at )) > "$terraform_log.took"
            exit $status
        ) >"$terraform_log" 2>&1 &
        terraform_pid=$!
    fi
fi

if [[ "$suites" == *" js "* ]]; then
    suite_started
    run_suite "node --test: @aws-sdk/client-sqs, sqs-producer, sqs-consumer" \
        bash -c 'cd "$1" && node --test --test-reporter=spec sdk.test.mjs producer-consumer.test.mjs snippets.test.mjs' _ "$js_dir"
    suite_took js
fi
if [[ "$suites" == *" celery "* ]]; then
    suite_started; run_suite "pytest: Celery + kombu[sqs]" "${pytest_in[@]/VENV/celery}" tests/clients-celery; suite_took celery
fi
if [[ "$suites" == *" aio "* ]]; then
    suite_started; run_suite "pytest: aiobotocore" "${pytest_in[@]/VENV/aio}" tests/clients-aiobotocore; suite_took aio
fi
if [[ -n "$terraform_pid" ]]; then
    echo
    echo "== pytest: Terraform (it ran beside the suites above; its output follows)"
    terraform_status=0
    wait "$terraform_pid" || terraform_status=$?
    cat "$terraform_log"
    timings+=("terraform $(cat "$terraform_log.took" 2>/dev/null)s beside them")
    [[ $terraform_status -eq 0 ]] || failures+=("pytest: Terraform exited $terraform_status")
fi

if [[ "$suites" == *" boto3 "* ]]; then
    # The same clients against a server with auth = "sigv4" (tests/clients-auth: right and wrong
    # keys, accounts, queue policies between three accounts), on its own port, in memory.
    auth_port="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    auth_endpoint="http://127.0.0.1:$auth_port"
    echo
    echo "== starting $server_bin serve --auth sigv4 on $auth_endpoint"
    LEASEQ_CREDENTIALS="AKIACLIENTS1:clients-secret-1:111111111111,AKIACLIENTS2:clients-secret-2:222222222222,AKIACLIENTS3:clients-secret-3:333333333333" \
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
fi

if [[ "$suites" == *" boto3 "* ]]; then
    # The aws CLI and boto3 over HTTPS (tests/clients-tls): a CA and a server certificate for
    # localhost and 127.0.0.1 made here with openssl, the server on its own port with
    # --tls-cert/--tls-key, in memory, and the clients trusting the CA (--ca-bundle,
    # AWS_CA_BUNDLE, verify=).
    if ! command -v openssl >/dev/null; then
        echo; echo "== SKIPPED TLS clients: no openssl on PATH to make the test certificates"
    else
        tls_dir="$data_dir.tls"
        mkdir -p "$tls_dir"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
            -subj "/CN=leaseq clients CA" -addext "keyUsage=critical,keyCertSign,cRLSign" \
            -keyout "$tls_dir/ca.key" -out "$tls_dir/ca.pem" 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
            -keyout "$tls_dir/key.pem" -out "$tls_dir/server.csr" 2>/dev/null
        printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
            "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" \
            "authorityKeyIdentifier=keyid,issuer" "subjectKeyIdentifier=hash" >"$tls_dir/server.ext"
        openssl x509 -req -in "$tls_dir/server.csr" -CA "$tls_dir/ca.pem" -CAkey "$tls_dir/ca.key" \
            -CAcreateserial -days 2 -extfile "$tls_dir/server.ext" -out "$tls_dir/cert.pem" 2>/dev/null
        tls_port="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
        tls_endpoint="https://localhost:$tls_port"
        echo
        echo "== starting $server_bin serve with TLS on $tls_endpoint"
        "$server_bin" serve --listen "127.0.0.1:$tls_port" --in-memory true \
            --tls-cert "$tls_dir/cert.pem" --tls-key "$tls_dir/key.pem" \
            --admin-listen 127.0.0.1:0 >"$server_log.tls" 2>&1 &
        tls_pid=$!
        for _ in $(seq 1 100); do
            "$python" -c "import ssl,socket,sys; c=ssl.create_default_context(cafile=sys.argv[2]); \
c.wrap_socket(socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=1), server_hostname='localhost').close()" \
                "$tls_port" "$tls_dir/ca.pem" 2>/dev/null && break
            sleep 0.1
        done
        status=0
        LEASEQ_TLS_ENDPOINT="$tls_endpoint" LEASEQ_TLS_CA="$tls_dir/ca.pem" timeout 300 \
            "$venvs_dir/json/bin/python" -m pytest tests/clients-tls -p no:cacheprovider -q -rfEs \
            --color=no || status=$?
        if [[ $status -ne 0 ]]; then
            failures+=("pytest json against TLS exited $status")
            tail -n 20 "$server_log.tls"
        fi
        kill -TERM "$tls_pid" 2>/dev/null || true
        wait "$tls_pid" 2>/dev/null || true
        rm -rf "$tls_dir" "$server_log.tls"
    fi
fi

if ! kill -0 "$server_pid" 2>/dev/null; then
    failures+=("the server died during the tests")
    echo "test-clients: the server is no longer running; its log:" >&2
    tail -n 50 "$server_log" >&2
fi

echo
echo "== client tests finished in $(( $(date +%s) - started_at ))s (${timings[*]:-})"
if [[ ${#failures[@]} -gt 0 ]]; then
    printf 'FAILED: %s\n' "${failures[@]}"
    echo "(last lines of the server log)"
    tail -n 20 "$server_log"
    exit 1
fi
echo "all client tests passed"
