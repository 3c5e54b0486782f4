//! A histogram with fixed bucket bounds and atomic counts, shared by whoever measures: the
//! log's group commit (fdatasync latency, batch sizes) and the server's metrics (processing
//! times, request latencies). A data structure with no I/O, so it lives beside the engine's
//! other plain types and every crate can use it without depending on the log.

use std::sync::atomic::{AtomicU64, Ordering};

/// A histogram with fixed bucket bounds and atomic counts: `observe` allocates nothing and
/// takes no lock. Values are integers in the caller's unit (microseconds, records, ...).
#[derive(Debug)]
pub struct Histogram {
    /// Inclusive upper bounds of the buckets, ascending; values above the last go to `+Inf`.
    bounds: &'static [u64],
    /// One count per bound, plus the `+Inf` bucket (not cumulative).
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
    count: AtomicU64,
    max: AtomicU64,
}

/// A histogram's counts at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Inclusive upper bounds of the buckets.
    pub bounds: &'static [u64],
    /// Observations at or below each bound (cumulative, as Prometheus wants them); one entry
    /// per bound. Observations above the last bound are in `count` only.
    pub cumulative: Vec<u64>,
    /// Sum of every observed value.
    pub sum: u64,
    /// Number of observations.
    pub count: u64,
    /// The largest value observed.
    pub max: u64,
}

impl Histogram {
    /// An empty histogram with the given bucket bounds (ascending).
    pub fn new(bounds: &'static [u64]) -> Histogram {
        assert!(
            bounds.windows(2).all(|pair| pair[0] < pair[1]),
            "histogram bounds must ascend"
        );
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            count: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    /// Counts one value.
    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(value, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let cumulative = self.counts[..self.bounds.len()]
            .iter()
            .map(|count| {
                running += count.load(Ordering::Relaxed);
                running
            })
            .collect();
        let inf = self.counts[self.bounds.len()].load(Ordering::Relaxed);
        HistogramSnapshot {
            bounds: self.bounds,
            cumulative,
            sum: self.sum.load(Ordering::Relaxed),
            // At least the buckets' total, so `+Inf` is never below a finite bucket even when a
            // snapshot races an observation.
            count: self.count.load(Ordering::Relaxed).max(running + inf),
            max: self.max.load(Ordering::Relaxed),
        }
    }
}

impl HistogramSnapshot {
    /// The value at quantile `q` (0 to 1), estimated as the upper bound of the bucket that holds
    /// it (capped by the largest value seen); `None` without observations.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let bound = self
            .cumulative
            .iter()
            .position(|&count| count >= rank)
            .map_or(self.max, |i| self.bounds[i]);
        Some(bound.min(self.max))
    }
}

impl HistogramSnapshot {
    /// Adds `other`'s observations to these (two logs' histograms, say), as one histogram
    /// would have counted them all. Both must have the same bounds.
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        assert_eq!(
            self.bounds, other.bounds,
            "merging histograms of other bounds"
        );
        for (mine, theirs) in self.cumulative.iter_mut().zip(&other.cumulative) {
            *mine += theirs;
        }
        self.sum += other.sum;
        self.count += other.count;
        self.max = self.max.max(other.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_snapshots_count_as_one_histogram_of_every_observation() {
        let (a, b, both) = (
            Histogram::new(&[10, 100]),
            Histogram::new(&[10, 100]),
            Histogram::new(&[10, 100]),
        );
        for value in [1, 50, 500] {
            a.observe(value);
            both.observe(value);
        }
        for value in [5, 10, 99] {
            b.observe(value);
            both.observe(value);
        }
        let mut merged = a.snapshot();
        merged.merge(&b.snapshot());
        assert_eq!(merged, both.snapshot());
    }

    #[test]
    fn buckets_are_cumulative_and_quantiles_use_bounds() {
        let histogram = Histogram::new(&[10, 100, 1000]);
        for value in [1, 10, 11, 100, 5000] {
            histogram.observe(value);
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.cumulative, vec![2, 4, 4]);
        assert_eq!(
            (snapshot.count, snapshot.sum, snapshot.max),
            (5, 5122, 5000)
        );
        assert_eq!(snapshot.quantile(0.4), Some(10));
        assert_eq!(snapshot.quantile(0.8), Some(100));
        assert_eq!(snapshot.quantile(1.0), Some(5000));
        assert_eq!(Histogram::new(&[1]).snapshot().quantile(0.5), None);
    }

    #[test]
    fn quantile_never_exceeds_the_largest_value() {
        let histogram = Histogram::new(&[10, 100]);
        histogram.observe(42);
        assert_eq!(histogram.snapshot().quantile(0.99), Some(42));
    }
}
