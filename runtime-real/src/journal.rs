//! The journal: an append-only file of framed [`JournalRecord`]s in the
//! state dir, made durable (fsync) before [`Journal::append`] returns.
//!
//! Frame: `len: u32 LE | crc32(payload): u32 LE | payload`, where the payload
//! is the record as JSON (one readable object, so `strings` and a hex dump
//! show what a crash left). A crash can leave a torn tail (a frame cut short)
//! and a bad disk a corrupt one (a CRC mismatch); reading stops at the first
//! such frame, reports it, and the next append truncates it away, so a torn
//! tail never hides records written after it.

use core_fsm::port::JournalRecord;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Largest payload a frame may hold; a larger length is corruption.
const PAYLOAD_MAX_BYTES: u32 = 1 << 20;
const HEADER_BYTES: usize = 8;

/// What a read found after the last good record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tail {
    /// The file ends exactly after the last good record.
    Clean,
    /// The last frame is cut short (a crash mid-append); ignored.
    Torn {
        /// Byte offset of the torn frame.
        offset: u64,
    },
    /// A frame's checksum, length or payload is wrong; it and everything
    /// after it are ignored.
    Corrupt {
        /// Byte offset of the bad frame.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
}

/// The records a read recovered, and how the file ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Recovered {
    /// Every good record, in append order.
    pub records: Vec<JournalRecord>,
    /// How the file ended.
    pub tail: Tail,
    /// Byte length of the good prefix.
    pub good_len: u64,
}

/// An open journal, positioned for appends.
pub struct Journal {
    file: File,
    path: PathBuf,
    len: u64,
}

impl Journal {
    /// The journal file of `state_dir`.
    pub fn path_in(state_dir: &Path) -> PathBuf {
        crate::state_dir::StateDir::at(state_dir).journal()
    }

    /// Opens (creating if needed) the journal of `state_dir`, recovers its
    /// records, and truncates any torn or corrupt tail so appends follow the
    /// last good record.
    pub fn open(state_dir: &Path) -> io::Result<(Journal, Recovered)> {
        let path = Self::path_in(state_dir);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let recovered = decode(&bytes);
        if recovered.good_len != bytes.len() as u64 {
            file.set_len(recovered.good_len)?;
            file.sync_all()?;
        }
        file.seek(SeekFrom::Start(recovered.good_len))?;
        // The file's own entry must be durable too, the first time.
        sync_dir(state_dir)?;
        Ok((
            Journal {
                file,
                path,
                len: recovered.good_len,
            },
            recovered,
        ))
    }

