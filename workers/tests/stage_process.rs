//! `drover-worker stage` processes chained over the stage protocol, as the
//! agents chain them: the same logits, bit for bit, as one process.

mod common;

use std::io::Write;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use workers::engine::{Chain, split_from_sizes};
use workers::model::Logits;
use workers::wire::{
    FrameReader, Input, Load, OutputKind, Reply, Request, Sampling, VERSION, write_frame,
};

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: FrameReader<ChildStdout>,
}

impl Worker {
    /// `drover-worker stage ARGS..` and its first reply.
    fn spawn(args: &[&std::ffi::OsStr]) -> (Worker, Reply) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_drover-worker"))
            .arg("stage")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn drover-worker");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = FrameReader::new(child.stdout.take().expect("stdout"));
        let first = stdout.read::<Reply>().expect("a first reply");
        let worker = Worker {
            child,
            stdin,
            stdout,
        };
        (worker, first)
    }

    /// A stage of TinyStories 260K, one thread, and its `Ready`.
    fn start(layers: &str) -> (Worker, Reply) {
        let model = common::stories();
        let args = [
            "--ctx",
            "64",
            "--threads",
            "1",
            "--layers",
            layers,
            "--model",
        ];
        let mut args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        args.push(model.as_os_str());
        Worker::spawn(&args)
    }

    /// A worker started as an agent starts it: no model, `Hello` first.
    fn bare() -> (Worker, Reply) {
        Worker::spawn(&[])
    }

    fn ask(&mut self, r: &Request) -> Reply {
        write_frame(&mut self.stdin, r).expect("send");
        self.stdout.read().expect("reply")
    }
}

fn forward(seq: u64, pos: u32, input: Input, output: OutputKind) -> Request {
    Request::Forward {
        seq,
        pos,
        input,
        output,
    }
}

#[test]
fn three_stage_processes_give_the_logits_of_one() {
    let prompt = vec![1u32, 403, 407, 261, 378];
    let mut workers: Vec<Worker> = ["0..2", "2..4", "4..5"]
        .iter()
        .map(|l| {
            let (w, ready) = Worker::start(l);
            assert!(
                matches!(
                    ready,
                    Reply::Ready {
                        version: VERSION,
                        embedding: 64,
                        vocab: 512,
                        ..
                    }
                ),
                "{ready:?}"
            );
            w
        })
        .collect();
    let mut chain = Chain::open(&common::stories(), &split_from_sizes(&[5]), 64).expect("chain");
    let mut pos = 0u32;
    let mut batch = prompt.clone();
    for seq in 1..=6u64 {
        let mut input = Input::Tokens(batch.clone());
        for (i, w) in workers.iter_mut().enumerate() {
            let output = if i == 2 {
                OutputKind::LastLogits
            } else {
                OutputKind::Token
            };
            match w.ask(&forward(seq, pos, input, output)) {
                Reply::Activations { seq: s, data } => {
                    assert_eq!(s, seq);
                    input = Input::Activations(data);
                }
                Reply::Logits { seq: s, data } => {
                    assert_eq!(s, seq);
                    let want = chain.forward(&batch, Logits::Last).expect("chain");
                    assert!(
                        data.iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "seq {seq}"
                    );
                    pos += batch.len() as u32;
                    batch = vec![workers::sample::greedy(&data)];
                    input = Input::Tokens(vec![]);
                }
                other => panic!("stage {i}: {other:?}"),
            }
        }
        assert!(matches!(input, Input::Tokens(ref t) if t.is_empty()));
    }
    for mut w in workers {
        write_frame(&mut w.stdin, &Request::Stop).expect("stop");
        assert!(w.child.wait().expect("wait").success());
    }
}

fn load(threads: u32) -> Request {
    Request::Load(Load {
        model: common::stories().display().to_string(),
        first_layer: 0,
        end_layer: 5,
        ctx: 64,
        sampling: Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        },
        threads,
        backend: workers::model::Backend::Cpu,
    })
}

