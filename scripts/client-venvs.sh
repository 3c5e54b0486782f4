#!/usr/bin/env bash
# Creates the Python virtualenvs named as arguments (default: json query celery aio, the ones
# the client-compatibility tests run in):
#
#   target/venvs/json   current boto3 + awscli (v1) + pytest + prometheus-client (to parse
#                       /metrics): speaks the AWS JSON 1.0 protocol
#   target/venvs/query  boto3 1.28.70 / botocore 1.31.70 + pytest: the last releases that still
#                       speak the Query (form-encoded request, XML response) protocol for SQS
#   target/venvs/celery Celery + kombu[sqs] (kombu's SQS transport, with its boto3 and pycurl),
#                       pinned: tests/clients-celery
#   target/venvs/aio    aiobotocore (asyncio botocore), pinned: tests/clients-aiobotocore
#   target/venvs/peers  nats-py, aio-pika and aiohttp, the clients of scripts/bench-peers.sh
#
# They live under target/ so they are git-ignored and removed by `cargo clean`. A venv is
# rebuilt only when its requirement list changes (a stamp file records the list it was built
# from), so a second run takes well under a second. Packages come from PyPI only.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venvs_dir="${LEASEQ_VENVS_DIR:-$repo_root/target/venvs}"
python="${PYTHON:-python3}"

# Unpinned on purpose for the JSON venv: it should track what users install today. Re-run with
# LEASEQ_VENVS_REFRESH=1 to pick up new releases.
json_requirements="boto3 awscli pytest prometheus-client"
query_requirements="boto3==1.28.70 botocore==1.31.70 pytest"
# Pinned (==): a new release of these should be a deliberate change here, tested, not a surprise
# in CI. Their own dependencies (botocore, boto3...) are whatever versions these pins accept.
celery_requirements="celery==5.7.0 kombu[sqs]==5.7.0 pytest==9.2.0"
aio_requirements="aiobotocore==3.10.0 pytest==9.2.0"
peers_requirements="nats-py aio-pika aiohttp"

ensure_venv() {
    local name="$1" requirements="$2"
    local dir="$venvs_dir/$name"
    local stamp="$dir/.leaseq-requirements"
    if [[ -z "${LEASEQ_VENVS_REFRESH:-}" && -x "$dir/bin/python" && -f "$stamp" ]] \
        && [[ "$(cat "$stamp")" == "$requirements" ]]; then
        return 0
    fi
    echo "client-venvs: creating $dir ($requirements)" >&2
    rm -rf "$dir"
    mkdir -p "$venvs_dir"
    "$python" -m venv "$dir"
    # shellcheck disable=SC2086 # the requirement list is word-split on purpose
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check $requirements
    echo "$requirements" > "$stamp"
}

names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(json query celery aio)
for name in "${names[@]}"; do
    case "$name" in
        json) ensure_venv json "$json_requirements" ;;
        query) ensure_venv query "$query_requirements" ;;
        celery) ensure_venv celery "$celery_requirements" ;;
        aio) ensure_venv aio "$aio_requirements" ;;
        peers) ensure_venv peers "$peers_requirements" ;;
        *) echo "client-venvs: unknown venv $name (json query celery aio peers)" >&2; exit 2 ;;
    esac
done

# Print what was installed, so a failure report names the client versions.
for name in "${names[@]}"; do
    case "$name" in
        peers) continue ;; # bench-peers prints its own versions
        celery) extra='import celery, kombu; extra = f"celery {celery.__version__}, kombu {kombu.__version__}, "' ;;
        aio) extra='import aiobotocore; extra = f"aiobotocore {aiobotocore.__version__}, "' ;;
        *) extra='extra = ""' ;;
    esac
    "$venvs_dir/$name/bin/python" -c "$extra"'
import botocore, sys
try:
    import boto3
    extra += f"boto3 {boto3.__version__}, "
except ImportError:
    pass
print(f"client-venvs: '"$name"': {extra}botocore {botocore.__version__}, python {sys.version.split()[0]}")'
done
