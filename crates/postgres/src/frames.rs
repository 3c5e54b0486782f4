//! Frames: the records of one flush, as one row. A frame's body is its records one after another,
//! each a `u32` little-endian length and the record's `codec` bytes. Frames belong to segments
//! (a range of frames removed as a whole); offsets count bytes from the segment's start, so a
//! record's [`Location`] is `(segment, offset of its bytes, length)` and the frame holding it is
//! the one with the greatest `start_offset` at or before that offset.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use leaseq_core::Location;
use leaseq_server::log_store::{LogError, Lsn};

/// Bytes of a record's length prefix in a frame.
pub(crate) const LENGTH_PREFIX_BYTES: u64 = 4;

/// One frame: pending (being filled by appends), in flight, or cached once written.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) segment: u32,
    pub(crate) start_offset: u64,
    pub(crate) first_lsn: Lsn,
    pub(crate) last_lsn: Lsn,
    pub(crate) body: Vec<u8>,
}

impl Frame {
    /// The bytes of the record at `location`, if this frame holds it whole.
    pub(crate) fn record(&self, location: Location) -> Option<&[u8]> {
        if location.segment != self.segment {
            return None;
        }
        let at = u64::from(location.offset).checked_sub(self.start_offset)?;
        let prefix = at.checked_sub(LENGTH_PREFIX_BYTES)? as usize;
        let end = at as usize + location.len_bytes as usize;
        let length = self.body.get(prefix..prefix + 4)?;
        if u32::from_le_bytes(length.try_into().ok()?) != location.len_bytes {
            return None;
        }
        self.body.get(at as usize..end)
    }

    /// The frame's records with their LSNs and locations, or where its body is malformed.
    pub(crate) fn records(&self) -> Result<Vec<FrameRecord<'_>>, LogError> {
        let mut records = Vec::new();
        let mut at = 0usize;
        let mut lsn = self.first_lsn;
        while at < self.body.len() {
            let malformed = || {
                LogError::other(format!(
                    "the frame at segment {} offset {} is malformed at byte {at}",
                    self.segment, self.start_offset
                ))
            };
            let length = self.body.get(at..at + 4).ok_or_else(malformed)?;
            let len_bytes = u32::from_le_bytes(length.try_into().expect("four bytes"));
            let start = at + 4;
            let bytes = self
                .body
                .get(start..start + len_bytes as usize)
                .ok_or_else(malformed)?;
            let offset =
                u32::try_from(self.start_offset + start as u64).map_err(|_| malformed())?;
            let location = Location {
                segment: self.segment,
                offset,
                len_bytes,
            };
            records.push((lsn, bytes, location));
            lsn += 1;
            at = start + len_bytes as usize;
        }
        if lsn != self.last_lsn + 1 {
            return Err(LogError::other(format!(
                "the frame at segment {} offset {} says LSNs {}..={} but holds {} records",
                self.segment,
                self.start_offset,
                self.first_lsn,
                self.last_lsn,
                records.len()
            )));
        }
        Ok(records)
    }
}

/// One record of a frame: its LSN, its bytes, where they are.
pub(crate) type FrameRecord<'a> = (Lsn, &'a [u8], Location);

/// A segment's extent, for checkpoints.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SegmentExtent {
    pub(crate) first_lsn: Lsn,
    pub(crate) end_lsn: Lsn,
    pub(crate) size_bytes: u64,
}

/// Where appends go: the tail, the current segment, and the frames not yet taken by a flush.
#[derive(Debug)]
pub(crate) struct Tail {
    pub(crate) tail_lsn: Lsn,
    pub(crate) segment: u32,
    pub(crate) next_offset: u64,
    pub(crate) pending: VecDeque<Frame>,
    pub(crate) segments: BTreeMap<u64, SegmentExtent>,
    /// The room a new frame starts with: the largest frame the last flush took, a quarter
    /// more. Grown from one record's size, a frame of a flush under load (tens of records) was
    /// reallocated and copied five times or more; starting it at a fixed large size would
    /// leave the cache's frames mostly empty room when flushes are small.
    pub(crate) frame_capacity: usize,
    /// A record being encoded, before it is copied into its frame (kept, so that an append
    /// allocates nothing for it).
    pub(crate) scratch: Vec<u8>,
}

