//! Redelivery backoff (`LeaseqRedeliveryBackoff`): a message whose lease ran out comes back only
//! after a delay that grows with its attempts, instead of at once as SQS redelivers it. SQS has
//! nothing of the kind; NATS JetStream's `BackOff` (a list of durations indexed by delivery
//! count) is the model.
//!
//! When attempt `k` of a message ends because its lease ran out (or, with `releases`, because the
//! consumer released it with visibility 0), the message is *delayed* for the `k`-th delay of the
//! schedule (the last one repeats) and becomes ready when it ends. The schedule is a list
//! (`1s,5s,30s,2m`) or exponential (`exponential(1s,5m)`: 1 s, 2 s, 4 s, … capped at 5 min),
//! optionally with `jitter=N%`: each delay shortened by up to N%, by a fraction drawn from the
//! message's id (random bytes the server drew and the `Send` record carries) and the attempt
//! number, so replay draws the same and messages that failed together spread out.
//!
//! The change is time-driven like every lease expiry: no record, decided in `Queue::advance` at
//! the lease's own deadline (a release, in the `ChangeVisibility` record's apply), from the
//! queue's setting then. Off by default: SQS semantics are unchanged.

use std::fmt;

/// Delays in a list schedule at most.
pub const STEPS_MAX: usize = 20;
/// The longest delay (12 hours, the longest lease).
pub const DELAY_MAX_MS: u64 = 12 * 60 * 60 * 1000;

/// A queue's redelivery backoff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedeliveryBackoff {
    /// The delays.
    pub schedule: BackoffSchedule,
    /// Each delay is shortened by up to this percentage (0 to 100), drawn per message and
    /// attempt.
    pub jitter_percent: u8,
    /// Whether a release (visibility 0) is delayed too, or only a lease that ran out.
    pub releases: bool,
}

/// The delays of a [`RedeliveryBackoff`], in milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackoffSchedule {
    /// The `k`-th delay after attempt `k`; the last one repeats.
    Steps(Vec<u64>),
    /// `initial_ms` after the first attempt, doubling after each, at most `max_ms`.
    Exponential {
        /// The first delay.
        initial_ms: u64,
        /// The cap.
        max_ms: u64,
    },
}

impl RedeliveryBackoff {
    /// The delay after attempt `attempt` (1 for the first) of message `message_id` ended.
    pub fn delay_ms(&self, attempt: u32, message_id: &[u8; 16]) -> u64 {
        let k = attempt.max(1);
        let base = match &self.schedule {
            BackoffSchedule::Steps(steps) => {
                let at = (k as usize).min(steps.len()) - 1;
                steps[at]
            }
            BackoffSchedule::Exponential { initial_ms, max_ms } => {
                let doublings = (k - 1).min(63);
                initial_ms
                    .checked_mul(1u64 << doublings)
                    .map_or(*max_ms, |delay| delay.min(*max_ms))
            }
        };
        if self.jitter_percent == 0 {
            return base;
        }
        // A fraction in 0..=1000, the same for the same message and attempt.
        let fraction = u128::from(mix(message_id, attempt) % 1001);
        let cut = u128::from(base) * u128::from(self.jitter_percent) * fraction / 100_000;
        base - cut as u64
    }

    /// Parses the attribute's text; `""` turns backoff off (`None`).
    pub fn parse(text: &str) -> Result<Option<RedeliveryBackoff>, String> {
        let mut tokens = text.split_whitespace();
        let Some(first) = tokens.next() else {
            return Ok(None);
        };
        let schedule = if let Some(inner) = first
            .strip_prefix("exponential(")
            .and_then(|rest| rest.strip_suffix(')'))
        {
            let (initial, max) = inner
                .split_once(',')
                .ok_or("exponential takes (initial,max)")?;
            let (initial_ms, max_ms) = (duration_ms(initial)?, duration_ms(max)?);
            if initial_ms == 0 || max_ms < initial_ms {
                return Err("exponential needs 0 < initial <= max".into());
            }
            BackoffSchedule::Exponential { initial_ms, max_ms }
        } else {
            let steps = first
                .split(',')
                .map(duration_ms)
                .collect::<Result<Vec<u64>, String>>()?;
            if steps.len() > STEPS_MAX {
                return Err(format!("at most {STEPS_MAX} delays"));
            }
            BackoffSchedule::Steps(steps)
        };
        let mut backoff = RedeliveryBackoff {
            schedule,
            jitter_percent: 0,
            releases: false,
        };
        for token in tokens {
            if token == "releases" {
                backoff.releases = true;
            } else if let Some(percent) = token
                .strip_prefix("jitter=")
                .and_then(|rest| rest.strip_suffix('%'))
            {
                backoff.jitter_percent = percent
                    .parse::<u8>()
                    .ok()
                    .filter(|percent| *percent <= 100)
                    .ok_or("jitter is 0% to 100%")?;
            } else {
                return Err(format!("unknown option {token:?}"));
            }
        }
        Ok(Some(backoff))
    }
}

