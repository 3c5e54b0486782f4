//! Message actions: send (one or a batch), delete, change visibility (one or a batch) and
//! leaseq's fail-now. A batch runs as one engine operation; a missing queue fails the whole
//! request (and so does a FIFO send batch with an entry that lacks a group or deduplication id,
//! as in SQS), anything else only its entry.

use leaseq_core::{md5_lanes, Engine, Error, Journal, MessageId, SendInput};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::{BatchEntry, Outcome};

use super::{Caller, Service};

impl Service {
    pub(super) async fn send_message(
        &self,
        name: &str,
        message: SendInput,
        caller: &Caller,
    ) -> Result<Outcome, SqsError> {
        let id = MessageId::from_random(crate::ids::unique_bytes());
        let message = send_input(message, caller);
        // Computed before the engine's lock is taken, as a batch's are.
        let body_md5 = md5_lanes::digest(message.body.as_bytes());
        let sent = self
            .run(name, |e, j| {
                e.send_digested(self.now_ms(), name, message, body_md5, id, j)
            })
            .await?;
        Ok(Outcome::Sent(sent))
    }

    pub(super) async fn send_batch(
        &self,
        name: &str,
        entries: Vec<BatchEntry<SendInput>>,
        caller: &Caller,
    ) -> Result<Outcome, SqsError> {
        // The bodies' MD5s, all at once (several per instruction, see `md5_lanes`) and before
        // the engine's lock is taken; `per_entry` sends the entries in order.
        let bodies: Vec<&[u8]> = entries
            .iter()
            .map(|entry| entry.value.body.as_bytes())
            .collect();
        let mut digests = md5_lanes::digests(&bodies).into_iter();
        let check = |engine: &Engine, entries: &[BatchEntry<SendInput>]| {
            engine
                .check_send_batch(name, entries.iter().map(|entry| &entry.value))
                .map_err(SqsError::for_batch_request)
        };
        let results = self
            .per_entry(name, entries, check, |engine, now, message, journal| {
                let body_md5 = digests.next().expect("a digest per entry");
                let message = send_input(message, caller);
                let id = MessageId::from_random(crate::ids::unique_bytes());
                engine
                    .send_digested(now, name, message, body_md5, id, journal)
                    .map_err(SqsError::for_batch_entry)
            })
            .await?;
        Ok(Outcome::SentBatch(results))
    }

    pub(super) async fn delete_message(
        &self,
        name: &str,
        receipt: &str,
    ) -> Result<Outcome, SqsError> {
        self.run(name, |e, j| {
            let deleted = e.delete(self.now_ms(), name, receipt, j);
            self.delete_observed(e, name, receipt, deleted)
        })
        .await?;
        Ok(Outcome::Empty)
    }

    pub(super) async fn delete_batch(
        &self,
        name: &str,
        entries: Vec<BatchEntry<String>>,
    ) -> Result<Outcome, SqsError> {
        // The first entry brings the queue forward to the batch's time; the others delete in
        // it as it is (see `Engine::delete_in`).
        let mut queue_id = None;
        self.batch(name, entries, |e, now, receipt, j| {
            let deleted = match queue_id {
                Some(id) => e.delete_in(id, &receipt, j),
                None => {
                    let deleted = e.delete(now, name, &receipt, j);
                    queue_id = e.queue_id(name);
                    deleted
                }
            };
            self.delete_observed(e, name, &receipt, deleted)
        })
        .await
    }

    pub(super) async fn change_visibility(
        &self,
        name: &str,
        receipt: &str,
        visibility_timeout_seconds: u32,
    ) -> Result<Outcome, SqsError> {
        self.run(name, |e, j| {
            e.change_visibility(self.now_ms(), name, receipt, visibility_timeout_seconds, j)
                .map_err(|error| self.receipt_error(e, name, error, receipt))
        })
        .await?;
        Ok(Outcome::Empty)
    }

    pub(super) async fn change_visibility_batch(
        &self,
        name: &str,
        entries: Vec<BatchEntry<(String, u32)>>,
    ) -> Result<Outcome, SqsError> {
        self.batch(name, entries, |e, now, (receipt, timeout), j| {
            e.change_visibility(now, name, &receipt, timeout, j)
                .map(drop)
                .map_err(|error| self.receipt_error(e, name, error, &receipt))
        })
        .await
    }

    pub(super) async fn fail_message(
        &self,
        name: &str,
        receipt: &str,
        reason: &str,
    ) -> Result<Outcome, SqsError> {
        self.run(name, |e, j| {
            e.fail_message(self.now_ms(), name, receipt, reason, j)
                .map_err(|error| SqsError::for_receipt(error, receipt))
        })
        .await?;
        Ok(Outcome::Empty)
    }

    /// Runs `each` for every entry of a batch in one engine operation; a missing queue, or a
    /// failed `check` of all the entries, fails the whole request, anything else only its entry.
    async fn per_entry<T, R>(
        &self,
        name: &str,
        entries: Vec<BatchEntry<T>>,
        check: impl FnOnce(&Engine, &[BatchEntry<T>]) -> Result<(), SqsError>,
        mut each: impl FnMut(&mut Engine, u64, T, &mut Journal) -> Result<R, SqsError>,
    ) -> Result<Vec<(String, Result<R, SqsError>)>, SqsError> {
        self.run(name, |engine, journal| {
            // A record per entry, at least, reserved at once rather than grown 1, 4, 8, 16.
            journal.reserve(entries.len());
            let now = self.now_ms();
            engine.queue(name).ok_or(Error::QueueDoesNotExist)?;
            check(engine, &entries)?;
            Ok::<_, SqsError>(
                entries
                    .into_iter()
                    .map(|entry| (entry.id, each(engine, now, entry.value, journal)))
                    .collect(),
            )
        })
        .await
    }

    async fn batch<T>(
        &self,
        name: &str,
        entries: Vec<BatchEntry<T>>,
        each: impl FnMut(&mut Engine, u64, T, &mut Journal) -> Result<(), SqsError>,
    ) -> Result<Outcome, SqsError> {
        let check = |_: &Engine, _: &[BatchEntry<T>]| Ok(());
        Ok(Outcome::Batch(
            self.per_entry(name, entries, check, each).await?,
        ))
    }
}

/// The message as sent by `caller` (its `SenderId`).
fn send_input(mut message: SendInput, caller: &Caller) -> SendInput {
    message.sender_id = caller.sender_id.clone();
    message
}
