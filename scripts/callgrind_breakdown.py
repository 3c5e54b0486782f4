#!/usr/bin/env python3
"""Where the instructions of one request (or message) go, from two profiles of
scripts/callgrind-send.sh (KEEP=DIR): the self cost of each function in the longer run minus
the shorter one's, divided by the difference in requests, grouped into the parts of the
request path, then the costliest functions.

Usage: scripts/callgrind_breakdown.py SHORT.out LONG.out UNITS [TOP]
  e.g. KEEP=/tmp/cg scripts/callgrind-send.sh target/release/leaseq
       scripts/callgrind_breakdown.py /tmp/cg/leaseq.1000.out /tmp/cg/leaseq.3000.out 2000

Self costs, not inclusive ones: with fat LTO most of the path is inlined into a few async
state machines, whose inclusive costs overlap. A function inlined into another is counted in
the part of the function it was inlined into (its name is gone from the profile), so the parts
are approximate; the total is exact.
"""
import re
import subprocess
import sys

# First match wins: a function's part, by its (demangled) name.
PARTS = [
    ("md5", r"\bmd5::|md5_|leaseq_sqs::md5"),
    ("receipts (seal, open)", r"base64|siphasher|leaseq_core::receipt"),
    ("crc32c (log frames)", r"crc32c|leaseq_wal::crc::"),
    ("clocks and histograms", r"Timespec|Instant|SystemTime|clock_gettime|\bpow\b|__ieee754_pow|histogram|leaseq_server::clock"),
    ("http: httparse", r"httparse"),
    ("http: leaseq", r"leaseq_server::http"),
    ("runtime and syscalls", r"tokio|mio::|epoll|futex|syscall|__pthread|parking_lot|std::sys|std::thread|^(send|recv|pwrite|fdatasync|write|read)$"),
    ("decode (serde_json)", r"serde"),
    ("decode and encode (leaseq_sqs)", r"leaseq_sqs"),
    ("log records (codec)", r"leaseq_core::codec"),
    ("engine", r"leaseq_core|btree|hashbrown"),
    ("log (wal, store, payloads)", r"leaseq_wal|log_store|payloads"),
    ("service", r"leaseq_server"),
    ("allocation", r"\bmi_|_mi_|malloc|__rust_alloc|__rust_dealloc|raw_vec|drop_in_place|Arc<T,A>::drop_slow"),
    ("memcpy, memcmp", r"memcpy|memmove|memcmp|memset|memchr"),
    ("utf-8 checks", r"from_utf8|core::str::"),
]


def self_costs(path):
    """Self cost per function of one callgrind profile (all threads)."""
    out = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--auto=no", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    costs = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)", line)
        if not m:
            continue
        name = m.group(2)
        if "PROGRAM TOTALS" in name:
            costs["PROGRAM TOTALS"] = int(m.group(1).replace(",", ""))
            continue
        # `file:function [object]`: the same function may come on several lines, one per
        # source file its code came from (inlining).
        name = re.sub(r"\s*\[[^\]]*\]$", "", name)
        name = re.sub(r"^[^ ]*?\.(rs|c|S|h):", "", name)
        name = re.sub(r"^\?\?\?:", "", name)
        costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    short, long_, units = self_costs(sys.argv[1]), self_costs(sys.argv[2]), float(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    per = {
        name: (long_.get(name, 0) - short.get(name, 0)) / units
        for name in set(short) | set(long_)
    }
    total = per.pop("PROGRAM TOTALS", 0)
    parts = {}
    for name, cost in per.items():
        part = next((p for p, pattern in PARTS if re.search(pattern, name)), "other")
        parts[part] = parts.get(part, 0) + cost
    print(f"{total:9.0f}  instructions per unit, of which:")
    for part, cost in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"{cost:9.0f}  {part}")
    print(f"\nthe {top} costliest functions (self cost per unit):")
    for name, cost in sorted(per.items(), key=lambda item: -item[1])[:top]:
        print(f"{cost:9.0f}  {name[:150]}")


if __name__ == "__main__":
    main()
