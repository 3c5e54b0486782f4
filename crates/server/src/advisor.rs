//! The visibility advisor: a recommended visibility timeout for a queue, from what its leases
//! did, with the reason in one sentence.
//!
//! The evidence is the processing time of deleted attempts (receive to delete: p50, p95, p99,
//! max, from [`crate::metrics::QueueStats::processing_ms`]) and the engine's counts of
//! deliveries, expired leases, late deletes and lease extensions. Processing times are censored:
//! an attempt whose consumer never deletes it shows up only as an expiry, so the expiry rate is
//! read next to the percentiles rather than folded into them. Percentiles come from histogram
//! buckets and are the upper bound of the bucket that holds them (capped by the largest value),
//! so they err on the long side, which is the safe side for a lease.
//!
//! The rules, in order (each is a row of the table tests below):
//! 1. Too little evidence (fewer than [`DELETES_MIN`] deletes and [`DELIVERIES_MIN`]
//!    deliveries): keep the timeout.
//! 2. p99 processing above the timeout, or late deletes above [`LATE_RATE_MAX`]: raise it to
//!    1.5 × p99 (rounded up to a round number), or extend leases.
//! 3. Expiries above [`EXPIRY_RATE_MAX`] although p99 fits: the timeout is not the problem;
//!    consumers stop or crash without releasing (look at the handler, or release on failure).
//! 4. The timeout above 10 × p99 and above a minute: lower it to 3 × p99 so a crashed consumer's
//!    message comes back sooner (unless leases are being extended, which shows long work).
//! 5. Otherwise: the timeout fits.

use leaseq_core::QueueInfo;
use leaseq_sqs::{ProcessingPercentiles, VisibilityAdvice};

use crate::metrics::QueueStats;

/// Deletes needed before the percentiles are trusted.
pub const DELETES_MIN: u64 = 20;
/// Deliveries needed before the expiry rate is trusted.
pub const DELIVERIES_MIN: u64 = 20;
/// Share of deliveries that may expire before it is a finding.
pub const EXPIRY_RATE_MAX: f64 = 0.01;
/// Share of deletes that may come late before it is a finding.
pub const LATE_RATE_MAX: f64 = 0.005;
/// The longest visibility timeout SQS allows (12 h).
const VISIBILITY_MAX_SECONDS: u32 = 43_200;

/// What the advisor looks at for one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Evidence {
    /// The queue's visibility timeout.
    pub visibility_timeout_seconds: u32,
    /// Processing time percentiles, if any delete was observed.
    pub processing_ms: Option<ProcessingPercentiles>,
    /// Deletes observed by this process (the percentiles' sample size).
    pub deletes_observed: u64,
    /// Leases granted.
    pub deliveries: u64,
    /// Leases that ran out without a delete.
    pub leases_expired: u64,
    /// Deletes after the lease had run out.
    pub deleted_late: u64,
    /// Deletes in all.
    pub deleted: u64,
    /// Lease extensions.
    pub leases_extended: u64,
}