#[test]
fn a_load_names_the_stage_threads_and_the_logits_stay_the_same() {
    let (mut bare, hello) = Worker::bare();
    assert_eq!(hello, Reply::Hello { version: VERSION });
    // Too many threads: a fault naming the field; the worker waits on.
    match bare.ask(&load(1_000_000)) {
        Reply::Fault { seq: 0, reason } => {
            assert!(reason.contains("threads 1000000"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(
            bare.ask(&load(2)),
            Reply::Ready {
                version: VERSION,
                end_layer: 5,
                ..
            }
        ),
        "a valid Load after the refused one"
    );
    let (mut one, _) = Worker::start("0..5");
    let ask = forward(
        1,
        0,
        Input::Tokens(vec![1, 403, 407]),
        OutputKind::LastLogits,
    );
    match (bare.ask(&ask), one.ask(&ask)) {
        (Reply::Logits { data: a, .. }, Reply::Logits { data: b, .. }) => {
            assert_eq!(a.len(), 512);
            let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "two threads and one give other logits");
        }
        other => panic!("{other:?}"),
    }
    for mut w in [bare, one] {
        write_frame(&mut w.stdin, &Request::Stop).expect("stop");
        assert!(w.child.wait().expect("wait").success());
    }
}

#[test]
fn a_wrong_position_is_a_fault_and_the_stage_carries_on() {
    let (mut w, _) = Worker::start("0..5");
    let r = w.ask(&forward(7, 3, Input::Tokens(vec![1]), OutputKind::Token));
    assert!(
        matches!(&r, Reply::Fault { seq: 7, reason } if reason.contains("position 3")),
        "{r:?}"
    );
    let r = w.ask(&forward(
        8,
        0,
        Input::Tokens(vec![1, 403]),
        OutputKind::Token,
    ));
    assert_eq!(r, Reply::Token { seq: 8, id: 407 });
    // A resume: forget the last position and compute it again.
    write_frame(&mut w.stdin, &Request::Truncate { pos: 1 }).expect("truncate");
    let r = w.ask(&forward(9, 1, Input::Tokens(vec![403]), OutputKind::Token));
    assert_eq!(r, Reply::Token { seq: 9, id: 407 });
    drop(w.stdin);
    assert!(
        w.child.wait().expect("wait").success(),
        "the end of stdin is a clean stop"
    );
}

#[test]
fn a_malformed_frame_is_answered_with_a_fault_naming_its_offset() {
    let (mut w, _) = Worker::start("0..1");
    w.stdin
        .write_all(&[3, 0, 0, 0, 0xff, 0xff, 0xff])
        .expect("garbage");
    w.stdin.flush().expect("flush");
    match w.stdout.read::<Reply>().expect("fault") {
        Reply::Fault { seq: 0, reason } => assert!(reason.contains("offset 0"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(!w.child.wait().expect("wait").success());
    let (mut w, _) = Worker::start("0..1");
    w.stdin.write_all(&u32::MAX.to_le_bytes()).expect("huge");
    w.stdin.flush().expect("flush");
    match w.stdout.read::<Reply>().expect("fault") {
        Reply::Fault { reason, .. } => assert!(reason.contains("cap"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(!w.child.wait().expect("wait").success());
}

/// The processors thread `tid` (of any process) may run on.
#[cfg(target_os = "linux")]
fn cpus_of(tid: u32) -> Vec<usize> {
    workers::affinity::allowed_of(tid).expect("the thread's processors")
}

#[cfg(target_os = "linux")]
#[test]
fn serve_cpu_keeps_the_serving_thread_on_its_processor_and_no_other_thread() {
    let all = workers::affinity::allowed().expect("this process's processors");
    let cpu = *all.last().expect("a processor");
    let model = common::stories();
    let cpu_arg = cpu.to_string();
    let args = [
        "--ctx",
        "64",
        "--threads",
        "2",
        "--serve-cpu",
        &cpu_arg,
        "--layers",
        "0..5",
        "--model",
    ];
    let mut args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    args.push(model.as_os_str());
    let (mut w, ready) = Worker::spawn(&args);
    assert!(matches!(ready, Reply::Ready { .. }), "{ready:?}");
    // A step answered: the serving thread has pinned itself by now.
    let r = w.ask(&forward(
        1,
        0,
        Input::Tokens(vec![1, 403]),
        OutputKind::Token,
    ));
    assert_eq!(r, Reply::Token { seq: 1, id: 407 }, "the same token");
    let pid = w.child.id();
    let tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the worker's threads")
        .map(|e| {
            e.expect("entry")
                .file_name()
                .to_string_lossy()
                .parse()
                .expect("tid")
        })
        .collect();
    let pinned: Vec<u32> = tids
        .iter()
        .copied()
        .filter(|&t| cpus_of(t) == vec![cpu])
        .collect();
    assert!(!pinned.is_empty(), "a thread runs on processor {cpu} only");
    assert_eq!(cpus_of(pid), all, "the main thread keeps every processor");
    if all.len() > 1 {
        assert_eq!(
            pinned.len(),
            1,
            "only the serving thread is pinned: {tids:?}"
        );
        assert!(
            tids.iter().any(|&t| t != pid && cpus_of(t) == all),
            "the pool's other thread runs anywhere"
        );
    }
    drop(w.stdin);
    assert!(w.child.wait().expect("wait").success());
}
