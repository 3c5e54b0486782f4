//! Servers for tests to talk to: in the test's process on the production accept loop
//! ([`InProcessServer`]), or the real binary as a child process that can be killed with
//! SIGKILL and restarted on its data directory ([`ChildServer`]).

mod child;
mod in_process;

pub use child::{free_loopback_addr, ChildServer, ServeCommand};
pub use in_process::{InProcessServer, Options, ACCOUNT_ID, REGION};
