#!/usr/bin/env python3
"""leaseq cluster, measured side by side in one run (issue "leaseq cluster", its bars):

1. forwarding: W1 (one SendMessage per request) at concurrency 1 against the owner and against
   a standby of a two-node cluster, alternated `--rounds` times: p50/p99 latency and the ratio
   (bar: a request to a non-owner takes at most 2x the latency of one to the owner);
2. cost flat in N: W2 (batches of 10) at concurrency 64 against the owner of a cluster of 1, 2
   and 3 nodes: msg/s, PostgreSQL CPU µs, WAL bytes and commits per message (bar: the same with
   1, 2 and 3 nodes);
3. takeover: a backlog of `--backlog` messages (default 100 000) on the owner, kill -9 of the
   owner, and the time until a standby has taken over and answers the queue's counts (bar: at
   most 5 s), and with a SIGTERM (a hand-off) instead;
4. cost flat in N on several buckets: a log of `--buckets` buckets (default 4) that 1, 2 and 3
   nodes share out; four `leaseq bench` runs of W2 at 16 clients at once, each on a queue of
   another bucket and sent to another node (so most requests are forwarded once there are
   several): msg/s summed, PostgreSQL CPU µs, WAL bytes and commits per message, and the nodes'
   CPU per message summed.

Every node runs `leaseq serve --postgres ... --cluster true` on this machine's PostgreSQL
(`LEASEQ_POSTGRES`, default host=127.0.0.1 user=postgres dbname=test) in a schema of its own,
dropped at the end; the load generator is `leaseq bench`. The generator, the nodes and
PostgreSQL share the machine's cores: the ratios are the result, not the absolute numbers.

    scripts/bench-cluster.py [--seconds 5] [--rounds 3] [--backlog 100000] [--buckets 4]
                             [--sections 1,2,3,4]
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POSTGRES = os.environ.get("LEASEQ_POSTGRES", "host=127.0.0.1 user=postgres dbname=test")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary():
    if os.environ.get("LEASEQ_BIN"):
        return os.environ["LEASEQ_BIN"]
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "leaseq"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "leaseq")


class Node:
    def __init__(self, leaseq, schema, name, log_dir, timeout_ms, buckets=1):
        self.leaseq, self.schema, self.name = leaseq, schema, name
        self.buckets = buckets
        self.port = free_port()
        self.log = open(os.path.join(log_dir, f"{name}.log"), "ab")
        self.timeout_ms = timeout_ms
        self.process = None
        self.start()

    def start(self):
        self.process = subprocess.Popen(
            [self.leaseq, "serve", "--postgres", POSTGRES, "--postgres-schema", self.schema,
             "--cluster", "true", "--node-id", self.name,
             "--listen", f"127.0.0.1:{self.port}", "--node-timeout-ms", str(self.timeout_ms),
             "--postgres-buckets", str(self.buckets), "--log", "warn"],
            stdout=self.log, stderr=self.log)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def status(self):
        try:
            with urllib.request.urlopen(self.endpoint + "/api/cluster", timeout=1) as answer:
                return json.load(answer)
        except OSError:
            return None

    def stop(self, sig=signal.SIGTERM):
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_until(what, condition, timeout=30.0, every=0.005):
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        value = condition()
        if value:
            return value
        time.sleep(every)
    sys.exit(f"bench-cluster: timed out waiting for {what}")


def owner_of(nodes):
    for node in nodes:
        status = node.status()
        if status and status["role"] == "owner":
            return node
    return None


def ready(nodes):
    """The owner, once every node knows it."""
    owner = owner_of(nodes)
    if owner is None:
        return None
    for node in nodes:
        status = node.status()
        if not status or not status["owner"] or status["owner"]["node_id"] != owner.name:
            return None
    return owner


def bench(leaseq, endpoint, *args):
    command = [leaseq, "bench", "--endpoint", endpoint, "--json", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench-cluster: {' '.join(command)} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def sqs(endpoint, action, body):
    request = urllib.request.Request(
        endpoint + "/", data=json.dumps(body).encode(), method="POST",
        headers={"X-Amz-Target": f"AmazonSQS.{action}",
                 "Content-Type": "application/x-amz-json-1.0"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def visible(endpoint, queue):
    try:
        answer = sqs(endpoint, "GetQueueAttributes",
                     {"QueueUrl": f"{endpoint}/000000000000/{queue}",
                      "AttributeNames": ["ApproximateNumberOfMessages"]})
        return int(answer["Attributes"]["ApproximateNumberOfMessages"])
    except OSError:
        return None


def drop_schema(schema):
    subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c",
                    f"DROP SCHEMA IF EXISTS {schema} CASCADE"], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def forwarding(leaseq, nodes, seconds, rounds):
    owner = wait_until("an owner", lambda: ready(nodes))
    standby = next(node for node in nodes if node is not owner)
    print(f"\n1. W1 at concurrency 1, {seconds} s each, owner {owner.name} vs standby "
          f"{standby.name}, {rounds} rounds alternated")
    rows = {"owner": [], "standby": []}
    for _ in range(rounds):
        for label, node in (("owner", owner), ("standby", standby)):
            report = bench(leaseq, node.endpoint, "--workload", "w1", "-c", "1",
                           "--duration", str(seconds))
            send = next(a for a in report["run"]["actions"] if a["action"] == "SendMessage")
            rows[label].append((send["latency_us"]["p50"], send["latency_us"]["p99"],
                                send["messages_per_s"], send["errors"]))
    print(f"   {'to':8} {'p50 µs':>9} {'p99 µs':>9} {'msg/s':>9} {'errors':>7}")
    for label, values in rows.items():
        for p50, p99, rate, errors in values:
            print(f"   {label:8} {p50:>9} {p99:>9} {rate:>9.0f} {errors:>7}")
    owner_p50 = statistics.median(v[0] for v in rows["owner"])
    standby_p50 = statistics.median(v[0] for v in rows["standby"])
    print(f"   median p50: owner {owner_p50:.0f} µs, standby {standby_p50:.0f} µs, "
          f"ratio {standby_p50 / owner_p50:.2f} (bar: <= 2)")


def cost_by_nodes(leaseq, schema, log_dir, seconds, timeout_ms):
    """W2 with 1, 2, 3, 2, 1 nodes (standbys join, then leave): the owner stays the first node,
    so only the number of standbys changes, in both directions (PostgreSQL's own drift over the
    run, its checkpoints' full-page writes, shows as a difference between the two halves)."""
    print(f"\n2. W2 at concurrency 64 against the owner, {seconds} s, by cluster size")
    print(f"   {'nodes':>5} {'msg/s':>9} {'PG µs/msg':>10} {'WAL B/msg':>10} "
          f"{'commits/msg':>12} {'owner µs/msg':>13}")
    nodes = []
    try:
        for size in (1, 2, 3, 2, 1):
            while len(nodes) < size:
                nodes.append(Node(leaseq, schema, f"n{len(nodes) + 1}", log_dir, timeout_ms))
            while len(nodes) > size:
                nodes.pop().stop(signal.SIGTERM)
            owner = wait_until("an owner", lambda: ready(nodes))
            report = bench(leaseq, owner.endpoint, "--workload", "w2", "-c", "64",
                           "--duration", str(seconds), "--postgres-stats", POSTGRES,
                           "--server-pid", str(owner.process.pid))
            run = report["run"]
            postgres = run["postgres"] or {}
            rate = run["messages"] / run["elapsed_s"]
            print(f"   {size:>5} {rate:>9.0f} {postgres['cpu']['us_per_message']:>10.2f} "
                  f"{postgres['wal_bytes_per_message']:>10.1f} "
                  f"{postgres['commits_per_message']:>12.4f} "
                  f"{run['server_cpu']['us_per_message']:>13.2f}")
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


def bucket_of(name, buckets):
    """leaseq_core::transfer::bucket_of: FNV-1a of the name, modulo the bucket count."""
    hash = 0xCBF29CE484222325
    for byte in name.encode():
        hash = ((hash ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return hash % buckets


def queues_of_buckets(buckets, count, prefix):
    """`count` queue names, each in another bucket (as many as there are buckets)."""
    chosen, i = {}, 0
    while len(chosen) < min(count, buckets):
        chosen.setdefault(bucket_of(f"{prefix}{i}", buckets), f"{prefix}{i}")
        i += 1
    return [chosen[bucket] for bucket in sorted(chosen)]


def owners_agreed(nodes):
    """Every bucket's owner, once every node knows the same one for each."""
    views = [node.status() for node in nodes]
    if not all(views):
        return None
    owners = [[bucket["owner"] for bucket in view["buckets"]] for view in views]
    if any(owner is None for owner in owners[0]) or any(o != owners[0] for o in owners):
        return None
    return owners[0]


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cost_by_nodes_buckets(leaseq, schema, log_dir, seconds, timeout_ms, buckets, direct):
    to = "to its bucket's owner" if direct else "to another node"
    print(f"\n4. W2 on {buckets} buckets, runs of 16 clients at once, each on a queue of another "
          f"bucket and {to}, {seconds} s, by cluster size")
    print(f"   {'nodes':>5} {'owners':>16} {'msg/s':>9} {'PG µs/msg':>10} {'WAL B/msg':>10} "
          f"{'commits/msg':>12} {'nodes µs/msg':>13}")
    nodes = []
    tick_us = 1_000_000 / os.sysconf("SC_CLK_TCK")
    try:
        for step, size in enumerate((1, 2, 3, 2, 1)):
            # New queues each step: a deleted queue's name is taken for a minute.
            queues = queues_of_buckets(buckets, 4, f"cq{step}-")
            while len(nodes) < size:
                nodes.append(Node(leaseq, schema, f"n{len(nodes) + 1}", log_dir, timeout_ms,
                                  buckets))
            while len(nodes) > size:
                nodes.pop().stop(signal.SIGTERM)
            # Placement settles: owners agreed, and still the same after a rebalance's wait.
            while True:
                owners = wait_until("every bucket's owner", lambda: owners_agreed(nodes), 60)
                time.sleep(3)
                if owners_agreed(nodes) == owners:
                    break
            ticks = [cpu_ticks(node.process.pid) for node in nodes]
            runs = []
            for i, queue in enumerate(queues):
                extra = ["--postgres-stats", POSTGRES] if i == 0 else []
                node = nodes[i % size]
                if direct:
                    owner = owners[bucket_of(queue, buckets)]
                    node = next(node for node in nodes if node.name == owner)
                command = [leaseq, "bench", "--endpoint", node.endpoint, "--json",
                           "--workload", "w2", "-c", "16", "--duration", str(seconds),
                           "--queue", queue, *extra]
                runs.append(subprocess.Popen(command, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True))
            reports = []
            for run in runs:
                out, err = run.communicate()
                if run.returncode != 0:
                    sys.exit(f"bench-cluster: a run failed:\n{err}")
                reports.append(json.loads(out)["run"])
            used = sum(cpu_ticks(node.process.pid) for node in nodes) - sum(ticks)
            messages = sum(report["messages"] for report in reports)
            rate = sum(report["messages"] / report["elapsed_s"] for report in reports)
            # The first run measured PostgreSQL over the same seconds as the others ran.
            first = reports[0]
            postgres = first["postgres"]
            scale = first["messages"] / messages
            counts = {owner: owners.count(owner) for owner in sorted(set(owners))}
            spread = "/".join(str(counts.get(node.name, 0)) for node in nodes)
            print(f"   {size:>5} {spread:>16} {rate:>9.0f} "
                  f"{postgres['cpu']['us_per_message'] * scale:>10.2f} "
                  f"{postgres['wal_bytes_per_message'] * scale:>10.1f} "
                  f"{postgres['commits_per_message'] * scale:>12.4f} "
                  f"{used * tick_us / max(messages, 1):>13.2f}")
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


def takeover(leaseq, nodes, backlog, how):
    owner = wait_until("an owner", lambda: ready(nodes))
    standby = next(node for node in nodes if node is not owner)
    queue = f"takeover-{how.replace(' ', '').replace('-', '')}-{int(time.time())}"
    bench(leaseq, owner.endpoint, "--workload", "w2", "-c", "16", "--messages", str(backlog),
          "--queue", queue, "--keep", "--duration", "600")
    expected = visible(owner.endpoint, queue)
    started = time.monotonic()
    owner.stop(signal.SIGKILL if how == "kill -9" else signal.SIGTERM)
    wait_until("the standby's answer", lambda: visible(standby.endpoint, queue) == expected,
               timeout=60, every=0.002)
    took = time.monotonic() - started
    status = standby.status()
    print(f"   {how:8} backlog {expected:>7}: answered by the new owner after {took:.2f} s "
          f"(new owner {status['node_id'] if status else '?'}, epoch {status and status['epoch']})")
    owner.start()
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--node-timeout-ms", type=int, default=5000)
    parser.add_argument("--buckets", type=int, default=4,
                        help="the bucket count of section 4's log")
    parser.add_argument("--direct", action="store_true",
                        help="section 4 sends each run to its queue's owner (no forwarding)")
    parser.add_argument("--sections", default="1,2,3,4",
                        help="which measurements to run: 1 forwarding, 2 cost by size, "
                             "3 takeover, 4 cost by size on several buckets")
    args = parser.parse_args()
    leaseq = binary()
    log_dir = os.path.join(ROOT, "target", "bench-cluster")
    os.makedirs(log_dir, exist_ok=True)
    schema = f"leaseq_bench_cluster_{os.getpid()}"
    drop_schema(schema)
    print(f"leaseq cluster benchmark: {leaseq}, nodes' logs in {log_dir}, schema {schema}")
    sections = set(args.sections.split(","))
    try:
        if "2" in sections:
            cost_by_nodes(leaseq, schema + "_n", log_dir, args.seconds, args.node_timeout_ms)
        if "4" in sections:
            cost_by_nodes_buckets(leaseq, schema + "_b", log_dir, args.seconds,
                                  args.node_timeout_ms, args.buckets, args.direct)
        nodes = [Node(leaseq, schema, name, log_dir, args.node_timeout_ms) for name in ("a", "b")]
        try:
            if "1" in sections:
                forwarding(leaseq, nodes, args.seconds, args.rounds)
            if "3" in sections:
                print(f"\n3. takeover of a {args.backlog}-message backlog")
                for how in ("kill -9", "SIGTERM"):
                    takeover(leaseq, nodes, args.backlog, how)
        finally:
            for node in nodes:
                node.stop(signal.SIGKILL)
    finally:
        drop_schema(schema)
        drop_schema(schema + "_n")
        drop_schema(schema + "_b")


if __name__ == "__main__":
    main()
