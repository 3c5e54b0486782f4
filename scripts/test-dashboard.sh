#!/usr/bin/env bash
# The dashboard in a real browser: Debian's Chromium, headless, against a real `leaseq serve`.
#
#   1. installs Chromium from Debian's packages if it is missing (CI machines start without it),
#   2. builds the server (debug) and starts it in memory on a free loopback port,
#   3. creates a queue with three messages and leases one of them, through the JSON API (curl),
#   4. loads `GET /` in headless Chromium, lets its scripts run (virtual time), dumps the DOM and
#      checks that the queue's row shows 2 visible and 1 in flight, the lease table the one
#      lease (attempt 1), and the noisiest tenants table the queue's noisy tenant (a fair queue:
#      its messages carry a group id),
#   5. saves a screenshot as target/artifacts/dashboard.png,
#   6. dead-letters five messages of a second queue (one by its receive count, four failed at
#      once with LeaseqFailMessage) and clicks through the dead-letter buttons in headless
#      Chromium, driven over the DevTools protocol by scripts/dashboard-dlq.py: peek shows every
#      id and leases nothing; clicking a peeked message id opens its history panel (its attempts:
#      one expired, one failed, with the client's user agent); redrive (after its confirm dialog,
#      at 1 message/s) shows a running task that cancel stops; a second redrive brings every
#      message back to the source queue (counted through /api/queues).
#      Screenshots: target/artifacts/dashboard-dlq*.png (dashboard-dlq-history.png: the panel).
#
# Environment: LEASEQ_BIN=path uses that binary and skips the build.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

if ! command -v chromium >/dev/null; then
    echo "== installing Debian's chromium"
    if [[ $(id -u) -ne 0 ]]; then
        echo "chromium is missing and only root can install it (apt-get install chromium)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq chromium >/dev/null 2>&1 || {
        apt-get update -qq >/dev/null
        apt-get install -y -qq chromium >/dev/null
    }
fi

if [[ -n "${LEASEQ_BIN:-}" ]]; then
    server_bin="$LEASEQ_BIN"
else
    echo "== cargo build -p leaseq"
    cargo build -q -p leaseq
    server_bin="$repo_root/target/debug/leaseq"
fi

artifacts="$repo_root/target/artifacts"
mkdir -p "$artifacts"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/leaseq-dashboard.XXXXXX")"
server_pid=""
cleanup() {
    if [[ -n "$server_pid" ]]; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$scratch"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint="http://127.0.0.1:$port"
env -u LEASEQ_METRICS "$server_bin" serve --in-memory true --listen "127.0.0.1:$port" \
    >"$artifacts/dashboard-server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 200); do
    curl -sf "$endpoint/health" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$artifacts/dashboard-server.log" >&2; exit 1; }
    sleep 0.1
done

sqs() {
    curl -sf -H 'Content-Type: application/x-amz-json-1.0' -H "X-Amz-Target: AmazonSQS.$1" \
        -d "$2" "$endpoint/"
}
queue="dashboard-test-$RANDOM"
url="$endpoint/000000000000/$queue"
# A fair queue: its messages carry a group id, and one in flight is enough to make "loud" noisy.
sqs CreateQueue "{\"QueueName\":\"$queue\",\"Attributes\":{\"LeaseqFairInFlightMin\":\"1\"}}" >/dev/null
for i in 1 2 3; do
    sqs SendMessage "{\"QueueUrl\":\"$url\",\"MessageBody\":\"job-$i\",\"MessageGroupId\":\"loud\"}" >/dev/null
done
sqs ReceiveMessage "{\"QueueUrl\":\"$url\",\"MaxNumberOfMessages\":1}" | grep -q ReceiptHandle

# A source queue whose messages go to its dead-letter queue after one receive. Both names sort
# after $queue, which stays the queue the page selects first.
source_queue="orders-$RANDOM"
dlq="$source_queue-dlq"
source_url="$endpoint/000000000000/$source_queue"
sqs CreateQueue "{\"QueueName\":\"$dlq\"}" >/dev/null
redrive_policy="{\\\"deadLetterTargetArn\\\":\\\"arn:aws:sqs:us-east-1:000000000000:$dlq\\\",\\\"maxReceiveCount\\\":1}"
sqs CreateQueue "{\"QueueName\":\"$source_queue\",\"Attributes\":{\"RedrivePolicy\":\"$redrive_policy\"}}" >/dev/null
# json_field a.0.b prints the member at that path of the JSON on stdin.
json_field() {
    python3 -c 'import json, sys
value = json.load(sys.stdin)
for key in sys.argv[1].split("."):
    value = value[int(key) if key.isdigit() else key]
print(value)' "$1"
}
# The first by its receive count: received once, then the next receive moves it.
counted_id=$(sqs SendMessage "{\"QueueUrl\":\"$source_url\",\"MessageBody\":\"order-1\"}" | json_field MessageId)
for _ in 1 2; do
    sqs ReceiveMessage "{\"QueueUrl\":\"$source_url\",\"VisibilityTimeout\":0}" >/dev/null
done
dead_ids="$counted_id"
# Four more failed at once, with a reason (one body is markup, which the page must show as text).
# Five in all give the slow redrive (1 message/s) seconds to be cancelled before it is done.
for body in '<b>order-2</b>' order-3 order-4 order-5; do
    id=$(sqs SendMessage "{\"QueueUrl\":\"$source_url\",\"MessageBody\":\"$body\"}" | json_field MessageId)
    receipt=$(sqs ReceiveMessage "{\"QueueUrl\":\"$source_url\"}" | json_field Messages.0.ReceiptHandle)
    sqs LeaseqFailMessage "{\"QueueUrl\":\"$source_url\",\"ReceiptHandle\":\"$receipt\",\"Reason\":\"dashboard test failure\"}" >/dev/null
    dead_ids="$dead_ids,$id"
done

# Flags from the machine's notes: without the background-networking ones, Chromium keeps trying
# to reach Google's hosts, which a closed network refuses.
chromium_flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
    --disable-background-networking --disable-component-update --disable-sync
    --user-data-dir="$scratch/profile" --virtual-time-budget=5000)

