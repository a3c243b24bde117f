//! `drover-worker stage` processes chained over the stage protocol, as the
//! agents chain them: the same logits, bit for bit, as one process.

mod common;
mod stage_support;

use stage_support::{Worker, forward};
use std::io::Write;
use workers::engine::{Chain, split_from_sizes};
use workers::model::Logits;
use workers::wire::{Input, Load, OutputKind, Reply, Request, Sampling, VERSION, write_frame};

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
                    assert_eq!(data.len(), want.len(), "seq {seq}");
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
        assert!(w.exit().success());
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
    let ready = bare.ask(&load(2));
    let Reply::Ready {
        version: VERSION,
        end_layer: 5,
        bytes_mapped,
        ..
    } = ready
    else {
        panic!("a valid Load after the refused one: {ready:?}");
    };
    // Each worker names its threads as it loads: the Load's two, and the
    // one of `--threads 1`.
    let said = |threads: u32| {
        format!("stage 0..5 ready: {bytes_mapped} bytes mapped, context 64, {threads} thread(s)")
    };
    assert_eq!(bare.stderr_line(" ready: "), said(2));
    let (mut one, _) = Worker::start("0..5");
    assert_eq!(one.stderr_line(" ready: "), said(1));
    let ask = forward(
        1,
        0,
        Input::Tokens(vec![1, 403, 407]),
        OutputKind::LastLogits,
    );
    match (bare.ask(&ask), one.ask(&ask)) {
        (Reply::Logits { data: a, .. }, Reply::Logits { data: b, .. }) => {
            assert_eq!((a.len(), b.len()), (512, 512));
            let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "two threads and one give other logits");
        }
        other => panic!("{other:?}"),
    }
    for mut w in [bare, one] {
        write_frame(&mut w.stdin, &Request::Stop).expect("stop");
        assert!(w.exit().success());
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
    assert!(w.exit().success(), "the end of stdin is a clean stop");
}

#[test]
fn a_malformed_frame_is_answered_with_a_fault_naming_its_offset() {
    let (mut w, _) = Worker::start("0..1");
    w.stdin
        .write_all(&[3, 0, 0, 0, 0xff, 0xff, 0xff])
        .expect("garbage");
    w.stdin.flush().expect("flush");
    match w.reply() {
        Reply::Fault { seq: 0, reason } => assert!(reason.contains("offset 0"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(!w.exit().success());
    let (mut w, _) = Worker::start("0..1");
    w.stdin.write_all(&u32::MAX.to_le_bytes()).expect("huge");
    w.stdin.flush().expect("flush");
    match w.reply() {
        Reply::Fault { reason, .. } => assert!(reason.contains("cap"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(!w.exit().success());
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
    assert!(w.exit().success());
}

/// A reply over the 64 MiB frame cap (the logits of 600 positions of a
/// 32000-token vocabulary, 77 MB) is a `Fault` naming its size, not a
/// crash; the step is undone, so the stage serves from position 0 again.
#[test]
fn a_reply_over_the_frame_cap_is_a_fault_and_the_step_is_undone() {
    let dir = common::scratch("stage-oversized");
    let model = dir.join("wide-vocab.gguf");
    let made = std::process::Command::new(env!("CARGO_BIN_EXE_drover-worker"))
        .args([
            "make-model",
            "--shape",
            "tiny,layers=1,vocab=32000,ctx=1024",
        ])
        .args(["--type", "f32", "--seed", "3"])
        .arg(&model)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("make-model");
    assert!(made.success());
    let args: [&std::ffi::OsStr; 8] = [
        "--ctx".as_ref(),
        "1024".as_ref(),
        "--threads".as_ref(),
        "1".as_ref(),
        "--layers".as_ref(),
        "0..1".as_ref(),
        "--model".as_ref(),
        model.as_os_str(),
    ];
    let (mut w, ready) = Worker::spawn(&args);
    assert!(
        matches!(ready, Reply::Ready { vocab: 32000, .. }),
        "{ready:?}"
    );
    let prompt: Vec<u32> = (0..600).map(|i| 1 + i % 500).collect();
    let r = w.ask(&forward(
        1,
        0,
        Input::Tokens(prompt.clone()),
        OutputKind::AllLogits,
    ));
    match &r {
        Reply::Fault { seq: 1, reason } => assert!(
            reason.starts_with("the reply to step 1: a frame of 768000")
                && reason.ends_with("bytes is over the 67108864-byte cap"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    // Undone: position 0 is where the stage is, and it computes the same
    // prompt's last logits as a fresh stage would.
    let r = w.ask(&forward(
        2,
        0,
        Input::Tokens(prompt),
        OutputKind::LastLogits,
    ));
    assert!(
        matches!(&r, Reply::Logits { seq: 2, data } if data.len() == 32000),
        "{r:?}"
    );
    assert!(w.exit().success());
    std::fs::remove_dir_all(&dir).unwrap();
}
