//! The seeded-simulation driver: which seeds a run covers and how many steps each takes, read
//! from environment variables, and what a failure prints so it can be replayed.
//!
//! Every simulation of the workspace names its variables after one prefix (`LEASEQ_SIM`,
//! `LEASEQ_FIFO_SIM`, `LEASEQ_CRASH_SIM`, `LEASEQ_PG_SIM`), with the meanings the README
//! documents:
//!
//! - `{PREFIX}_SEEDS=N`: seeds `0..N` (default: the simulation's fixed set, what `cargo test`
//!   runs);
//! - `{PREFIX}_STEPS=N`: steps per seed;
//! - `{PREFIX}_SEED=x`: the one seed `x`, to replay a failure;
//! - `{PREFIX}_STATS=1`: print what happened, counted (each simulation decides what it counts).
//!
//! A seed fixes every decision of a simulation, so the driver knows nothing of what is
//! simulated: it holds no leaseq type (the core's own tests use it, see the crate's manifest).

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{SystemTime, UNIX_EPOCH};

/// The number in environment variable `name`, if it is set; panics if it is set to anything
/// else, so that a typo does not silently run the default.
pub fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text} is not a number")),
    )
}

/// The seed in environment variable `name`, or else one from the clock: for tests whose
/// interleavings are the machine's anyway (a kill -9 under load), where a new seed each run
/// covers more ground. The caller prints it.
pub fn seed_or_clock(name: &str) -> u64 {
    env_number(name).unwrap_or_else(|| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        now.as_nanos() as u64
    })
}

/// Where a simulation was when it failed, as it tells it.
#[derive(Debug, Default)]
pub struct Progress {
    /// The step that failed.
    pub step: usize,
    /// The last operations before the failure, oldest first.
    pub last_operations: Vec<String>,
}

/// The seeds and steps of one simulation's run, read from its environment variables.
#[derive(Debug)]
pub struct Seeds {
    prefix: &'static str,
    /// What a replay runs: `-p {package} --test {test}`.
    package: &'static str,
    test: &'static str,
    seeds: Vec<u64>,
    steps: usize,
}

impl Seeds {
    /// The run that `{prefix}_*` ask for, or else `seeds_default` seeds (`0..seeds_default`) of
    /// `steps_default` steps. `package` and `test` name the test target for the replay command;
    /// pass `env!("CARGO_PKG_NAME")` and `env!("CARGO_CRATE_NAME")`.
    pub fn from_env(
        prefix: &'static str,
        package: &'static str,
        test: &'static str,
        seeds_default: u64,
        steps_default: usize,
    ) -> Seeds {
        let var = |name: &str| env_number(&format!("{prefix}_{name}"));
        let steps = var("STEPS").map_or(steps_default, |steps| steps as usize);
        let seeds = match var("SEED") {
            Some(seed) => vec![seed],
            None => (0..var("SEEDS").unwrap_or(seeds_default)).collect(),
        };
        Seeds {
            prefix,
            package,
            test,
            seeds,
            steps,
        }
    }

    /// The seeds to run, in order.
    pub fn seeds(&self) -> &[u64] {
        &self.seeds
    }

    /// Steps per seed.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Whether `{prefix}_STATS` asks for the counts of what happened.
    pub fn stats(&self) -> bool {
        std::env::var_os(format!("{}_STATS", self.prefix)).is_some()
    }

    /// Runs `run_seed` for every seed, adding up the outcomes each counts (what happened, by
    /// name), and prints the sums when `{prefix}_STATS` asks for them.
    pub fn tally(&self, mut run_seed: impl FnMut(u64) -> BTreeMap<String, u64>) {
        let mut tally: BTreeMap<String, u64> = BTreeMap::new();
        for &seed in &self.seeds {
            for (key, count) in run_seed(seed) {
                *tally.entry(key).or_insert(0) += count;
            }
        }
        if self.stats() {
            for (key, count) in tally {
                println!("{count:>9}  {key}");
            }
        }
    }

    /// The command that replays `seed`.
    pub fn replay_command(&self, seed: u64) -> String {
        format!(
            "{prefix}_SEED={seed} {prefix}_STEPS={steps} cargo test -p {package} --test {test}",
            prefix = self.prefix,
            steps = self.steps,
            package = self.package,
            test = self.test,
        )
    }

    /// Runs `run(sim, steps)` for `seed`. If it panics, panics again with `name`, the seed,
    /// the step and last operations `progress` reads off `sim`, the original message and the
    /// command that replays the seed.
    pub fn check<S>(
        &self,
        name: &str,
        seed: u64,
        sim: &mut S,
        run: impl FnOnce(&mut S, usize),
        progress: impl FnOnce(&S) -> Progress,
    ) {
        let steps = self.steps;
        let result = catch_unwind(AssertUnwindSafe(|| run(&mut *sim, steps)));
        if let Err(panic) = result {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            let Progress {
                step,
                last_operations,
            } = progress(sim);
            panic!(
                "{name} failed: seed {seed}, step {step}: {message}\n\
                 last operations:\n  {trace}\n\
                 reproduce: {replay}",
                trace = last_operations.join("\n  "),
                replay = self.replay_command(seed),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds() -> Seeds {
        // A prefix no one sets, so the defaults apply.
        Seeds::from_env("LEASEQ_TESTKIT_UNSET", "leaseq-core", "simulation", 3, 10)
    }

    #[test]
    fn defaults_apply_without_variables() {
        let seeds = seeds();
        assert_eq!(seeds.seeds(), &[0, 1, 2]);
        assert_eq!(seeds.steps(), 10);
        assert!(!seeds.stats());
    }

    #[test]
    fn a_failure_names_the_seed_step_and_replay() {
        let seeds = seeds();
        let mut sim = 0usize;
        let failure = catch_unwind(AssertUnwindSafe(|| {
            seeds.check(
                "toy simulation",
                7,
                &mut sim,
                |sim, steps| {
                    *sim = steps / 2;
                    panic!("broken invariant");
                },
                |sim| Progress {
                    step: *sim,
                    last_operations: vec!["send".into(), "receive".into()],
                },
            )
        }))
        .expect_err("the check fails");
        let message = failure
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(
            message.starts_with("toy simulation failed: seed 7, step 5: broken invariant\n"),
            "{message}"
        );
        assert!(message.contains("last operations:\n  send\n  receive\n"));
        assert!(message.ends_with(
            "reproduce: LEASEQ_TESTKIT_UNSET_SEED=7 LEASEQ_TESTKIT_UNSET_STEPS=10 \
             cargo test -p leaseq-core --test simulation"
        ));
    }
}
