//! The lease engine of leaseq: queues, messages, leases, receipts and dead letters, as a pure
//! state machine.
//!
//! Invariant: this crate reads no clock, opens no file or socket, spawns nothing and draws no
//! random number. The caller passes the time (`now_ms`) and any randomness (message ids, the
//! receipt key). Every state change is a [`Record`] applied by [`Engine::apply`], for live traffic
//! and for replay alike.
//!
//! Start at [`Engine`]; the states of a message and their indexes are described in [`queue`].

pub mod backoff;
pub mod bytes;
pub mod codec;
pub mod config;
pub mod engine;
pub mod error;
pub mod fair;
pub mod fifo;
pub mod histogram;
pub mod history;
pub mod limits;
pub mod md5_lanes;
pub mod message;
pub mod moves;
pub mod queue;
pub mod receipt;
pub mod record;
pub mod store;
pub mod transfer;

pub use backoff::{BackoffSchedule, RedeliveryBackoff};
pub use config::{QueueConfig, QueueConfigPatch, RedriveAllowPolicy, RedrivePolicy};
pub use engine::{
    Created, DeleteOutcome, Delivery, Engine, EngineConfig, FrozenEngine, Journal, LeaseView,
    NoisyGroup, QueueInfo, ReceiveRequest, Sent, PAYLOAD_CACHE_BYTES_DEFAULT,
};
pub use error::{AttributeProblem, Error, Field, Result, TargetProblem};
pub use fair::{FairConfig, FairState, ProcessingWindow, Tenant};
pub use fifo::{DeduplicationScope, FifoConfig, FifoMessage, FifoThroughputLimit};
pub use history::{Attempt, AttemptHistory, AttemptOutcome, Client};
pub use limits::Limits;
pub use message::{
    AttributeValue, BaseType, CachedPayload, Location, MessageAttribute, MessageId, Payload,
    PayloadRef, SendInput,
};
pub use moves::{MoveStatus, MoveTask, MoveTaskChange, MovedMessage};
pub use queue::{Message, MessageState, Queue, QueueCounters};
pub use receipt::{Receipt, ReceiptKey};
pub use record::{Record, TakenTransfer};
pub use transfer::{
    bucket_of, IncomingTransfer, OutgoingTransfer, Placement, TransferAnswer, TransferKind,
};