impl Tail {
    /// Adds a record at the tail and returns its location: in the current segment, or a new one
    /// if it would take the segment past `segment_bytes_max` (a record larger than a segment
    /// gets one of its own), in the last pending frame unless that would pass `frame_bytes_max`.
    pub(crate) fn push(
        &mut self,
        record: &[u8],
        segment_bytes_max: u64,
        frame_bytes_max: usize,
    ) -> Result<Location, LogError> {
        let len_bytes = u32::try_from(record.len())
            .map_err(|_| LogError::other("a record of 4 GiB or more does not fit a frame"))?;
        let framed = LENGTH_PREFIX_BYTES + record.len() as u64;
        if self.next_offset > 0 && self.next_offset + framed > segment_bytes_max {
            self.segment = self
                .segment
                .checked_add(1)
                .expect("fewer than 2^32 segments");
            self.next_offset = 0;
        }
        let offset = u32::try_from(self.next_offset + LENGTH_PREFIX_BYTES)
            .map_err(|_| LogError::other("a record does not fit a segment's offsets"))?;
        let lsn = self.tail_lsn + 1;
        let fits = self.pending.back().is_some_and(|frame| {
            frame.segment == self.segment && frame.body.len() + framed as usize <= frame_bytes_max
        });
        if !fits {
            self.pending.push_back(Frame {
                segment: self.segment,
                start_offset: self.next_offset,
                first_lsn: lsn,
                last_lsn: lsn - 1,
                body: Vec::with_capacity(
                    (framed as usize).max(self.frame_capacity.min(frame_bytes_max)),
                ),
            });
        }
        let frame = self.pending.back_mut().expect("a pending frame");
        frame.body.extend_from_slice(&len_bytes.to_le_bytes());
        frame.body.extend_from_slice(record);
        frame.last_lsn = lsn;
        let extent = self
            .segments
            .entry(u64::from(self.segment))
            .or_insert(SegmentExtent {
                first_lsn: lsn,
                ..SegmentExtent::default()
            });
        extent.end_lsn = lsn + 1;
        extent.size_bytes += framed;
        self.next_offset += framed;
        self.tail_lsn = lsn;
        Ok(Location {
            segment: self.segment,
            offset,
            len_bytes,
        })
    }

    /// Takes pending frames from the front, up to `bytes_max` (at least one), for a flush.
    pub(crate) fn take(&mut self, bytes_max: usize) -> Vec<Frame> {
        let mut taken = Vec::new();
        let mut bytes = 0;
        while let Some(frame) = self.pending.front() {
            if !taken.is_empty() && bytes + frame.body.len() > bytes_max {
                break;
            }
            bytes += frame.body.len();
            taken.push(self.pending.pop_front().expect("a front frame"));
        }
        if let Some(largest) = taken.iter().map(|frame| frame.body.len()).max() {
            self.frame_capacity = largest + largest / 4;
        }
        taken
    }

    /// The segment holding record `lsn` (the first segment for 0), for a snapshot: recovery
    /// replays from there.
    pub(crate) fn segment_of(&self, lsn: Lsn) -> u64 {
        self.segments
            .iter()
            .find(|(_, extent)| extent.first_lsn <= lsn && lsn < extent.end_lsn)
            .map(|(&segment, _)| segment)
            .unwrap_or(u64::from(self.segment))
    }
}

/// Recent frames, so most reads of bodies need no round trip: every frame from when a flush takes
/// it, and frames read back. Frames not yet durable are never evicted (PostgreSQL may not have
/// them yet); durable ones go oldest first once the cache holds more than its budget.
#[derive(Debug, Default)]
pub(crate) struct FrameCache {
    frames: BTreeMap<(u32, u64), Arc<Frame>>,
    bytes: usize,
}

impl FrameCache {
    pub(crate) fn insert(&mut self, frame: Arc<Frame>) {
        self.bytes += frame.body.len();
        if let Some(old) = self
            .frames
            .insert((frame.segment, frame.start_offset), frame)
        {
            self.bytes -= old.body.len();
        }
    }

    /// The frame that would hold `location`.
    pub(crate) fn find(&self, location: Location) -> Option<Arc<Frame>> {
        let key = (location.segment, u64::from(location.offset));
        let (_, frame) = self.frames.range(..=key).next_back()?;
        (frame.segment == location.segment).then(|| frame.clone())
    }

    /// Evicts durable frames, oldest first, until at most `bytes_max` are cached.
    pub(crate) fn evict(&mut self, durable_lsn: Lsn, bytes_max: usize) {
        while self.bytes > bytes_max {
            let Some(entry) = self.frames.first_entry() else {
                return;
            };
            if entry.get().last_lsn > durable_lsn {
                return;
            }
            self.bytes -= entry.remove().body.len();
        }
    }

    /// Forgets the frames of removed segments.
    pub(crate) fn forget(&mut self, segments: &[u64]) {
        let bytes = &mut self.bytes;
        self.frames.retain(|_, frame| {
            let keep = !segments.contains(&u64::from(frame.segment));
            if !keep {
                *bytes -= frame.body.len();
            }
            keep
        });
    }
}
