"""The client side of scripts/bench-peers.sh: drives one system with the method of BENCHMARKS.md's
"Peers measured here" table and prints one line per phase.

Method: 2 client processes x 32 requests in flight each, 256 B bodies, one message per request.
The produce phase publishes for SECONDS; the consume phase then drains what was produced
(receive + ack), also 2 processes. The server's CPU (utime + stime of --server-pid, from /proc)
is read just before the processes start and just after they finish; the clients' CPU is each
process's own CPU time over its measured loop. Both are divided by the messages handled.

Usage (normally run by bench-peers.sh, from the venv it makes):
  bench_peers.py leaseq   --server-pid PID --endpoint http://127.0.0.1:PORT --seconds S
  bench_peers.py nats     --server-pid PID [--endpoint nats://127.0.0.1:4222] --seconds S
  bench_peers.py rabbitmq --server-pid PID [--endpoint amqp://guest:guest@127.0.0.1:5672/] ...
  bench_peers.py bare     --server-pid PID --endpoint http://127.0.0.1:PORT --seconds S
  bench_peers.py wrk      --server-pid PID --endpoint http://127.0.0.1:PORT --seconds S
  leaseq bench ... --json | bench_peers.py leaseq-bench   (formats `leaseq bench`'s result)
Exit status: 0 measured or skipped (a system that cannot be reached prints "skipped (why)"),
1 if any request failed or the drain came up short. Client libraries are imported only by the
system that needs them, so `wrk` and `leaseq-bench` also run on a plain python3.
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import resource
import subprocess
import sys
import time
import uuid

PROCESSES = 2
IN_FLIGHT = 32
BODY = b"x" * 256
CONSUME_BATCH = 10  # leaseq ReceiveMessage max / NATS fetch size
RABBIT_PREFETCH = 64
IDLE_LIMIT_S = 5.0  # a consumer that gets nothing for this long gives up (the drain failed)
SYNC_EVERY_S = 0.02  # how often a process adds its count to the shared total
DEFAULT_ENDPOINTS = {
    "nats": "nats://127.0.0.1:4222",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672/",
}


# ---------------------------------------------------------------- measuring and reporting


def process_cpu_s(pid):
    """utime + stime of a process, in seconds, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(system, phase, count, elapsed_s, server_cpu_s, client_cpu_s, unit="msg", note=""):
    """One table line; CPU figures in microseconds per message (or request)."""
    per = lambda cpu: cpu * 1e6 / count if count else float("nan")  # noqa: E731
    rate = count / elapsed_s if elapsed_s > 0 else float("nan")
    line = "%-9s %-8s %8.0f %s/s  server %6.1f us/%s  clients %6.1f us/%s" % (
        system, phase, rate, unit, per(server_cpu_s), unit, per(client_cpu_s), unit)
    print(line + (f"  ({note})" if note else ""), flush=True)


class Progress:
    """One process's count of handled messages, its errors, and (while consuming) when to stop:
    once the processes' shared total reaches the target, or after IDLE_LIMIT_S without a
    message."""

    def __init__(self, shared_total=None, target=None):
        self.count = self.errors = 0
        self.first_error = None
        self.last = time.monotonic()
        self.stop = False
        self._shared, self._target, self._synced = shared_total, target, 0

    def done(self, n):
        self.count += n
        self.last = time.monotonic()

    def failed(self, what):
        self.errors += 1
        self.first_error = self.first_error or str(what)[:300]

    async def watch(self):
        """Adds this process's new messages to the shared total until the drain is over."""
        while not self.stop:
            await asyncio.sleep(SYNC_EVERY_S)
            self._sync()
            if self._shared.value >= self._target or time.monotonic() - self.last > IDLE_LIMIT_S:
                self.stop = True
        self._sync()

    def _sync(self):
        with self._shared.get_lock():
            self._shared.value += self.count - self._synced
        self._synced = self.count


# ---------------------------------------------------------------- the systems


