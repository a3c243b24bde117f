//! The docker adapter against the real engine, without an orchestrator:
//! what it answers for a lease whose container is killed or removed behind
//! drover's back, and for a second create of one intent.

mod docker_support;

use core_fsm::ids::{LogicalNodeId, Nonce, RunId};
use core_fsm::plan::{DesiredShape, ProviderKind};
use core_fsm::port::{CreateLeaseRequest, EndpointStatus, ProviderErrorKind};
use docker_support::*;
use runtime_real::provider::Provider;
use runtime_real::provider::docker::DockerProvider;
use std::sync::Arc;

fn request(nonce: u64) -> CreateLeaseRequest {
    CreateLeaseRequest {
        run_id: RunId(9),
        node: LogicalNodeId::from("workers-0"),
        nonce: Nonce(nonce),
        provider: ProviderKind::Docker,
        shape: Arc::new(DesiredShape::default()),
        excluded_hosts: vec![],
    }
}

#[test]
fn a_killed_container_is_failed_a_removed_one_gone_and_a_second_create_of_an_intent_ambiguous() {
    let dir = scratch_dir("docker-adapter");
    let state = dir.join("state");
    let _guard = Guard {
        label: state_label(&state),
    };
    runtime_real::ssh::identity::load_or_create(&state).unwrap();
    let public = runtime_real::ssh::identity::public_key_path(&state);
    let drover = std::path::Path::new(env!("CARGO_BIN_EXE_drover"));
    let provider = DockerProvider::new(engine(), &state, drover, &public);
    runtime().block_on(async {
        let granted = provider.create_lease(request(1)).await.unwrap();
        let lease = granted.lease.clone();
        assert!(lease.lease_id.as_str().starts_with("docker:"), "{lease:?}");
        let endpoint = granted.endpoint.expect("a started container has its port");
        assert_eq!(endpoint.host, "127.0.0.1");
        assert!(matches!(
            provider.lookup_endpoint(lease.clone()).await.unwrap(),
            EndpointStatus::Ready(e) if e == endpoint
        ));
        // The same intent again: the engine refuses the name.
        let again = provider.create_lease(request(1)).await.unwrap_err();
        assert_eq!(again.kind, ProviderErrorKind::Ambiguous, "{again:?}");
        let listed = provider.list_leases(RunId(9)).await.unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].contract_id, lease.contract_id);
        assert!(provider.list_leases(RunId(10)).await.unwrap().is_empty());

        let docker = provider.engine().client().await.unwrap();
        docker
            .kill_container(
                &lease.contract_id,
                None::<bollard::query_parameters::KillContainerOptions>,
            )
            .await
            .unwrap();
        // A kill is asynchronous in the engine: wait for the exit.
        let mut wait = docker.wait_container(
            &lease.contract_id,
            None::<bollard::query_parameters::WaitContainerOptions>,
        );
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            futures_util::StreamExt::next(&mut wait),
        )
        .await
        .expect("the killed container exits");
        match provider.lookup_endpoint(lease.clone()).await.unwrap() {
            EndpointStatus::Failed { reason } => assert!(reason.contains("exited"), "{reason}"),
            other => panic!("a killed container: {other:?}"),
        }
        // Still listed (a stopped container is a lease to destroy).
        assert_eq!(provider.list_leases(RunId(9)).await.unwrap().len(), 1);
        docker
            .remove_container(
                &lease.contract_id,
                None::<bollard::query_parameters::RemoveContainerOptions>,
            )
            .await
            .unwrap();
        assert_eq!(
            provider.lookup_endpoint(lease.clone()).await.unwrap(),
            EndpointStatus::Gone
        );
        let gone = provider.destroy_lease(lease).await.unwrap_err();
        assert_eq!(gone.kind, ProviderErrorKind::NotFound, "{gone:?}");
    });
    std::fs::remove_dir_all(&dir).unwrap();
}