echo "== chromium: $endpoint/"
chromium "${chromium_flags[@]}" --dump-dom "$endpoint/" >"$artifacts/dashboard.html" \
    2>"$scratch/chromium-dom.log" || { cat "$scratch/chromium-dom.log" >&2; exit 1; }
chromium "${chromium_flags[@]}" --window-size=1400,1000 \
    --screenshot="$artifacts/dashboard.png" "$endpoint/" >/dev/null 2>"$scratch/chromium-shot.log" \
    || { cat "$scratch/chromium-shot.log" >&2; exit 1; }

python3 - "$artifacts/dashboard.html" "$artifacts/dashboard.png" "$queue" <<'PY'
import re, sys
dom_path, png_path, queue = sys.argv[1:]
dom = open(dom_path, encoding="utf-8").read()
checks = []
row = re.search(r'<tr data-queue="%s"[^>]*>(.*?)</tr>' % re.escape(queue), dom, re.S)
checks.append(("the queues table has a row for %s" % queue, row is not None))
cells = dict(re.findall(r'<td class="([a-z-]+)">([^<]*)</td>', row.group(1))) if row else {}
for cell, want in [("visible", "2"), ("in-flight", "1"), ("delayed", "0")]:
    checks.append(("%s shows %s (it shows %r)" % (cell, want, cells.get(cell)), cells.get(cell) == want))
leases = re.search(r'<table id="leases">.*?<tbody>(.*?)</tbody>', dom, re.S)
lease_rows = re.findall(r'<tr>(.*?)</tr>', leases.group(1), re.S) if leases else []
attempts = [re.findall(r'<td class="attempt">([^<]*)</td>', row) for row in lease_rows]
checks.append(("the leases table shows one lease, attempt 1 (it shows %r)" % attempts, attempts == [["1"]]))
tenants = re.search(r'<table id="tenants">.*?<tbody>(.*?)</tbody>', dom, re.S)
tenant_rows = re.findall(r'<tr data-tenant="([^"]*)">(.*?)</tr>', tenants.group(1), re.S) if tenants else []
shown = [(name, dict(re.findall(r'<td class="([a-z-]+)">([^<]*)</td>', cells))) for name, cells in tenant_rows]
checks.append(("the noisiest tenants table shows 'loud', 1 in flight, 2 ready (it shows %r)" % shown,
               [(name, cells.get("in-flight"), cells.get("visible")) for name, cells in shown] == [("loud", "1", "2")]))
links = [re.search(r'<td class="message-id"><button class="history-link"[^>]*>([0-9a-f-]{36})</button>', row)
         for row in lease_rows]
checks.append(("the lease's message id opens its history", len(links) == 1 and links[0] is not None))
status = re.search(r'id="status">([^<]*)<', dom)
status = status.group(1) if status else ""
checks.append(("the status line reports the queues (it says %r)" % status, "queue(s), updated" in status))
with open(png_path, "rb") as f:
    checks.append(("the screenshot is a PNG", f.read(8) == b"\x89PNG\r\n\x1a\n"))
failed = [name for name, ok in checks if not ok]
for name, ok in checks:
    print("%s: %s" % ("ok  " if ok else "FAIL", name))
print("dashboard: %d passed, %d failed" % (len(checks) - len(failed), len(failed)))
sys.exit(1 if failed else 0)
PY
echo "screenshot: $artifacts/dashboard.png"

echo "== chromium (DevTools): peek, message history, redrive and cancel on $dlq"
python3 "$repo_root/scripts/dashboard-dlq.py" "$scratch" "$endpoint" "$source_queue" "$dlq" \
    "$dead_ids" "$artifacts/dashboard-dlq.png" \
    || { cat "$scratch/chromium-dlq.log" >&2 2>/dev/null; exit 1; }
echo "screenshot: $artifacts/dashboard-dlq.png"
