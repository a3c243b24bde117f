//! The agent's side of the stage protocol's version, against stand-in
//! workers: shell scripts that send one `Hello` and wait for the end of
//! their stdin, as a real worker waits for its `Load`.

use super::*;
use std::time::Duration;
use workers::wire::{self, Reply};

/// How long a stand-in worker may take to be heard.
const BOUND: Duration = Duration::from_secs(20);

/// A stand-in worker in a directory of its own that says `Hello` with
/// `version`.
fn stand_in(name: &str, version: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("drover-worker-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hello = dir.join("hello.frame");
    let mut frame = Vec::new();
    wire::write_frame(&mut frame, &Reply::Hello { version }).unwrap();
    std::fs::write(&hello, frame).unwrap();
    let script = dir.join("worker");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat '{}'\nexec cat > /dev/null\n",
            hello.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

async fn next(inputs: &mut mpsc::Receiver<Input>) -> Input {
    tokio::time::timeout(BOUND, inputs.recv())
        .await
        .expect("the worker was heard in time")
        .expect("the inputs are open")
}

#[tokio::test]
async fn a_worker_of_this_protocol_is_ready() {
    let (tx, mut inputs) = mpsc::channel(8);
    let binary = stand_in("same", wire::VERSION);
    let handle = spawn_binary(&binary, OpId(7), 0, "test", tx).unwrap();
    match next(&mut inputs).await {
        Input::WorkerReady { op } => assert_eq!(op, OpId(7)),
        other => panic!("expected WorkerReady, got {other:?}"),
    }
    drop(handle);
    let _ = std::fs::remove_dir_all(binary.parent().unwrap());
}

#[tokio::test]
async fn a_worker_of_another_protocol_is_let_go() {
    let (tx, mut inputs) = mpsc::channel(8);
    let binary = stand_in("other", wire::VERSION - 1);
    let _handle = spawn_binary(&binary, OpId(8), 0, "test", tx).unwrap();
    // Never ready: the machine hears why, once.
    match next(&mut inputs).await {
        Input::WorkerExited { op, reason } => {
            assert_eq!(op, OpId(8));
            let want = format!(
                "the worker speaks stage protocol version {}, this agent {}",
                wire::VERSION - 1,
                wire::VERSION
            );
            assert_eq!(reason, want);
        }
        other => panic!("expected WorkerExited, got {other:?}"),
    }
    // Its stdin closed and it exited: the supervisor ends without a word,
    // and with it the last sender of the inputs.
    let more = tokio::time::timeout(BOUND, inputs.recv())
        .await
        .expect("the worker exited in time");
    assert!(more.is_none(), "a second report: {more:?}");
    let _ = std::fs::remove_dir_all(binary.parent().unwrap());
}
