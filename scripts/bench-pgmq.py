#!/usr/bin/env python3
"""leaseq on PostgreSQL against pgmq, side by side in one run, on the same PostgreSQL.

Both are driven by `leaseq bench` (the same Rust load generator, one connection and one request
in flight per worker) with the same request shapes, message sizes and concurrencies:

  send1     single sends (SendMessage / pgmq.send)
  send10    batches of 10 (SendMessageBatch / pgmq.send_batch)
  consume   receive 10 + delete the batch, from a backlog filled first (pgmq.read + pgmq.delete)

For every cell: msg/s, PostgreSQL CPU us per message (all postgres processes, /proc), WAL bytes
and commits per message (pg_current_wal_lsn, pg_stat_database), and leaseq's own CPU us/msg.
With --held-xmin, the same again while another session holds the xmin horizon back
(BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT ...; left open), then n_dead_tup of each
system's tables. The file log (--fsync always) runs both send shapes too: the ratio of leaseq on
PostgreSQL to leaseq on its file log, and a ceiling (the same engine and request path without
PostgreSQL's round trip and CPU). The last column is the CPU that 5x pgmq's rate would take at
leaseq-pg's measured cost per message (generator + leaseq + PostgreSQL), in cores: above the
machine's cores, that cell's 5x cannot be reached at these costs.

pgmq's SQL comes from the `pgmq` package on PyPI (its wheel ships pgmq.sql), installed with
`psql -f` into a database this script creates (and drops at the end).

Both run on a PostgreSQL cluster of this run's own (Debian's pg_createcluster, on a free port,
dropped at the end), with the machine's defaults except max_connections = 600: at 256 clients
pgmq needs a session per client, which the machine's server (max_connections = 100) would
refuse. Its CPU is that cluster's processes only. --machine-postgres uses the server on
127.0.0.1:5432 instead (whose other sessions then count too).

With --one-flush, leaseq on PostgreSQL also runs with one group commit in flight at a time
(`--postgres-flushes 1`, in a schema of its own), beside the default, for the difference that
several commits in flight make.

Usage: scripts/bench-pgmq.py [--seconds 5] [--sizes 256,1024] [--concurrency 16,64,256]
         [--shapes send1,send10,consume] [--held-xmin] [--one-flush] [--machine-postgres]
         [--json out.json]
  LEASEQ_BIN  the leaseq binary (default target/release/leaseq, built if missing)
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PGMQ_VERSION = "1.1.4"  # the PyPI package; its wheel carries pgmq.sql (pgmq 1.13.0)
DATABASE = "leaseq_bench_pgmq"
PORT = 5432  # the machine's server, or the run's own cluster (main() sets it)
BASE = "host=127.0.0.1 user=postgres"


def psql_args(database):
    return ["psql", "-h", "127.0.0.1", "-p", str(PORT), "-U", "postgres", "-d", database]


def psql(sql, database="postgres", check=True):
    return subprocess.run(
        psql_args(database) + ["-v", "ON_ERROR_STOP=1", "-qAtc", sql],
        check=check, capture_output=True, text=True).stdout.strip()


class Cluster:
    """A PostgreSQL cluster of this run's own (pg_createcluster), dropped by stop()."""

    def __init__(self):
        version = sorted(os.listdir("/usr/lib/postgresql"))[-1]
        self.version, self.name, self.port = version, f"leaseq_bench_{os.getpid()}", free_port()
        subprocess.run(["pg_createcluster", "-q", version, self.name, "-p", str(self.port),
                        "-o", "max_connections=600", "--", "--auth=trust"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, self.name,
                        "start"], check=True)

    def stop(self):
        subprocess.run(["pg_dropcluster", "--stop", self.version, self.name], check=False)