/// The advisor's finding (without the queue's name, which the caller adds).
pub fn advise(evidence: &Evidence) -> VisibilityAdvice {
    let visibility = evidence.visibility_timeout_seconds;
    let finding = |verdict: &'static str, recommended: u32, reason: String| VisibilityAdvice {
        visibility_timeout_seconds: visibility,
        recommended_visibility_timeout_seconds: recommended,
        verdict,
        reason,
        processing_ms: evidence.processing_ms,
        deliveries: evidence.deliveries,
        leases_expired: evidence.leases_expired,
        deleted_late: evidence.deleted_late,
        leases_extended: evidence.leases_extended,
        ..VisibilityAdvice::default()
    };
    let expiry_rate = rate(evidence.leases_expired, evidence.deliveries);
    let late_rate = rate(evidence.deleted_late, evidence.deleted);
    let processing = evidence
        .processing_ms
        .filter(|_| evidence.deletes_observed >= DELETES_MIN);
    let Some(p) = processing else {
        if evidence.deliveries >= DELIVERIES_MIN && expiry_rate > EXPIRY_RATE_MAX {
            return finding(
                "investigate",
                visibility,
                format!(
                    "{} of deliveries expire and too few deletes ({}) were seen to measure processing time: consumers stop or take longer than visibility {}",
                    percent(expiry_rate),
                    evidence.deletes_observed,
                    duration(u64::from(visibility) * 1000)
                ),
            );
        }
        return finding(
            "insufficient-data",
            visibility,
            format!(
                "only {} deletes and {} deliveries observed; need {DELETES_MIN} deletes to judge",
                evidence.deletes_observed, evidence.deliveries
            ),
        );
    };
    let visibility_ms = u64::from(visibility) * 1000;
    if p.p99 > visibility_ms || late_rate > LATE_RATE_MAX {
        let recommended = round_up(p.p99.max(visibility_ms) * 3 / 2);
        return finding(
            "raise",
            recommended,
            format!(
                "p99 processing {} {} visibility {}: {} of deliveries expire, {} of deletes are late; recommend {} or lease extension",
                duration(p.p99),
                if p.p99 > visibility_ms { ">" } else { "<=" },
                duration(visibility_ms),
                percent(expiry_rate),
                percent(late_rate),
                duration(u64::from(recommended) * 1000)
            ),
        );
    }
    if evidence.deliveries >= DELIVERIES_MIN && expiry_rate > EXPIRY_RATE_MAX {
        return finding(
            "investigate",
            visibility,
            format!(
                "{} of deliveries expire although p99 processing {} fits visibility {}: consumers stop or crash without deleting or releasing; a longer timeout would only delay redelivery",
                percent(expiry_rate),
                duration(p.p99),
                duration(visibility_ms)
            ),
        );
    }
    let extending = rate(evidence.leases_extended, evidence.deliveries) > 0.1;
    if visibility_ms > 60_000 && visibility_ms > p.p99.saturating_mul(10) && !extending {
        let recommended = round_up((p.p99 * 3).max(1000));
        return finding(
            "lower",
            recommended,
            format!(
                "p99 processing {} is far below visibility {}: a crashed consumer's message waits up to {} to be redelivered; recommend {}",
                duration(p.p99),
                duration(visibility_ms),
                duration(visibility_ms),
                duration(u64::from(recommended) * 1000)
            ),
        );
    }
    finding(
        "ok",
        visibility,
        format!(
            "p99 processing {} fits visibility {} ({} of deliveries expire, {} of deletes late)",
            duration(p.p99),
            duration(visibility_ms),
            percent(expiry_rate),
            percent(late_rate)
        ),
    )
}

/// The advisor's finding for one queue from its counts and the server's observations.
pub fn advice_for(info: &QueueInfo, stats: Option<&QueueStats>) -> VisibilityAdvice {
    let processing = stats.map(|stats| stats.processing_ms.snapshot());
    let percentiles = processing.as_ref().and_then(|h| {
        Some(ProcessingPercentiles {
            p50: h.quantile(0.50)?,
            p95: h.quantile(0.95)?,
            p99: h.quantile(0.99)?,
            max: h.max,
        })
    });
    let counters = &info.counters;
    let evidence = Evidence {
        visibility_timeout_seconds: info.config.visibility_timeout_seconds,
        processing_ms: percentiles,
        deletes_observed: processing.map_or(0, |h| h.count),
        deliveries: counters.received,
        leases_expired: counters.leases_expired,
        deleted_late: counters.deleted_late,
        deleted: counters.deleted,
        leases_extended: counters.leases_changed,
    };
    VisibilityAdvice {
        queue_name: info.name.clone(),
        ..advise(&evidence)
    }
}