    /// Reads the journal of `state_dir` without changing it (for `status`,
    /// `down` and `logs`). A missing journal reads as empty.
    pub fn read(state_dir: &Path) -> io::Result<Recovered> {
        match std::fs::read(Self::path_in(state_dir)) {
            Ok(bytes) => Ok(decode(&bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Recovered {
                records: vec![],
                tail: Tail::Clean,
                good_len: 0,
            }),
            Err(e) => Err(e),
        }
    }

    /// Appends one record and syncs it to disk before returning.
    pub fn append(&mut self, record: &JournalRecord) -> io::Result<()> {
        let frame = encode(record)?;
        self.file.write_all(&frame)?;
        self.file.sync_data()?;
        self.len += frame.len() as u64;
        Ok(())
    }

    /// Where the journal lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of good records in the file.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when no record was ever appended.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One record as a frame.
pub fn encode(record: &JournalRecord) -> io::Result<Vec<u8>> {
    let payload = serde_json::to_vec(record).map_err(io::Error::other)?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|l| *l <= PAYLOAD_MAX_BYTES);
    let len = len.ok_or_else(|| io::Error::other("journal record too large"))?;
    let mut frame = Vec::with_capacity(HEADER_BYTES + payload.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

/// Every good record of `bytes`, stopping at the first bad frame.
pub fn decode(bytes: &[u8]) -> Recovered {
    let mut records = Vec::new();
    let mut offset = 0usize;
    let tail = loop {
        let rest = &bytes[offset..];
        if rest.is_empty() {
            break Tail::Clean;
        }
        if rest.len() < HEADER_BYTES {
            break Tail::Torn {
                offset: offset as u64,
            };
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        if len > PAYLOAD_MAX_BYTES {
            let reason = format!("frame length {len} exceeds {PAYLOAD_MAX_BYTES}");
            break Tail::Corrupt {
                offset: offset as u64,
                reason,
            };
        }
        let Some(payload) = rest.get(HEADER_BYTES..HEADER_BYTES + len as usize) else {
            break Tail::Torn {
                offset: offset as u64,
            };
        };
        if crc32fast::hash(payload) != crc {
            break Tail::Corrupt {
                offset: offset as u64,
                reason: "checksum mismatch".into(),
            };
        }
        match serde_json::from_slice::<JournalRecord>(payload) {
            Ok(record) => records.push(record),
            Err(e) => {
                let reason = format!("undecodable record: {e}");
                break Tail::Corrupt {
                    offset: offset as u64,
                    reason,
                };
            }
        }
        offset += HEADER_BYTES + len as usize;
    };
    Recovered {
        records,
        tail,
        good_len: offset as u64,
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl std::fmt::Display for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tail::Clean => f.write_str("clean"),
            Tail::Torn { offset } => write!(f, "torn frame at byte {offset} (ignored)"),
            Tail::Corrupt { offset, reason } => {
                write!(f, "corrupt frame at byte {offset}: {reason} (ignored)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core_fsm::ids::{LogicalNodeId, Nonce, RunId};

    fn records() -> Vec<JournalRecord> {
        vec![
            JournalRecord::RunStarted { run_id: RunId(3) },
            JournalRecord::LeaseIntent {
                node: LogicalNodeId::from("w-0"),
                nonce: Nonce(9),
                attempt: 1,
            },
            JournalRecord::NodeFailed {
                node: LogicalNodeId::from("w-0"),
                reason: "verify exited 3".into(),
                log_seqs: Default::default(),
            },
        ]
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("drover-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_all(dir: &Path) -> Vec<u8> {
        let (mut journal, recovered) = Journal::open(dir).unwrap();
        assert!(recovered.records.is_empty());
        for r in records() {
            journal.append(&r).unwrap();
        }
        std::fs::read(Journal::path_in(dir)).unwrap()
    }

    #[test]
    fn round_trip_and_reopen_appends_after_the_last_record() {
        let dir = temp_dir("roundtrip");
        write_all(&dir);
        let (mut journal, recovered) = Journal::open(&dir).unwrap();
        assert_eq!(recovered.records, records());
        assert_eq!(recovered.tail, Tail::Clean);
        let extra = JournalRecord::DestroyRequested {
            node: LogicalNodeId::from("w-0"),
        };
        journal.append(&extra).unwrap();
        let mut expected = records();
        expected.push(extra);
        assert_eq!(Journal::read(&dir).unwrap().records, expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_truncated_tail_is_detected_ignored_and_cut_on_open() {
        let dir = temp_dir("torn");
        let bytes = write_all(&dir);
        let last_frame = encode(&records()[2]).unwrap().len();
        // Cut the last frame in every possible place.
        for cut in 1..last_frame {
            let recovered = decode(&bytes[..bytes.len() - cut]);
            assert_eq!(recovered.records, records()[..2]);
            let offset = (bytes.len() - last_frame) as u64;
            assert_eq!(recovered.tail, Tail::Torn { offset }, "cut {cut}");
        }
        std::fs::write(Journal::path_in(&dir), &bytes[..bytes.len() - 3]).unwrap();
        let (mut journal, recovered) = Journal::open(&dir).unwrap();
        assert!(matches!(recovered.tail, Tail::Torn { .. }));
        journal.append(&records()[2]).unwrap();
        let reread = Journal::read(&dir).unwrap();
        assert_eq!((reread.records, reread.tail), (records(), Tail::Clean));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_flipped_byte_stops_reading_at_that_frame() {
        let dir = temp_dir("flip");
        let bytes = write_all(&dir);
        let first = encode(&records()[0]).unwrap().len();
        // Flip one byte in every position of the second frame.
        let second = encode(&records()[1]).unwrap().len();
        for at in first..first + second {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            let recovered = decode(&bad);
            assert_eq!(recovered.records, records()[..1], "flip at {at}");
            assert_ne!(recovered.tail, Tail::Clean, "flip at {at}");
            assert_eq!(recovered.good_len, first as u64);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