def pgmq_sql():
    """pgmq.sql from the PyPI wheel, downloaded once into target/pgmq."""
    directory = os.path.join(ROOT, "target", "pgmq")
    path = os.path.join(directory, "pgmq.sql")
    if os.path.exists(path):
        return path
    os.makedirs(directory, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                    f"pgmq=={PGMQ_VERSION}", "-d", directory], check=True)
    wheel = next(f for f in os.listdir(directory) if f.endswith(".whl"))
    with zipfile.ZipFile(os.path.join(directory, wheel)) as archive:
        with archive.open("pgmq/sql/pgmq.sql") as source, open(path, "wb") as target:
            shutil.copyfileobj(source, target)
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A leaseq server of this run's."""

    def __init__(self, binary, *args):
        self.port = free_port()
        self.data = tempfile.mkdtemp(prefix="bench-pgmq.", dir=os.path.join(ROOT, "target"))
        self.process = subprocess.Popen(
            [binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data,
             *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"leaseq serve {args} did not answer")

    def stop(self):
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(self.data, ignore_errors=True)


def bench(binary, target, shape, size, concurrency, seconds):
    """One cell: `leaseq bench` against an SQS endpoint (a Server) or pgmq (None)."""
    args = [binary, "bench", "--json", "--duration", str(seconds), "--message-size", str(size),
            "--postgres-stats", f"{BASE} dbname={DATABASE}", "--threads", "2"]
    if target is None:
        args += ["--pgmq", f"{BASE} dbname={DATABASE}"]
    else:
        args += ["--endpoint", f"http://127.0.0.1:{target.port}",
                 "--server-pid", str(target.process.pid)]
    if shape == "send1":
        args += ["--workload", "w1", "-c", str(concurrency)]
    elif shape == "send10":
        args += ["--workload", "w2", "-c", str(concurrency)]
    else:
        # A backlog that lasts the phase at the faster system's rate; the phase ends when it
        # is drained or the time is up, and msg/s divides by the time it took.
        args += ["--workload", "w3", "-c", str(concurrency), "--backlog", "60000",
                 "--wait-time-seconds", "1"]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or ["failed"]}
    run = json.loads(done.stdout)["run"]
    messages = run["messages"]
    pg = run.get("postgres") or {}
    errors = sum(a["errors"] + a["failed_entries"] for a in run["actions"])
    return {
        "msg_s": messages / max(run["elapsed_s"], 1e-9),
        "pg_cpu_us": (pg.get("cpu") or {}).get("us_per_message"),
        "wal_b": pg.get("wal_bytes_per_message"),
        "commits": pg.get("commits_per_message"),
        "leaseq_cpu_us": (run.get("server_cpu") or {}).get("us_per_message"),
        "generator_cpu_us": (run.get("generator_cpu") or {}).get("us_per_message"),
        "errors": errors,
    }


def table_stats(schema):
    return psql("SELECT coalesce(sum(n_dead_tup), 0) || ' dead tuples, ' || "
                "coalesce(sum(n_tup_upd), 0) || ' updates, ' || coalesce(sum(n_tup_del), 0) || "
                f"' deletes' FROM pg_stat_user_tables WHERE schemaname = '{schema}'", DATABASE)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--sizes", default="256,1024")
    parser.add_argument("--concurrency", default="16,64,256")
    parser.add_argument("--shapes", default="send1,send10,consume")
    parser.add_argument("--held-xmin", action="store_true")
    parser.add_argument("--one-flush", action="store_true")
    parser.add_argument("--machine-postgres", action="store_true")
    parser.add_argument("--json")
    options = parser.parse_args()
    binary = os.environ.get("LEASEQ_BIN", os.path.join(ROOT, "target", "release", "leaseq"))
    if not os.path.exists(binary):
        subprocess.run(["cargo", "build", "--release", "-p", "leaseq"], cwd=ROOT, check=True)
    sizes = [int(s) for s in options.sizes.split(",")]
    concurrencies = [int(c) for c in options.concurrency.split(",")]
    shapes = options.shapes.split(",")

    global PORT, BASE
    cluster = None if options.machine_postgres else Cluster()
    if cluster:
        PORT = cluster.port
        BASE = f"host=127.0.0.1 port={PORT} user=postgres"
    try:
        run(binary, options, sizes, concurrencies, shapes)
    finally:
        if cluster:
            cluster.stop()