/// The attribute's text, as [`RedeliveryBackoff::parse`] reads it.
impl fmt::Display for RedeliveryBackoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schedule {
            BackoffSchedule::Steps(steps) => {
                let steps: Vec<String> = steps.iter().map(|ms| fmt_duration(*ms)).collect();
                f.write_str(&steps.join(","))?;
            }
            BackoffSchedule::Exponential { initial_ms, max_ms } => write!(
                f,
                "exponential({},{})",
                fmt_duration(*initial_ms),
                fmt_duration(*max_ms)
            )?,
        }
        if self.jitter_percent > 0 {
            write!(f, " jitter={}%", self.jitter_percent)?;
        }
        if self.releases {
            f.write_str(" releases")?;
        }
        Ok(())
    }
}

/// `500ms`, `30s`, `2m`, `1h`: one number and one unit, at most [`DELAY_MAX_MS`].
fn duration_ms(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a duration (like 500ms, 30s, 2m, 1h)");
    let (number, unit_ms) = if let Some(number) = text.strip_suffix("ms") {
        (number, 1)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1_000)
    } else if let Some(number) = text.strip_suffix('m') {
        (number, 60_000)
    } else if let Some(number) = text.strip_suffix('h') {
        (number, 3_600_000)
    } else {
        return Err(bad());
    };
    let number: u64 = number.parse().map_err(|_| bad())?;
    let ms = number.checked_mul(unit_ms).ok_or_else(bad)?;
    if ms > DELAY_MAX_MS {
        return Err(format!("{text} is longer than 12h"));
    }
    Ok(ms)
}

fn fmt_duration(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

/// SplitMix64 of the message id and the attempt: a well-spread number, the same on replay.
fn mix(message_id: &[u8; 16], attempt: u32) -> u64 {
    let (low, high) = message_id.split_at(8);
    let low = u64::from_le_bytes(low.try_into().expect("8 bytes"));
    let high = u64::from_le_bytes(high.try_into().expect("8 bytes"));
    let first = splitmix(low ^ u64::from(attempt).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    splitmix(first ^ high)
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_repeat_the_last_and_exponential_caps() {
        let steps = RedeliveryBackoff::parse("1s,5s,30s,2m").unwrap().unwrap();
        let id = [3; 16];
        let delays: Vec<u64> = (1..=6).map(|k| steps.delay_ms(k, &id)).collect();
        assert_eq!(delays, [1_000, 5_000, 30_000, 120_000, 120_000, 120_000]);
        let exponential = RedeliveryBackoff::parse("exponential(1s,5s)")
            .unwrap()
            .unwrap();
        let delays: Vec<u64> = (1..=5).map(|k| exponential.delay_ms(k, &id)).collect();
        assert_eq!(delays, [1_000, 2_000, 4_000, 5_000, 5_000]);
        assert_eq!(exponential.delay_ms(200, &id), 5_000);
    }

    #[test]
    fn jitter_shortens_by_at_most_its_share_and_is_the_same_each_time() {
        let backoff = RedeliveryBackoff::parse("10s jitter=50%").unwrap().unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for byte in 0..=255u8 {
            let id = [byte; 16];
            let delay = backoff.delay_ms(1, &id);
            assert!((5_000..=10_000).contains(&delay), "{delay}");
            assert_eq!(delay, backoff.delay_ms(1, &id));
            seen.insert(delay);
        }
        assert!(seen.len() > 100, "jitter spreads: {} values", seen.len());
    }

    #[test]
    fn text_round_trips_and_bad_text_is_refused() {
        for text in [
            "1s,5s,30s,2m",
            "500ms",
            "exponential(1s,5m) jitter=20% releases",
            "0s,1h releases",
        ] {
            let backoff = RedeliveryBackoff::parse(text).unwrap().unwrap();
            assert_eq!(backoff.to_string(), text);
        }
        assert_eq!(RedeliveryBackoff::parse("  "), Ok(None));
        for bad in [
            "1x",
            "1s,,2s",
            "exponential(0s,1s)",
            "exponential(5s,1s)",
            "exponential(1s)",
            "1s jitter=101%",
            "1s sometimes",
            "13h",
            "1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s",
        ] {
            assert!(RedeliveryBackoff::parse(bad).is_err(), "{bad}");
        }
    }
}
