//! Recovery: the scan on open that replays the log and decides where it ends.
//!
//! Segments are read one at a time (peak memory is one segment, not the log), in number
//! order, and decoded with [`crate::format::scan_segment`]. Valid records are handed to the
//! replay callback as they are found. Where the valid records stop short of a file's end, the
//! rule is:
//!
//! - zeros to the file's end: the space the writer zeroes ahead of its records (see `sync.rs`),
//!   or blocks a crash left allocated but unwritten. That is the end of the records, not damage;
//!   the file keeps its length and appending continues where the records end.
//! - in the **last** segment, with no valid frame anywhere after the damage: a torn tail left
//!   by a crash during a write. It held no acknowledged record (acknowledgement follows the
//!   fdatasync that would have made it whole), so it is cut off with a warning and appending
//!   continues at the cut. A last segment whose header is incomplete, or which holds only
//!   zeros, was torn while being created and is removed the same way.
//! - anywhere else (a non-last segment, valid data after the damage, a bad header, a missing
//!   segment number, an LSN discontinuity): corruption. Open fails with
//!   [`WalError::Corrupt`] naming the file and offset, unless `salvage` is set, in which case
//!   the log is cut at the last good record and everything after it is removed and reported.
//!
//! Segments that hold only records covered by the caller's snapshot (`Options::covered_lsn`)
//! come first and are not scanned: their headers are checked and they are kept for reads (they
//! may hold message payloads still in use), and gaps among them are expected (a segment whose
//! payloads were all gone was removed). Scanning, replay and the rules above start at the
//! segment holding `covered_lsn + 1`. This is what keeps start-up proportional to the log written
//! since the snapshot rather than to everything kept for payloads.
//!
//! Finally the last segment is fdatasynced: after a crash of the process (not the machine),
//! its tail may still be only in the page cache, and new appends must not be acknowledged on
//! top of records that are not yet durable.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::WalError;
use crate::format::{self, SegmentScan};
use crate::log::SegmentMeta;
use crate::storage::{read_whole_file, Storage};
use crate::{
    parse_segment_file_name, segment_file_name, Lsn, Options, Position, Record, ReplayError,
};

/// What recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// How many records were replayed.
    pub records_replayed: u64,
    /// The LSN the next append gets.
    pub next_lsn: Lsn,
    /// Set if a torn tail was cut off the last segment.
    pub torn_tail: Option<TornTail>,
    /// Set if `salvage` cut the log at corruption.
    pub salvage: Option<Salvage>,
}

/// A torn tail that recovery cut off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The file.
    pub file: String,
    /// Where the valid records ended (0 if the whole file was removed).
    pub offset: u64,
    /// How many bytes were dropped.
    pub bytes_dropped: u64,
}

/// What a salvaging open dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvage {
    /// The file where corruption was found.
    pub file: String,
    /// The offset of the first bad byte range in it (0 for a bad header).
    pub offset: u64,
    /// What was wrong.
    pub reason: String,
    /// Bytes dropped from that file and all later ones.
    pub bytes_dropped: u64,
    /// Later segment files removed entirely.
    pub files_removed: Vec<String>,
}

pub(crate) struct Recovered {
    pub(crate) segments: BTreeMap<u64, SegmentMeta>,
    pub(crate) report: Recovery,
}

/// The verdict on one segment.
enum Verdict {
    /// All bytes are valid records.
    Clean,
    /// Cut the file at this offset (torn tail of the last segment).
    TornTail { offset: u64 },
    /// Remove the file (last segment torn while being created).
    TornHeader,
    /// Corruption at this offset.
    Corrupt { offset: u64, reason: String },
}