class Leaseq:
    """leaseq over AWS JSON 1.0 with aiohttp: SendMessage; ReceiveMessage + DeleteMessageBatch."""

    def __init__(self, endpoint):
        self.endpoint = endpoint

    @staticmethod
    def _headers(action):
        return {"X-Amz-Target": f"AmazonSQS.{action}",
                "Content-Type": "application/x-amz-json-1.0"}

    async def _call(self, session, action, payload):
        """One SQS call: (HTTP status, decoded JSON answer)."""
        async with session.post(self.endpoint, data=payload, headers=self._headers(action)) as r:
            return r.status, await r.json(content_type=None)

    async def setup(self):
        import aiohttp
        async with aiohttp.ClientSession() as session:
            name = "peers-" + uuid.uuid4().hex[:8]
            status, answer = await self._call(session, "CreateQueue",
                                              json.dumps({"QueueName": name}))
            if status != 200:
                raise RuntimeError(f"CreateQueue: HTTP {status} {answer}")
            return {"endpoint": self.endpoint, "queue_url": answer["QueueUrl"]}

    async def teardown(self, ctx):
        pass  # the script throws the whole server away

    async def connect(self, ctx):
        import aiohttp
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=IN_FLIGHT))

    async def close(self, session):
        await session.close()

    async def produce(self, session, ctx, deadline, progress):
        send = json.dumps({"QueueUrl": ctx["queue_url"], "MessageBody": BODY.decode()}).encode()
        while time.monotonic() < deadline:
            try:
                status, answer = await self._call(session, "SendMessage", send)
                if status == 200:
                    progress.done(1)
                else:
                    progress.failed(f"SendMessage: HTTP {status} {answer}")
            except Exception as e:  # noqa: BLE001 (counted and reported)
                progress.failed(f"SendMessage: {e!r}")

    async def consume(self, session, ctx, progress):
        url = ctx["queue_url"]
        receive = json.dumps({"QueueUrl": url, "MaxNumberOfMessages": CONSUME_BATCH,
                              "WaitTimeSeconds": 1}).encode()
        while not progress.stop:
            try:
                status, answer = await self._call(session, "ReceiveMessage", receive)
                if status != 200:
                    progress.failed(f"ReceiveMessage: HTTP {status} {answer}")
                    continue
                messages = answer.get("Messages") or []
                if not messages:
                    continue
                entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                           for i, m in enumerate(messages)]
                status, answer = await self._call(session, "DeleteMessageBatch", json.dumps(
                    {"QueueUrl": url, "Entries": entries}))
                if status != 200 or answer.get("Failed"):
                    progress.failed(f"DeleteMessageBatch: HTTP {status} {answer}")
                progress.done(len(answer.get("Successful") or []))
            except Exception as e:  # noqa: BLE001
                progress.failed(f"consume: {e!r}")


class Bare(Leaseq):
    """The bare hyper server (crates/server/examples/bare_http.rs): POST 256 B, expect 200."""

    async def setup(self):
        return {"endpoint": self.endpoint}

    async def produce(self, session, ctx, deadline, progress):
        while time.monotonic() < deadline:
            try:
                async with session.post(self.endpoint, data=BODY) as r:
                    await r.read()
                    if r.status == 200:
                        progress.done(1)
                    else:
                        progress.failed(f"POST: HTTP {r.status}")
            except Exception as e:  # noqa: BLE001
                progress.failed(f"POST: {e!r}")


class Nats:
    """NATS JetStream with nats-py: a fresh file-store stream; js.publish (awaits the PubAck);
    a durable pull consumer, fetch(10) then ack each."""

    def __init__(self, endpoint):
        self.endpoint = endpoint

    async def _connect(self):
        """A connection that fails at once rather than retrying or logging tracebacks."""
        import nats

        async def quiet(_error):
            pass

        # max_reconnect_attempts=0 would mean "retry forever" for the first connect.
        return await nats.connect(self.endpoint, connect_timeout=2, allow_reconnect=False,
                                  max_reconnect_attempts=1, reconnect_time_wait=0.1,
                                  error_cb=quiet)

    async def setup(self):
        from nats.js.api import AckPolicy, ConsumerConfig, StorageType
        nc = await self._connect()
        try:
            run = uuid.uuid4().hex[:8]
            ctx = {"endpoint": self.endpoint, "stream": f"PEERS_{run}",
                   "subject": f"peers.{run}", "consumer": "drain"}
            js = nc.jetstream()
            await js.add_stream(name=ctx["stream"], subjects=[ctx["subject"]],
                                storage=StorageType.FILE)
            await js.add_consumer(ctx["stream"], ConsumerConfig(
                durable_name=ctx["consumer"], ack_policy=AckPolicy.EXPLICIT))
            return ctx
        finally:
            await nc.close()

    async def teardown(self, ctx):
        nc = await self._connect()
        try:
            await nc.jetstream().delete_stream(ctx["stream"])
        finally:
            await nc.close()

    async def connect(self, ctx):
        return await self._connect()

    async def close(self, nc):
        await nc.close()

    async def produce(self, nc, ctx, deadline, progress):
        js = nc.jetstream()
        while time.monotonic() < deadline:
            try:
                await js.publish(ctx["subject"], BODY, stream=ctx["stream"])
                progress.done(1)
            except Exception as e:  # noqa: BLE001
                progress.failed(f"publish: {e!r}")

    async def consume(self, nc, ctx, progress):
        # One pull subscription per loop: concurrent fetches on one would share its inbox.
        sub = await nc.jetstream().pull_subscribe_bind(durable=ctx["consumer"],
                                                       stream=ctx["stream"])
        while not progress.stop:
            try:
                messages = await sub.fetch(CONSUME_BATCH, timeout=1)
            except asyncio.TimeoutError:  # nats' TimeoutError is one too: nothing waiting
                continue
            except Exception as e:  # noqa: BLE001
                progress.failed(f"fetch: {e!r}")
                continue
            for m in messages:
                await m.ack()
            progress.done(len(messages))
        await nc.flush()


