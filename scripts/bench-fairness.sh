#!/usr/bin/env bash
# The fairness benchmark (docs/design/fairness.md, "Benchmark"): quiet tenants' dwell time with
# fairness on, off and without the noisy tenant, and the cost against a plain standard queue, on
# the engine with a fake clock. Runs the overload case (sends 125% of the consumers' capacity)
# and the 80% case.
#
# Usage: scripts/bench-fairness.sh   (LEASEQ_FAIR_BENCH_SECONDS=300 by default; see the bench's
# header for the other variables)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
for load in 125 80; do
    LEASEQ_FAIR_BENCH_LOAD=$load cargo bench -q -p leaseq-core --bench fairness
done
