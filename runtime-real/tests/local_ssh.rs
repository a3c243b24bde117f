//! The local provider and the SSH port against each other, with real
//! processes and real SSH: create a node, reach it, run commands, pin its
//! host key, refuse strangers, destroy it and everything it started.

use core_fsm::ids::{LogicalNodeId, Nonce, OpId, RunId};
use core_fsm::plan::ProviderKind;
use core_fsm::port::{
    CreateLeaseRequest, EndpointStatus, Input, LogStream, ProviderErrorKind, SshErrorKind,
};
use runtime_real::provider::Provider;
use runtime_real::provider::local::{LocalProvider, process};
use runtime_real::ssh::{self, identity};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;

const BOUND: Duration = Duration::from_secs(60);

fn state_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("drover-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn provider(state: &Path) -> LocalProvider {
    identity::load_or_create(state).unwrap();
    LocalProvider::new(
        state,
        Path::new(env!("CARGO_BIN_EXE_drover")),
        &identity::public_key_path(state),
    )
}

fn request(node: &str, nonce: u64) -> CreateLeaseRequest {
    CreateLeaseRequest {
        run_id: RunId(9),
        node: LogicalNodeId::from(node),
        nonce: Nonce(nonce),
        provider: ProviderKind::Local,
        shape: Default::default(),
        excluded_hosts: vec![],
    }
}

/// Runs `command` and returns (exit code, stdout lines, stderr lines).
async fn run(
    conn: &ssh::Connection,
    command: &str,
    secret: Option<&str>,
) -> (i32, Vec<String>, Vec<String>) {
    let (tx, mut rx) = mpsc::channel(256);
    let code = conn.exec(OpId(1), command, secret, &tx).await.unwrap();
    drop(tx);
    let (mut out, mut err) = (vec![], vec![]);
    while let Some(Input::SshOutput { stream, line, .. }) = rx.recv().await {
        match stream {
            LogStream::Stdout => out.push(line),
            LogStream::Stderr => err.push(line),
        }
    }
    (code, out, err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_node_is_reached_over_ssh_and_destroyed_with_everything_it_started() {
    tokio::time::timeout(BOUND, scenario())
        .await
        .expect("scenario within its bound");
}

async fn scenario() {
    let state = state_dir("local-ssh");
    let provider = provider(&state);
    let key = identity::load_or_create(&state).unwrap();
    let granted = provider.create_lease(request("w-0", 11)).await.unwrap();
    let lease = granted.lease.clone();
    assert_eq!(lease.lease_id.as_str(), "local:0");
    let pid: u32 = lease.contract_id.parse().unwrap();
    let dir = PathBuf::from(&lease.metadata["dir"]);
    assert!(process::is_our_node(pid, &dir));
    let endpoint = granted.endpoint.clone().unwrap();
    assert_eq!(
        provider.lookup_endpoint(lease.clone()).await.unwrap(),
        EndpointStatus::Ready(endpoint.clone())
    );
    let listed = provider.list_leases(RunId(9)).await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|l| (l.lease_id.clone(), l.nonce))
            .collect::<Vec<_>>(),
        [(lease.lease_id.clone(), Nonce(11))]
    );
    assert!(provider.list_leases(RunId(10)).await.unwrap().is_empty());

    // Commands: both streams, in order, the exit code, the node's folder,
    // the drover binaries on PATH, and the secret redacted.
    let conn = ssh::connect(&state, &endpoint, &lease.lease_id, key.clone())
        .await
        .unwrap();
    let (code, out, err) = run(
        &conn,
        "echo one; echo bad >&2; printf 'two\\nthree'; exit 3",
        None,
    )
    .await;
    assert_eq!(
        (code, out, err),
        (
            3,
            vec!["one".into(), "two".into(), "three".into()],
            vec!["bad".into()]
        )
    );
    let (code, out, _) = run(
        &conn,
        "pwd; command -v drover; echo token=s3cret",
        Some("s3cret"),
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(
        Path::new(&out[0]).canonicalize().unwrap(),
        dir.canonicalize().unwrap()
    );
    assert!(out[1].ends_with("/drover"), "{out:?}");
    assert_eq!(out[2], "token=[redacted]");
    // A background job (like the agent) stays behind after its shell exits.
    let (code, out, _) = run(&conn, "nohup sleep 600 > sleep.log 2>&1 & echo $!", None).await;
    assert_eq!(code, 0);
    let background: u32 = out[0].parse().unwrap();
    assert!(process::is_running(background));
    conn.close().await;

    // The host key was pinned; a different one is refused.
    let pin = ssh::pin_file(&state, &lease.lease_id);
    assert!(
        std::fs::read_to_string(&pin)
            .unwrap()
            .starts_with("ssh-ed25519 ")
    );
    ssh::connect(&state, &endpoint, &lease.lease_id, key.clone())
        .await
        .unwrap()
        .close()
        .await;
    let other = state_dir("other-identity");
    let stranger = identity::load_or_create(&other).unwrap();
    std::fs::write(
        &pin,
        format!("{}\n", stranger.public_key().to_openssh().unwrap()),
    )
    .unwrap();
    let mismatch = ssh::connect(&state, &endpoint, &lease.lease_id, key.clone())
        .await
        .err()
        .unwrap();
    assert_eq!(mismatch.kind, SshErrorKind::HostKeyMismatch);
    ssh::forget_host(&state, &lease.lease_id);

    // A key the node does not authorize is denied.
    let denied = ssh::connect(&state, &endpoint, &lease.lease_id, stranger)
        .await
        .err()
        .unwrap();
    assert_eq!(denied.kind, SshErrorKind::AuthDenied, "{denied:?}");

    // Destroying from another provider instance (as `drover down` after a
    // crash does) stops the node and its background job and removes its
    // folder; a second destroy finds nothing.
    let fresh = LocalProvider::new(
        &state,
        Path::new(env!("CARGO_BIN_EXE_drover")),
        &identity::public_key_path(&state),
    );
    fresh.destroy_lease(lease.clone()).await.unwrap();
    assert!(!process::is_running(pid), "node {pid} still runs");
    assert!(
        !process::is_running(background),
        "background job {background} still runs"
    );
    assert!(!dir.exists());
    let again = fresh.destroy_lease(lease.clone()).await.unwrap_err();
    assert_eq!(again.kind, ProviderErrorKind::NotFound);
    assert_eq!(
        provider.lookup_endpoint(lease).await.unwrap(),
        EndpointStatus::Gone
    );

    // Nothing listens there any more: refused.
    let refused = ssh::connect(
        &state,
        &endpoint,
        &core_fsm::ids::LeaseId::from("local:0"),
        key,
    )
    .await
    .err()
    .unwrap();
    assert_eq!(refused.kind, SshErrorKind::Refused);

    // Lease numbers are never reused.
    let next = provider.create_lease(request("w-1", 12)).await.unwrap();
    assert_eq!(next.lease.lease_id.as_str(), "local:1");
    provider.destroy_lease(next.lease).await.unwrap();
    std::fs::remove_dir_all(&state).unwrap();
    std::fs::remove_dir_all(&other).unwrap();
}