type Replay<'a> = &'a mut dyn FnMut(Record<'_>) -> Result<(), ReplayError>;

pub(crate) fn recover(
    storage: &dyn Storage,
    options: &Options,
    replay: Replay<'_>,
) -> Result<Recovered, WalError> {
    let numbers = list_segments(storage)?;
    let mut segments = covered_segments(storage, &numbers, options.covered_lsn)?;
    let first_scanned = segments.len();
    let mut report = Recovery {
        next_lsn: 1,
        ..Recovery::default()
    };
    for (index, &number) in numbers.iter().enumerate().skip(first_scanned) {
        let is_last = index + 1 == numbers.len();
        let name = segment_file_name(number);
        let bytes = read_whole_file(storage, &name).map_err(|e| WalError::io("read", &name, e))?;
        // The first scanned segment follows no scanned one: a gap before it is allowed, but it
        // must hold the first record the snapshot does not cover.
        let previous = if index == first_scanned {
            None
        } else {
            segments.last_key_value()
        };
        let (scan, verdict) = judge(number, &bytes, is_last, previous);
        let verdict = match (&scan, verdict) {
            (Some(scan), Verdict::Clean | Verdict::TornTail { .. })
                if index == first_scanned
                    && options.covered_lsn > 0
                    && scan.header.base_lsn > options.covered_lsn + 1 =>
            {
                Verdict::Corrupt {
                    offset: 0,
                    reason: format!(
                        "records {} to {} are missing (the snapshot covers up to {})",
                        options.covered_lsn + 1,
                        scan.header.base_lsn - 1,
                        options.covered_lsn
                    ),
                }
            }
            (_, verdict) => verdict,
        };
        if let Some(scan) = &scan {
            replay_segment(scan, &bytes, number, replay, &mut report)?;
        }
        let valid_end = scan.as_ref().map_or(0, |scan| scan.valid_end);
        match verdict {
            Verdict::Clean => {}
            Verdict::TornTail { offset } => {
                cut_torn_tail(storage, &name, &bytes, offset, &mut report)?
            }
            Verdict::TornHeader => {
                remove_torn_segment(storage, &name, &bytes, &mut report)?;
                break;
            }
            Verdict::Corrupt { offset, reason } => {
                if !options.salvage {
                    return Err(WalError::Corrupt {
                        file: name,
                        offset,
                        reason,
                    });
                }
                let later = &numbers[index + 1..];
                let salvage = salvage(storage, &name, &bytes, valid_end, later, offset, reason)?;
                report.salvage = Some(salvage);
                if valid_end == 0 {
                    break;
                }
            }
        }
        let scan = scan.expect("a kept segment has a valid header");
        let end_lsn = scan.header.base_lsn + scan.frames.len() as u64;
        report.next_lsn = end_lsn;
        segments.insert(
            number,
            SegmentMeta {
                header: scan.header,
                end_lsn,
                size_bytes: scan.valid_end,
                file: None,
                durable: true,
            },
        );
        if report.salvage.is_some() {
            break;
        }
    }
    open_last_segment(storage, &mut segments)?;
    Ok(Recovered { segments, report })
}

/// The leading segments whose records are all covered by the snapshot (`covered_lsn`): those
/// followed by a segment whose first record is at most `covered_lsn + 1`. Only their headers are
/// read. Each one's `end_lsn` is its successor's base LSN (an upper bound if segments between
/// them were removed, which is all that removal decisions need).
fn covered_segments(
    storage: &dyn Storage,
    numbers: &[u64],
    covered_lsn: Lsn,
) -> Result<BTreeMap<u64, SegmentMeta>, WalError> {
    let mut covered = BTreeMap::new();
    if covered_lsn == 0 {
        return Ok(covered);
    }
    let mut headers = Vec::new();
    for &number in numbers {
        match read_header(storage, number) {
            Ok(found) => headers.push(found),
            // A damaged header stops the covered run; the scan reports it where it matters.
            Err(_) => break,
        }
    }
    for pair in headers.windows(2) {
        let ((header, size_bytes), (next, _)) = (pair[0], pair[1]);
        if next.base_lsn > covered_lsn + 1 {
            break;
        }
        covered.insert(
            header.segment,
            SegmentMeta {
                header,
                end_lsn: next.base_lsn,
                size_bytes,
                file: None,
                durable: true,
            },
        );
    }
    Ok(covered)
}

/// A segment's header (checked against its file name) and its file's size.
fn read_header(
    storage: &dyn Storage,
    number: u64,
) -> Result<(format::SegmentHeader, u64), WalError> {
    let name = segment_file_name(number);
    let file = storage
        .open(&name)
        .map_err(|source| WalError::io("open", &name, source))?;
    let size_bytes = file
        .len_bytes()
        .map_err(|source| WalError::io("open", &name, source))?;
    let mut bytes = [0u8; format::SEGMENT_HEADER_LEN_BYTES];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|source| WalError::io("read", &name, source))?;
    let corrupt = |reason: String| WalError::Corrupt {
        file: name.clone(),
        offset: 0,
        reason,
    };
    let header = format::SegmentHeader::decode(&bytes).map_err(|e| corrupt(e.to_string()))?;
    if header.segment != number {
        return Err(corrupt(format!("header names segment {}", header.segment)));
    }
    Ok((header, size_bytes))
}