def run(binary, options, sizes, concurrencies, shapes):
    psql(f"DROP DATABASE IF EXISTS {DATABASE}")
    psql(f"CREATE DATABASE {DATABASE}")
    subprocess.run(psql_args(DATABASE) + ["-v", "ON_ERROR_STOP=1", "-q", "-f", pgmq_sql()],
                   check=True, stdout=subprocess.DEVNULL)
    on_postgres = Server(binary, "--postgres", f"{BASE} dbname={DATABASE}")
    on_file = Server(binary, "--fsync", "always")
    one_flush = (Server(binary, "--postgres", f"{BASE} dbname={DATABASE}", "--postgres-schema",
                        "leaseq_one_flush", "--postgres-flushes", "1")
                 if options.one_flush else None)
    results = []
    phases = [False, True] if options.held_xmin else [False]
    holder = None
    try:
        for held in phases:
            if held:
                holder = subprocess.Popen(
                    psql_args(DATABASE) + ["-qAt"],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
                holder.stdin.write("BEGIN ISOLATION LEVEL REPEATABLE READ;\n"
                                   "SELECT count(*) FROM pg_class;\n")
                holder.stdin.flush()
                time.sleep(0.5)
            for size in sizes:
                for concurrency in concurrencies:
                    for shape in shapes:
                        systems = [("leaseq-pg", on_postgres), ("pgmq", None)]
                        if one_flush:
                            systems.append(("leaseq-pg1", one_flush))
                        if shape in ("send1", "send10") and not held:
                            systems.append(("leaseq-file", on_file))
                        for name, target in systems:
                            cell = bench(binary, target, shape, size, concurrency,
                                         options.seconds)
                            cell.update(system=name, shape=shape, size=size,
                                        concurrency=concurrency, held_xmin=held)
                            results.append(cell)
                            print(json.dumps(cell), file=sys.stderr, flush=True)
            if held:
                print(f"held xmin: leaseq tables: {table_stats('leaseq')}; "
                      f"pgmq tables: {table_stats('pgmq')}", flush=True)
                holder.stdin.close()
                holder.terminate()
                holder = None
    finally:
        if holder:
            holder.terminate()
        on_postgres.stop()
        on_file.stop()
        if one_flush:
            one_flush.stop()
        psql(f"DROP DATABASE IF EXISTS {DATABASE}", check=False)

    print_table(results)
    if options.json:
        with open(options.json, "w") as out:
            json.dump(results, out, indent=1)
    sys.exit(1 if any(r.get("errors") or r.get("error") for r in results) else 0)


def fmt(value, digits=1):
    return "-" if value is None else f"{value:,.{digits}f}"


def print_table(results):
    by_key = {(r["held_xmin"], r["size"], r["concurrency"], r["shape"], r["system"]): r
              for r in results}
    print("| held xmin | size | c | shape | leaseq-pg msg/s | pgmq msg/s | ratio | "
          "PG CPU us/msg (leaseq / pgmq) | WAL B/msg | commits/msg | leaseq-file msg/s | "
          "leaseq-pg 1 flush msg/s | CPU us/msg (gen + leaseq + PG) | cores for 5x pgmq |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted({k[:4] for k in by_key}):
        ours, theirs = by_key.get(key + ("leaseq-pg",), {}), by_key.get(key + ("pgmq",), {})
        file_log = by_key.get(key + ("leaseq-file",), {})
        single = by_key.get(key + ("leaseq-pg1",), {})
        ratio = (ours.get("msg_s") / theirs["msg_s"]
                 if ours.get("msg_s") and theirs.get("msg_s") else None)
        held, size, concurrency, shape = key
        parts = [ours.get("generator_cpu_us"), ours.get("leaseq_cpu_us"), ours.get("pg_cpu_us")]
        cost = sum(parts) if all(p is not None for p in parts) else None
        cores = cost * 5 * theirs["msg_s"] / 1e6 if cost and theirs.get("msg_s") else None
        print(f"| {'yes' if held else 'no'} | {size} | {concurrency} | {shape} | "
              f"{fmt(ours.get('msg_s'), 0)} | {fmt(theirs.get('msg_s'), 0)} | {fmt(ratio)}x | "
              f"{fmt(ours.get('pg_cpu_us'))} / {fmt(theirs.get('pg_cpu_us'))} | "
              f"{fmt(ours.get('wal_b'), 0)} / {fmt(theirs.get('wal_b'), 0)} | "
              f"{fmt(ours.get('commits'), 3)} / {fmt(theirs.get('commits'), 3)} | "
              f"{fmt(file_log.get('msg_s'), 0)} | {fmt(single.get('msg_s'), 0)} | "
              f"{' + '.join(fmt(p) for p in parts)} | {fmt(cores, 2)} |")


if __name__ == "__main__":
    main()
