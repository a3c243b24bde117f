//! Reading a model's digests: the whole file's, its header's and each
//! stage's slice's, in one pass ([`Unhashed::hash`]).

use super::super::fetch::{PIECE, PIECES_IN_FLIGHT, hex, slice_digest};
use super::super::wire::WeightsRef;
use super::{Model, Unhashed};
use sha2::{Digest, Sha256};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use workers::gguf::slice::SlicePlan;

impl Unhashed {
    /// Reads the file once, start to end, `progress(bytes so far, of
    /// all)` after each piece: the model, with its digests (the whole
    /// file's and its header's), and what each stage of `stages` (block
    /// ranges) fetches and checks, its slice's digest taken in the same
    /// pass.
    pub fn hash(
        self,
        stages: &[Range<usize>],
        mut progress: impl FnMut(u64, u64),
    ) -> Result<(Model, Vec<WeightsRef>), String> {
        let label = self.path.display().to_string();
        let failed = |e: std::io::Error| format!("{label}: {e}");
        let plans = stages
            .iter()
            .map(|layers| SlicePlan::new(&self.header, layers.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let header_len = self.header.data_offset;
        let mut slices: Vec<SliceHash> = plans.iter().map(SliceHash::new).collect();
        // The whole file's digest on a thread of its own, the slices' on
        // this one, both fed the same pieces as they are read.
        let (at, whole, head) = std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Arc<Vec<u8>>>(PIECES_IN_FLIGHT);
            let hasher = scope.spawn(move || {
                let (mut whole, mut head, mut at) = (Sha256::new(), Sha256::new(), 0u64);
                for piece in rx {
                    whole.update(piece.as_slice());
                    let n = piece.len() as u64;
                    head.update(&piece[..header_len.saturating_sub(at).min(n) as usize]);
                    at += n;
                }
                (whole, head)
            });
            let mut at = 0u64;
            let read = loop {
                let mut buf = vec![0u8; PIECE as usize];
                let n = match self.file.read_at(&mut buf, at) {
                    Ok(0) => break Ok(()),
                    Ok(n) => n,
                    Err(e) => break Err(failed(e)),
                };
                buf.truncate(n);
                let piece = Arc::new(buf);
                // The hasher runs until the channel closes.
                let _ = tx.send(piece.clone());
                for slice in &mut slices {
                    slice.feed(at, &piece);
                }
                at += n as u64;
                progress(at, self.size);
            };
            drop(tx);
            let (whole, head) = hasher.join().expect("the hashing thread");
            read.map(|()| (at, whole, head))
        })?;
        if at != self.size {
            return Err(format!(
                "{label}: {at} bytes read of {}: the file changed while it was read",
                self.size
            ));
        }
        let slice_shas = plans
            .iter()
            .zip(slices)
            .map(|(plan, slice)| match slice.sha {
                Some(sha) => Ok(hex(&sha.finalize())),
                None => Ok(slice_digest(plan, &self.file).map_err(failed)?.0),
            })
            .collect::<Result<Vec<_>, String>>()?;
        let (digest, header_sha256) = (hex(&whole.finalize()), hex(&head.finalize()));
        Ok(self.into_model(digest, header_sha256, slice_shas, &plans))
    }

    fn into_model(
        self,
        digest: String,
        header_sha256: String,
        slice_shas: Vec<String>,
        plans: &[SlicePlan],
    ) -> (Model, Vec<WeightsRef>) {
        let header_len = self.header.data_offset;
        let model = Model {
            path: self.path,
            file: self.file,
            size: self.size,
            digest,
            header: self.header,
            header_len,
            header_sha256,
            config: self.config,
            tokenizer: self.tokenizer,
        };
        let weights = plans
            .iter()
            .zip(slice_shas)
            .map(|(plan, slice_sha256)| {
                let head = workers::gguf::slice::slice_head(&model.header, plan);
                WeightsRef {
                    model_digest: model.digest.clone(),
                    model_size: model.size,
                    header_len,
                    header_sha256: model.header_sha256.clone(),
                    first_layer: plan.layers.start as u32,
                    end_layer: plan.layers.end as u32,
                    slice_sha256,
                    slice_head_sha256: hex(&Sha256::digest(&head)),
                    slice_bytes: plan.data_bytes(),
                }
            })
            .collect();
        (model, weights)
    }
}

/// One stage's slice digest, taken as the file goes by: its ranges in
/// order, each fed the part of a piece it covers.
struct SliceHash<'p> {
    ranges: &'p [(u64, u64)],
    /// The first range not wholly fed yet.
    next: usize,
    /// `None` where the ranges overlap (no well-formed file has that):
    /// that slice is read again on its own, as a node reads it.
    sha: Option<Sha256>,
}

impl<'p> SliceHash<'p> {
    fn new(plan: &'p SlicePlan) -> SliceHash<'p> {
        let apart = plan.ranges.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0);
        SliceHash {
            ranges: &plan.ranges,
            next: 0,
            sha: apart.then(Sha256::new),
        }
    }

