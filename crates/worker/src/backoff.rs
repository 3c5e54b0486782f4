//! Retry delays: exponential in the receive count, with jitter so that messages that failed
//! together do not all come back together.

use std::time::Duration;

use rand::Rng;

/// Exponential backoff with "equal jitter": attempt `n` waits a random time between half of and
/// the whole of `base * 2^(n-1)`, never more than `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first attempt (before jitter).
    pub base: Duration,
    /// The ceiling of any delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The delay after attempt `attempt` (the receive count, starting at 1), with jitter drawn
    /// from `rng`.
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        let full = self
            .base
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.max)
            .min(self.max);
        let half = full / 2;
        let spread_ms = u64::try_from((full - half).as_millis()).unwrap_or(u64::MAX);
        half + Duration::from_millis(rng.random_range(0..=spread_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn delays_double_per_attempt_within_the_jitter_band_and_stop_at_the_ceiling() {
        let backoff = Backoff {
            base: Duration::from_secs(2),
            max: Duration::from_secs(20),
        };
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let first = backoff.delay(1, &mut rng);
            assert!(first >= Duration::from_secs(1) && first <= Duration::from_secs(2));
            let third = backoff.delay(3, &mut rng);
            assert!(third >= Duration::from_secs(4) && third <= Duration::from_secs(8));
            let hundredth = backoff.delay(100, &mut rng);
            assert!(hundredth >= Duration::from_secs(10) && hundredth <= Duration::from_secs(20));
        }
    }

    #[test]
    fn zero_base_means_no_delay() {
        let backoff = Backoff {
            base: Duration::ZERO,
            max: Duration::from_secs(20),
        };
        assert_eq!(backoff.delay(5, &mut rand::rng()), Duration::ZERO);
    }
}