class Rabbitmq:
    """RabbitMQ with aio-pika: a fresh durable quorum queue; persistent messages on a channel
    with publisher confirms; consume with prefetch 64 and manual acks."""

    def __init__(self, endpoint):
        self.endpoint = endpoint

    async def setup(self):
        import aio_pika
        conn = await aio_pika.connect(self.endpoint, timeout=2)
        async with conn:
            name = "peers-" + uuid.uuid4().hex[:8]
            channel = await conn.channel()
            await channel.declare_queue(name, durable=True,
                                        arguments={"x-queue-type": "quorum"})
            return {"endpoint": self.endpoint, "queue": name}

    async def teardown(self, ctx):
        import aio_pika
        conn = await aio_pika.connect(self.endpoint, timeout=2)
        async with conn:
            channel = await conn.channel()
            await channel.queue_delete(ctx["queue"])

    async def connect(self, ctx):
        """A connection and the one channel its loops share (confirms on: aio-pika's default)."""
        import aio_pika
        conn = await aio_pika.connect(self.endpoint, timeout=2)
        return conn, await conn.channel()

    async def close(self, client):
        await client[0].close()

    async def produce(self, client, ctx, deadline, progress):
        import aio_pika
        channel = client[1]
        while time.monotonic() < deadline:
            try:
                await channel.default_exchange.publish(
                    aio_pika.Message(BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=ctx["queue"])
                progress.done(1)
            except Exception as e:  # noqa: BLE001
                progress.failed(f"publish: {e!r}")

    async def consume(self, client, ctx, progress):
        channel = client[1]
        await channel.set_qos(prefetch_count=RABBIT_PREFETCH)
        queue = await channel.get_queue(ctx["queue"])

        async def on_message(message):
            await message.ack()
            progress.done(1)

        tag = await queue.consume(on_message)
        while not progress.stop:
            await asyncio.sleep(SYNC_EVERY_S)
        await queue.cancel(tag)


SYSTEMS = {"leaseq": Leaseq, "bare": Bare, "nats": Nats, "rabbitmq": Rabbitmq}
# Loops per process in the consume phase: one request each for leaseq and NATS; RabbitMQ
# pushes to one consumer per process (its prefetch sets what is in flight).
CONSUME_LOOPS = {"leaseq": IN_FLIGHT, "nats": IN_FLIGHT, "rabbitmq": 1}


# ---------------------------------------------------------------- the client processes


def worker(system, endpoint, phase, ctx, seconds, target, ready, go, results, total):
    """One client process: connects, waits for the go, runs its loops, reports its numbers."""
    asyncio.run(run_worker(SYSTEMS[system](endpoint), system, phase, ctx, seconds, target,
                           ready, go, results, total))


async def run_worker(client, system, phase, ctx, seconds, target, ready, go, results, total):
    conn = await client.connect(ctx)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, ready.wait)
    await loop.run_in_executor(None, go.wait)
    started, cpu_started = time.monotonic(), time.process_time()
    progress = Progress(total, target)
    if phase == "produce":
        deadline = started + seconds
        await asyncio.gather(*(client.produce(conn, ctx, deadline, progress)
                               for _ in range(IN_FLIGHT)))
    else:
        watcher = asyncio.ensure_future(progress.watch())
        await asyncio.gather(*(client.consume(conn, ctx, progress)
                               for _ in range(CONSUME_LOOPS[system])))
        await watcher
    cpu = time.process_time() - cpu_started
    # Reported before closing, so the server's CPU is read before it tears the connection down.
    results.put({"count": progress.count, "errors": progress.errors,
                 "error": progress.first_error, "started": started, "last": progress.last,
                 "cpu": cpu})
    await client.close(conn)