fn rate(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn percent(rate: f64) -> String {
    let percent = rate * 100.0;
    if percent == 0.0 || percent >= 10.0 {
        format!("{percent:.0}%")
    } else {
        format!("{percent:.1}%")
    }
}

/// `48 s`, `1.5 s`, `250 ms`, `2 min`, `1.5 h`.
pub fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..120_000 if ms.is_multiple_of(1000) => format!("{} s", ms / 1000),
        1_000..120_000 => format!("{:.1} s", ms as f64 / 1000.0),
        120_000..7_200_000 => format!("{} min", ms.div_ceil(60_000)),
        _ => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

/// The round number of seconds at or above `ms`, within SQS's range.
fn round_up(ms: u64) -> u32 {
    const STEPS: &[u32] = &[
        1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1_200, 1_800, 2_700, 3_600,
        7_200, 14_400, 28_800, 43_200,
    ];
    let seconds = ms.div_ceil(1000);
    STEPS
        .iter()
        .copied()
        .find(|&step| u64::from(step) >= seconds)
        .unwrap_or(VISIBILITY_MAX_SECONDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(p50: u64, p95: u64, p99: u64, max: u64) -> Option<ProcessingPercentiles> {
        Some(ProcessingPercentiles { p50, p95, p99, max })
    }

    #[test]
    fn decision_table() {
        struct Row {
            name: &'static str,
            evidence: Evidence,
            verdict: &'static str,
            recommended: u32,
            reason_has: &'static str,
        }
        let base = Evidence {
            visibility_timeout_seconds: 30,
            processing_ms: p(1_000, 3_000, 5_000, 6_000),
            deletes_observed: 1_000,
            deliveries: 1_000,
            leases_expired: 0,
            deleted_late: 0,
            deleted: 1_000,
            leases_extended: 0,
        };
        let rows = [
            Row {
                name: "no deletes yet",
                evidence: Evidence {
                    processing_ms: None,
                    deletes_observed: 0,
                    deliveries: 5,
                    ..base
                },
                verdict: "insufficient-data",
                recommended: 30,
                reason_has: "only 0 deletes and 5 deliveries",
            },
            Row {
                name: "few deletes",
                evidence: Evidence {
                    deletes_observed: 19,
                    ..base
                },
                verdict: "insufficient-data",
                recommended: 30,
                reason_has: "need 20 deletes",
            },
            Row {
                name: "the issue's example: p99 48 s over 30 s, 4% expire",
                evidence: Evidence {
                    processing_ms: p(10_000, 40_000, 48_000, 50_000),
                    leases_expired: 40,
                    ..base
                },
                verdict: "raise",
                recommended: 90,
                reason_has: "p99 processing 48 s > visibility 30 s: 4.0% of deliveries expire",
            },
            Row {
                name: "late deletes alone raise",
                evidence: Evidence {
                    deleted_late: 10,
                    ..base
                },
                verdict: "raise",
                recommended: 45,
                reason_has: "1.0% of deletes are late",
            },
            Row {
                name: "late deletes within tolerance",
                evidence: Evidence {
                    deleted_late: 5,
                    ..base
                },
                verdict: "ok",
                recommended: 30,
                reason_has: "fits visibility 30 s",
            },
            Row {
                name: "expiries with fast processing: consumers crash",
                evidence: Evidence {
                    leases_expired: 50,
                    ..base
                },
                verdict: "investigate",
                recommended: 30,
                reason_has: "5.0% of deliveries expire although p99 processing 5 s fits",
            },
            Row {
                name: "expiries and no deletes",
                evidence: Evidence {
                    processing_ms: None,
                    deletes_observed: 0,
                    leases_expired: 100,
                    ..base
                },
                verdict: "investigate",
                recommended: 30,
                reason_has: "10% of deliveries expire and too few deletes",
            },
            Row {
                name: "timeout far too long",
                evidence: Evidence {
                    visibility_timeout_seconds: 3_600,
                    processing_ms: p(200, 800, 2_000, 2_500),
                    ..base
                },
                verdict: "lower",
                recommended: 10,
                reason_has: "waits up to 60 min",
            },
            Row {
                name: "long timeout but consumers extend: keep",
                evidence: Evidence {
                    visibility_timeout_seconds: 3_600,
                    processing_ms: p(200, 800, 2_000, 2_500),
                    leases_extended: 500,
                    ..base
                },
                verdict: "ok",
                recommended: 3_600,
                reason_has: "fits visibility 60 min",
            },
            Row {
                name: "short timeouts are not lowered",
                evidence: Evidence {
                    processing_ms: p(10, 50, 100, 200),
                    ..base
                },
                verdict: "ok",
                recommended: 30,
                reason_has: "p99 processing 100 ms fits",
            },
            Row {
                name: "capped at 12 h",
                evidence: Evidence {
                    visibility_timeout_seconds: 36_000,
                    processing_ms: p(1_000, 40_000_000, 43_000_000, 43_000_000),
                    ..base
                },
                verdict: "raise",
                recommended: 43_200,
                reason_has: "recommend 12.0 h",
            },
        ];
        for row in rows {
            let advice = advise(&row.evidence);
            assert_eq!(
                advice.verdict, row.verdict,
                "{}: {}",
                row.name, advice.reason
            );
            assert_eq!(
                advice.recommended_visibility_timeout_seconds, row.recommended,
                "{}: {}",
                row.name, advice.reason
            );
            assert!(
                advice.reason.contains(row.reason_has),
                "{}: {:?} lacks {:?}",
                row.name,
                advice.reason,
                row.reason_has
            );
        }
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(250), "250 ms");
        assert_eq!(duration(48_000), "48 s");
        assert_eq!(duration(1_500), "1.5 s");
        assert_eq!(duration(3_600_000), "60 min");
        assert_eq!(duration(43_200_000), "12.0 h");
        assert_eq!(round_up(48_001), 60);
        assert_eq!(round_up(0), 1);
    }
}
