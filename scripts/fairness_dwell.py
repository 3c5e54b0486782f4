"""The lines and the summary of `scripts/bench-fairness.sh dwell`.

    fairness_dwell.py line LOAD KIND RESULTS   reads one `leaseq bench --json` report on stdin,
                                               prints its line, appends its figures to RESULTS
    fairness_dwell.py summary RESULTS          the median of each figure over the rounds, and the
                                               issue's two ratios: the quiet tenants' p99 with
                                               fairness against the no-noisy run's, and the
                                               delivered rate of the fair queue against a plain one

In the no-noisy run every tenant is quiet (t0 included, it sends as the others do); a plain
queue has no tenants: their quiet figures are those of all messages.
"""

import json
import statistics
import sys

FORMAT = "{:<5} {:<9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9}"


def figures(load, kind, run):
    elapsed = run["elapsed_s"]
    everyone = kind in ("no-noisy", "plain")
    quiet = run.get("end_to_end_latency_us" if everyone else "end_to_end_quiet_latency_us")
    noisy = None if everyone else run.get("end_to_end_noisy_latency_us")
    millis = lambda latency, q: latency[q] / 1000 if latency else None
    return {
        "load": load,
        "kind": kind,
        "sent": run["messages_sent"] / elapsed,
        "deleted": run["messages_deleted"] / elapsed,
        "quiet_p50": millis(quiet, "p50"),
        "quiet_p99": millis(quiet, "p99"),
        "noisy_p50": millis(noisy, "p50"),
        "noisy_p99": millis(noisy, "p99"),
        "cpu": (run.get("server_cpu") or {}).get("us_per_message"),
    }


def show(f):
    ms = lambda v: "-" if v is None else f"{v:.1f} ms"
    num = lambda v, spec: "-" if v is None else format(v, spec)
    print(FORMAT.format(
        f["load"] + "%", f["kind"], num(f["sent"], ".0f"), num(f["deleted"], ".0f"),
        ms(f["quiet_p50"]), ms(f["quiet_p99"]), ms(f["noisy_p50"]), ms(f["noisy_p99"]),
        num(f["cpu"], ".1f")), flush=True)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main():
    if sys.argv[1] == "line":
        load, kind, results = sys.argv[2:5]
        f = figures(load, kind, json.load(sys.stdin)["run"])
        show(f)
        with open(results, "a") as out:
            out.write(json.dumps(f) + "\n")
        return
    with open(sys.argv[2]) as lines:
        runs = [json.loads(line) for line in lines]
    print("\nmedian over the rounds:")
    order = []
    for f in runs:
        if (f["load"], f["kind"]) not in order:
            order.append((f["load"], f["kind"]))
    medians = {}
    for load, kind in order:
        same = [f for f in runs if (f["load"], f["kind"]) == (load, kind)]
        m = {key: median([f[key] for f in same]) for key in same[0] if key not in ("load", "kind")}
        m.update(load=load, kind=kind)
        medians[load, kind] = m
        show(m)
    for load in dict.fromkeys(load for load, _ in order):
        fair, alone, plain = (medians.get((load, k)) for k in ("fair", "no-noisy", "plain"))
        if fair and alone and alone["quiet_p99"]:
            print(f"{load}%: quiet p99 fair / no-noisy = {fair['quiet_p99'] / alone['quiet_p99']:.2f}"
                  f" (bar: at most 2)", end="")
        if fair and plain and plain["deleted"]:
            print(f"; delivered fair / plain = {fair['deleted'] / plain['deleted']:.3f}"
                  f" (bar: within 5%)", end="")
        print()


if __name__ == "__main__":
    main()