def run_phase(args, phase, ctx, target=None):
    """Runs one phase in PROCESSES client processes; returns (messages, errors) after printing
    its line."""
    mp = multiprocessing.get_context("spawn")
    ready, go, results = mp.Barrier(PROCESSES + 1), mp.Event(), mp.Queue()
    total = mp.Value("q", 0)
    procs = [mp.Process(target=worker, args=(args.system, args.endpoint, phase, ctx,
                                            args.seconds, target, ready, go, results, total))
             for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    ready.wait(timeout=60)
    server_cpu = process_cpu_s(args.server_pid)
    go.set()
    outs = [results.get(timeout=args.seconds * 20 + 120) for _ in procs]
    server_cpu = process_cpu_s(args.server_pid) - server_cpu
    for p in procs:
        p.join()
    count = sum(o["count"] for o in outs)
    elapsed = max(o["last"] for o in outs) - min(o["started"] for o in outs)
    unit = "req" if args.system == "bare" else "msg"
    label = "python" if args.system == "bare" else phase
    note = "aiohttp POST 256 B" if args.system == "bare" else args.note
    report(args.system, label, count, elapsed, server_cpu, sum(o["cpu"] for o in outs), unit,
           note)
    errors = sum(o["errors"] for o in outs)
    if errors:
        first = next(o["error"] for o in outs if o["error"])
        print(f"{args.system:<9} {phase:<8} ERROR: {errors} failed requests; first: {first}",
              flush=True)
    if target is not None and count < target:
        print(f"{args.system:<9} {phase:<8} ERROR: drained {count} of {target}", flush=True)
        errors += 1
    return count, errors


def run_system(args):
    """Set up, produce, drain, tear down; a system that cannot be set up is skipped."""
    client = SYSTEMS[args.system](args.endpoint)
    try:
        ctx = asyncio.run(asyncio.wait_for(client.setup(), 10))
    except Exception as e:  # noqa: BLE001
        why = f"{type(e).__name__}: {e}"[:200]
        print(f"{args.system:<9} skipped ({args.endpoint}: {why})", flush=True)
        return 0
    try:
        produced, errors = run_phase(args, "produce", ctx)
        if args.system != "bare":
            errors += run_phase(args, "consume", ctx, target=produced)[1]
    finally:
        asyncio.run(client.teardown(ctx))
    return 1 if errors else 0


# ---------------------------------------------------------------- wrk and `leaseq bench`


def run_wrk(args):
    """wrk -t1 -c64 against the bare server; client CPU from wrk's rusage."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cpu = process_cpu_s(args.server_pid)
    wrk = subprocess.run(["wrk", "-t1", "-c64", f"-d{args.seconds:g}s", args.endpoint],
                         capture_output=True, text=True)
    server_cpu = process_cpu_s(args.server_pid) - server_cpu
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = wrk.stdout + wrk.stderr
    found = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)\b", out)
    if wrk.returncode or not found or "Non-2xx" in out or "Socket errors" in out:
        print(f"bare      wrk      ERROR: wrk exited {wrk.returncode}:\n{out}", flush=True)
        return 1
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[found.group(3)]
    report("bare", "wrk", int(found.group(1)), float(found.group(2)) * scale, server_cpu,
           client_cpu, "req", "wrk -t1 -c64 GET")
    return 0


def report_leaseq_bench(args):
    """Formats `leaseq bench --json` (W1) from stdin as one line of the table."""
    run = json.load(sys.stdin)["run"]
    n = run["messages"]
    report("leaseq", "w1-rust", n, run["elapsed_s"],
           run["server_cpu"]["us_per_message"] * n / 1e6,
           run["generator_cpu"]["us_per_message"] * n / 1e6, "msg",
           "; ".join(filter(None, ["leaseq bench --workload w1 -c 64, one process", args.note])))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", choices=[*SYSTEMS, "wrk", "leaseq-bench"])
    parser.add_argument("--server-pid", type=int)
    parser.add_argument("--endpoint")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--note", default="", help="said at the end of each line, e.g. the settings")
    args = parser.parse_args()
    args.endpoint = args.endpoint or DEFAULT_ENDPOINTS.get(args.system)
    if args.system == "leaseq-bench":
        return report_leaseq_bench(args)
    if args.system == "wrk":
        return run_wrk(args)
    return run_system(args)


if __name__ == "__main__":
    sys.exit(main())