/// The segment numbers in the storage, ascending.
fn list_segments(storage: &dyn Storage) -> Result<Vec<u64>, WalError> {
    let names = storage
        .list()
        .map_err(|source| WalError::io("list", "log directory", source))?;
    let mut numbers: Vec<u64> = names
        .iter()
        .filter_map(|name| parse_segment_file_name(name))
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

/// Decodes a segment and decides what to do with it.
fn judge(
    number: u64,
    bytes: &[u8],
    is_last: bool,
    previous: Option<(&u64, &SegmentMeta)>,
) -> (Option<SegmentScan>, Verdict) {
    // A last segment of only zeros (or nothing): created, but its header never reached the
    // disk, so nothing in it was acknowledged (records follow the header's fdatasync).
    if is_last && bytes.iter().all(|&byte| byte == 0) {
        return (None, Verdict::TornHeader);
    }
    let scan = match format::scan_segment(bytes) {
        Ok(scan) => scan,
        Err(format::HeaderError::Truncated { .. }) if is_last => {
            return (None, Verdict::TornHeader)
        }
        Err(error) => {
            let reason = error.to_string();
            return (None, Verdict::Corrupt { offset: 0, reason });
        }
    };
    let expected = previous.map(|(&n, meta)| (n + 1, meta.end_lsn));
    let header = scan.header;
    let reason = match expected {
        _ if header.segment != number => Some(format!("header names segment {}", header.segment)),
        Some((segment, _)) if number != segment => Some(format!("segment {segment} is missing")),
        Some((_, lsn)) if header.base_lsn != lsn => Some(format!(
            "base LSN {} follows LSN {}",
            header.base_lsn,
            lsn - 1
        )),
        _ => None,
    };
    if let Some(reason) = reason {
        return (None, Verdict::Corrupt { offset: 0, reason });
    }
    let verdict = match scan.stop {
        None => Verdict::Clean,
        Some(stop) if is_last && !stop.valid_frame_after => Verdict::TornTail {
            offset: stop.offset,
        },
        Some(stop) => Verdict::Corrupt {
            offset: stop.offset,
            reason: describe_stop(&stop, is_last),
        },
    };
    (Some(scan), verdict)
}

fn describe_stop(stop: &format::ScanStop, is_last: bool) -> String {
    let context = if stop.valid_frame_after {
        "followed by valid records"
    } else if !is_last {
        "in a segment that is not the last"
    } else {
        "at the tail"
    };
    format!("{} {context}", stop.error)
}

fn replay_segment(
    scan: &SegmentScan,
    bytes: &[u8],
    number: u64,
    replay: Replay<'_>,
    report: &mut Recovery,
) -> Result<(), WalError> {
    for (index, frame) in scan.frames.iter().enumerate() {
        let lsn = scan.header.base_lsn + index as u64;
        let payload = format::decode_frame(bytes, frame.offset as usize)
            .expect("the scan verified this frame");
        let position = Position {
            segment: number,
            offset: frame.offset,
            len_bytes: frame.len_bytes,
        };
        replay(Record {
            lsn,
            position,
            payload,
        })
        .map_err(|source| WalError::Replay { lsn, source })?;
        report.records_replayed += 1;
    }
    Ok(())
}

fn cut_torn_tail(
    storage: &dyn Storage,
    name: &str,
    bytes: &[u8],
    offset: u64,
    report: &mut Recovery,
) -> Result<(), WalError> {
    let bytes_dropped = bytes.len() as u64 - offset;
    tracing::warn!(
        file = name,
        offset,
        bytes_dropped,
        "cutting torn tail off the log"
    );
    let file = storage
        .open(name)
        .map_err(|source| WalError::io("open", name, source))?;
    file.set_len(offset)
        .and_then(|()| file.sync_data())
        .map_err(|source| WalError::io("truncate", name, source))?;
    report.torn_tail = Some(TornTail {
        file: name.to_owned(),
        offset,
        bytes_dropped,
    });
    Ok(())
}

fn remove_torn_segment(
    storage: &dyn Storage,
    name: &str,
    bytes: &[u8],
    report: &mut Recovery,
) -> Result<(), WalError> {
    tracing::warn!(
        file = name,
        len_bytes = bytes.len(),
        "removing segment torn while created"
    );
    storage
        .remove(name)
        .and_then(|()| storage.sync_dir())
        .map_err(|source| WalError::io("remove", name, source))?;
    report.torn_tail = Some(TornTail {
        file: name.to_owned(),
        offset: 0,
        bytes_dropped: bytes.len() as u64,
    });
    Ok(())
}

/// Cuts the log at `valid_end` of `name` (removing the file if nothing valid is left) and
/// removes every later segment. Later files go first, newest first, so a crash part-way
/// still leaves a contiguous log.
fn salvage(
    storage: &dyn Storage,
    name: &str,
    bytes: &[u8],
    valid_end: u64,
    later: &[u64],
    offset: u64,
    reason: String,
) -> Result<Salvage, WalError> {
    let mut bytes_dropped = bytes.len() as u64 - valid_end;
    let mut files_removed = Vec::new();
    for &number in later.iter().rev() {
        let later_name = segment_file_name(number);
        let file = storage.open(&later_name).and_then(|f| f.len_bytes());
        bytes_dropped += file.map_err(|source| WalError::io("open", &later_name, source))?;
        storage
            .remove(&later_name)
            .map_err(|source| WalError::io("remove", &later_name, source))?;
        files_removed.push(later_name);
    }
    if valid_end == 0 {
        storage
            .remove(name)
            .map_err(|source| WalError::io("remove", name, source))?;
        files_removed.push(name.to_owned());
    } else {
        let file = storage
            .open(name)
            .map_err(|source| WalError::io("open", name, source))?;
        file.set_len(valid_end)
            .and_then(|()| file.sync_data())
            .map_err(|source| WalError::io("truncate", name, source))?;
    }
    storage
        .sync_dir()
        .map_err(|source| WalError::io("fsync directory after salvaging", name, source))?;
    tracing::warn!(file = name, offset, bytes_dropped, ?files_removed, %reason, "salvaged the log");
    Ok(Salvage {
        file: name.to_owned(),
        offset,
        reason,
        bytes_dropped,
        files_removed,
    })
}

/// Opens the last segment for appending and fdatasyncs it (see the module docs).
fn open_last_segment(
    storage: &dyn Storage,
    segments: &mut BTreeMap<u64, SegmentMeta>,
) -> Result<(), WalError> {
    let Some((&number, meta)) = segments.last_key_value() else {
        return Ok(());
    };
    assert!(meta.file.is_none());
    let name = segment_file_name(number);
    let file = storage
        .open(&name)
        .map_err(|source| WalError::io("open", &name, source))?;
    file.sync_data()
        .and_then(|()| storage.sync_dir())
        .map_err(|source| WalError::io("fdatasync", &name, source))?;
    let meta = segments.get_mut(&number).expect("just found");
    meta.file = Some(Arc::clone(&file));
    Ok(())
}
