//! The scripts' clock: a [`ManualClock`] that also knows who is sleeping on it.
//!
//! Scripts jump time (`advance 30s`) instead of waiting, so they need to know when the service
//! has finished reacting to a jump or a send before they look at it: a long poll that should
//! still be pending must be shown pending, not merely not-yet-woken. Every background task of a
//! service that waits (a long poll, the move driver) waits on this clock, so the clock can tell:
//! the service is *settled* when exactly the expected number of tasks sleep on it, none of them
//! past its time. A task that was woken (by time or by a send) drops its sleep and either ends
//! or sleeps again; until it does, the count is off and the harness keeps yielding.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use leaseq_server::clock::{Clock, ManualClock, Sleep};

/// A manual clock that counts its sleepers and their deadlines.
#[derive(Clone)]
pub struct ScriptClock {
    manual: ManualClock,
    /// Live sleeps by a serial number: their deadlines.
    sleeps: Arc<Mutex<BTreeMap<u64, u64>>>,
    serial: Arc<Mutex<u64>>,
}

/// Removes a sleep from the table when its future ends or is dropped.
struct Registration {
    sleeps: Arc<Mutex<BTreeMap<u64, u64>>>,
    serial: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.sleeps.lock().unwrap().remove(&self.serial);
    }
}

impl ScriptClock {
    /// A clock that reads `start_ms` until a script moves it.
    pub fn new(start_ms: u64) -> ScriptClock {
        ScriptClock {
            manual: ManualClock::new(start_ms),
            sleeps: Arc::default(),
            serial: Arc::default(),
        }
    }

    /// Sets the time, waking the sleepers whose time has come.
    pub fn set(&self, at_ms: u64) {
        self.manual.set(at_ms);
    }

    /// Whether exactly `expected` sleeps are live and none of them is due (a due one belongs to
    /// a task that has not yet run since it was woken).
    pub fn settled(&self, expected: usize) -> bool {
        let now_ms = self.manual.now_ms();
        let sleeps = self.sleeps.lock().unwrap();
        sleeps.len() == expected && sleeps.values().all(|&at_ms| at_ms > now_ms)
    }

    /// The live sleeps, for a harness error that says what did not settle.
    pub fn describe(&self) -> String {
        let now_ms = self.manual.now_ms();
        let sleeps = self.sleeps.lock().unwrap();
        let deadlines: Vec<String> = sleeps
            .values()
            .map(|at_ms| format!("{}ms", *at_ms as i128 - now_ms as i128))
            .collect();
        format!("{} sleeps, due in [{}]", sleeps.len(), deadlines.join(", "))
    }
}

impl Clock for ScriptClock {
    fn now_ms(&self) -> u64 {
        self.manual.now_ms()
    }

    fn sleep_until(&self, at_ms: u64) -> Sleep {
        let serial = {
            let mut serial = self.serial.lock().unwrap();
            *serial += 1;
            *serial
        };
        self.sleeps.lock().unwrap().insert(serial, at_ms);
        let registration = Registration {
            sleeps: self.sleeps.clone(),
            serial,
        };
        let sleep = self.manual.sleep_until(at_ms);
        Box::pin(async move {
            let _registration = registration;
            sleep.await;
        })
    }
}