    /// The file's bytes `piece` from offset `at`.
    fn feed(&mut self, at: u64, piece: &[u8]) {
        let Some(sha) = &mut self.sha else { return };
        let end = at + piece.len() as u64;
        while let Some(&(offset, len)) = self.ranges.get(self.next) {
            if offset >= end {
                break;
            }
            let (from, to) = (offset.max(at), (offset + len).min(end));
            if from < to {
                sha.update(&piece[(from - at) as usize..(to - at) as usize]);
            }
            if offset + len > end {
                break;
            }
            self.next += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn stories() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/models/stories260k.gguf")
    }

    /// Every stage's digest from the one pass equals its slice read on
    /// its own (as a node hashes what it fetches), for splits into 1, 2,
    /// 3 and 5 stages and an uneven one; so do the whole file's and the
    /// header's.
    #[test]
    fn one_pass_digests_equal_each_slice_read_on_its_own() {
        let path = stories();
        let bytes = std::fs::read(&path).expect("the trained model");
        let mut splits: Vec<Vec<Range<usize>>> = [1, 2, 3, 5]
            .into_iter()
            .map(|n| workers::engine::balanced_split(5, n))
            .collect();
        splits.push(vec![0..1, 1..4, 4..5]);
        for stages in splits {
            let mut seen = Vec::new();
            let (model, weights) = Model::open(&path)
                .expect("open")
                .hash(&stages, |done, total| seen.push((done, total)))
                .expect("hash");
            let size = bytes.len() as u64;
            assert_eq!(seen.last(), Some(&(size, size)));
            assert_eq!(model.digest, hex(&Sha256::digest(&bytes)));
            let header = &bytes[..model.header_len as usize];
            assert_eq!(model.header_sha256, hex(&Sha256::digest(header)));
            assert_eq!(weights.len(), stages.len());
            for (w, layers) in weights.iter().zip(&stages) {
                let plan = model.slice(layers.clone()).expect("plan");
                let alone = slice_digest(&plan, &model.file).expect("digest");
                assert_eq!((w.slice_sha256.clone(), w.slice_bytes), alone, "{layers:?}");
                let head = workers::gguf::slice::slice_head(&model.header, &plan);
                assert_eq!(w.slice_head_sha256, hex(&Sha256::digest(&head)));
                assert_eq!(
                    w.first_layer..w.end_layer,
                    layers.start as u32..layers.end as u32
                );
            }
        }
    }

    /// A slice's digest is the same in pieces of any size; ranges that
    /// overlap are left to be read on their own.
    #[test]
    fn a_slice_digest_taken_as_the_file_goes_by_is_the_same_in_any_pieces() {
        let file: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 256) as u8).collect();
        let ranges = vec![(5, 100), (105, 0), (200, 1), (1000, 4000), (9990, 10)];
        let plan = SlicePlan {
            layers: 0..1,
            tensors: Vec::new(),
            ranges: ranges.clone(),
        };
        let mut want = Sha256::new();
        for &(offset, len) in &ranges {
            want.update(&file[offset as usize..(offset + len) as usize]);
        }
        let want = hex(&want.finalize());
        for piece in [1, 7, 100, 4096, 10_000] {
            let mut slice = SliceHash::new(&plan);
            for (i, chunk) in file.chunks(piece).enumerate() {
                slice.feed((i * piece) as u64, chunk);
            }
            let got = hex(&slice.sha.expect("apart").finalize());
            assert_eq!(got, want, "pieces of {piece}");
        }
        let overlapping = SlicePlan {
            ranges: vec![(0, 100), (50, 100)],
            ..plan
        };
        assert!(SliceHash::new(&overlapping).sha.is_none());
    }

    /// A file whose tensors overlap (`blk.1.ffn_up` moved onto
    /// `blk.1.ffn_gate`, the same shape): the slice that holds both is
    /// read again on its own, as a node would read it, and its digest is
    /// that one.
    #[test]
    fn a_slice_of_overlapping_tensors_is_hashed_as_a_node_reads_it() {
        let mut bytes = std::fs::read(stories()).expect("the trained model");
        let model = Model::open(&stories()).expect("open");
        let gate = model
            .header
            .tensor("blk.1.ffn_gate.weight")
            .expect("gate")
            .offset;
        // The tensor info of `blk.1.ffn_up.weight`: its name's length and
        // bytes, its two dims, its type, then its offset.
        let name = b"blk.1.ffn_up.weight";
        let mut key = (name.len() as u64).to_le_bytes().to_vec();
        key.extend_from_slice(name);
        let at = bytes
            .windows(key.len())
            .position(|w| w == key.as_slice())
            .expect("the tensor info");
        let offset = at + key.len() + 4 + 2 * 8 + 4;
        bytes[offset..offset + 8].copy_from_slice(&gate.to_le_bytes());
        let dir = std::env::temp_dir().join(format!("drover-overlap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("overlap.gguf");
        std::fs::write(&path, &bytes).expect("write");
        let stages = [0..1, 1..3, 3..5];
        let (model, weights) = Model::open(&path)
            .expect("open")
            .hash(&stages, |_, _| {})
            .expect("hash");
        let plan = model.slice(1..3).expect("plan");
        assert!(SliceHash::new(&plan).sha.is_none(), "the ranges overlap");
        for (w, layers) in weights.iter().zip(stages) {
            let plan = model.slice(layers.clone()).expect("plan");
            let alone = slice_digest(&plan, &model.file).expect("digest").0;
            assert_eq!(w.slice_sha256, alone, "{layers:?}");
        }
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
