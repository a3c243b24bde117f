//! What one lease's container is: its name (derived from the intent, so the
//! engine refuses a second create of it with 409), its labels (set at
//! create time; labels an image carries are inherited by its containers,
//! so none is ever read from the image), its command (`drover local-node`
//! on 0.0.0.0:22), the published port and the GPU device requests.

use super::image::{BIN_DIR, NODE_DIR};
use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig, PortBinding};
use core_fsm::ids::{LeaseLabel, Nonce, RunId};
use core_fsm::plan::DesiredShape;
use std::collections::HashMap;

/// The label holding the lease label (`drover:run-..:node:nonce-..`).
pub const LABEL_LEASE: &str = "drover.lease";
/// The label holding the hash of the state dir that created the container.
pub const LABEL_STATE: &str = "drover.state";
/// The label holding the run id (a number).
pub const LABEL_RUN: &str = "drover.run";
/// The shape label a plan's `gpus` becomes.
pub const GPUS_LABEL: &str = "docker.gpus";
/// The node's SSH port inside the container.
pub const SSH_PORT: &str = "22/tcp";
/// Where the state dir's public key is mounted, read-only.
const AUTHORIZED_KEY: &str = "/etc/drover/authorized_key";

/// The container name of an intent: unique per state dir, run, node and
/// nonce, and the same on every try of one intent.
pub fn name(state_hash: &str, label: &LeaseLabel) -> String {
    format!(
        "drover-{state_hash}-r{}-{}-n{}",
        label.run_id.0, label.node, label.nonce.0
    )
}

/// The labels every container of an intent gets at create time.
pub fn labels(state_hash: &str, label: &LeaseLabel) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_LEASE.to_owned(), label.render()),
        (LABEL_STATE.to_owned(), state_hash.to_owned()),
        (LABEL_RUN.to_owned(), label.run_id.0.to_string()),
    ])
}

/// The label filters that select the containers of `run_id` made from one
/// state dir: nothing of another user or state dir matches.
pub fn filters(state_hash: &str, run_id: Option<RunId>) -> HashMap<String, Vec<String>> {
    let mut wanted = vec![format!("{LABEL_STATE}={state_hash}")];
    if let Some(run) = run_id {
        wanted.push(format!("{LABEL_RUN}={}", run.0));
    }
    HashMap::from([("label".to_owned(), wanted)])
}

/// The lease label of a listed container, when its labels are a drover
/// container's of this state dir (and agree with each other).
pub fn lease_of(state_hash: &str, labels: &HashMap<String, String>) -> Option<LeaseLabel> {
    let label = LeaseLabel::parse(labels.get(LABEL_LEASE)?)?;
    let run = labels.get(LABEL_RUN)?.parse::<u64>().ok()?;
    let ours = labels.get(LABEL_STATE).map(String::as_str) == Some(state_hash);
    (ours && run == label.run_id.0).then_some(label)
}

/// What the plan's `gpus` asks for: every GPU, or a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gpus {
    /// `gpus = "all"`.
    All,
    /// `gpus = "2"`.
    Count(u32),
}

impl Gpus {
    /// Reads a `gpus` value; the reason when it is not `all` or a count.
    pub fn parse(text: &str) -> Result<Gpus, String> {
        match text.trim() {
            "all" => Ok(Gpus::All),
            n => match n.parse::<u32>() {
                Ok(count) if count > 0 => Ok(Gpus::Count(count)),
                _ => Err(format!(
                    "expected \"all\" or a number of GPUs (1 or more), found {text:?}"
                )),
            },
        }
    }

    /// The GPUs a shape asks for (its `docker.gpus` label), if any.
    pub fn of_shape(shape: &DesiredShape) -> Option<Gpus> {
        shape
            .provider_labels
            .get(GPUS_LABEL)
            .and_then(|g| Gpus::parse(g).ok())
    }

    /// The engine's device request (what `docker run --gpus` sends).
    fn request(self) -> DeviceRequest {
        DeviceRequest {
            driver: Some(String::new()),
            count: Some(match self {
                Gpus::All => -1,
                Gpus::Count(n) => i64::from(n),
            }),
            capabilities: Some(vec![vec!["gpu".to_owned()]]),
            ..Default::default()
        }
    }
}

/// The container of an intent: the node image, its labels, `drover
/// local-node` on 0.0.0.0:22 with the state dir's key, port 22 published
/// on 127.0.0.1 with a port the engine picks, an init process to reap the
/// agent's orphans, GPUs when asked for.
pub fn body(
    image: &str,
    labels: HashMap<String, String>,
    public_key: &str,
    gpus: Option<Gpus>,
) -> ContainerCreateBody {
    let command = [
        &format!("{BIN_DIR}/drover"),
        "local-node",
        "--dir",
        NODE_DIR,
        "--authorized-key",
        AUTHORIZED_KEY,
        "--port-file",
        &format!("{NODE_DIR}/port"),
        "--listen",
        "0.0.0.0:22",
    ];
    let published = PortBinding {
        host_ip: Some("127.0.0.1".to_owned()),
        host_port: Some(String::new()),
    };
    let host = HostConfig {
        binds: Some(vec![format!("{public_key}:{AUTHORIZED_KEY}:ro")]),
        port_bindings: Some(HashMap::from([(
            SSH_PORT.to_owned(),
            Some(vec![published]),
        )])),
        init: Some(true),
        device_requests: gpus.map(|g| vec![g.request()]),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(command.iter().map(|s| s.to_string()).collect()),
        labels: Some(labels),
        exposed_ports: Some(vec![SSH_PORT.to_owned()]),
        working_dir: Some(NODE_DIR.to_owned()),
        host_config: Some(host),
        ..Default::default()
    }
}

/// The label of an intent.
pub fn intent(run_id: RunId, node: &core_fsm::ids::LogicalNodeId, nonce: Nonce) -> LeaseLabel {
    LeaseLabel {
        run_id,
        node: node.clone(),
        nonce,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core_fsm::ids::LogicalNodeId;

    #[test]
    fn names_and_labels_come_from_the_intent_and_the_state_dir() {
        let label = intent(RunId(3), &LogicalNodeId::from("workers-1"), Nonce(42));
        assert_eq!(name("abc123", &label), "drover-abc123-r3-workers-1-n42");
        let labels = labels("abc123", &label);
        assert_eq!(lease_of("abc123", &labels), Some(label.clone()));
        assert_eq!(lease_of("other", &labels), None, "another state dir's");
        let mut foreign = labels.clone();
        foreign.insert(LABEL_RUN.to_owned(), "4".to_owned());
        assert_eq!(lease_of("abc123", &foreign), None, "labels that disagree");
        assert_eq!(lease_of("abc123", &HashMap::new()), None, "no drover label");
    }

    #[test]
    fn gpus_are_all_or_a_count() {
        assert_eq!(Gpus::parse("all"), Ok(Gpus::All));
        assert_eq!(Gpus::parse("2"), Ok(Gpus::Count(2)));
        for bad in ["0", "-1", "some", ""] {
            assert!(Gpus::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Gpus::All.request().count, Some(-1));
    }
}
