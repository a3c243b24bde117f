//! The Docker Engine connection: the unix socket (`DOCKER_HOST=unix://...`
//! or `/var/run/docker.sock`), the API version negotiated with the engine
//! (bollard's default is newer than what a 20.10 engine speaks, API 1.41:
//! without the negotiation requests fail or take the wrong paths), and
//! errors that name the socket.

use super::super::error;
use bollard::Docker;
use core_fsm::port::{ProviderError, ProviderErrorKind};
use std::net::{IpAddr, Ipv4Addr};
use tokio::sync::OnceCell;

/// The engine's socket when `DOCKER_HOST` names none.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// The client's own timeout for one request, in seconds (a build streams
/// its progress, so it is not bounded by this as a whole).
const REQUEST_TIMEOUT_S: u64 = 120;

/// A lazily connected engine: the socket is opened and the version
/// negotiated on first use, so `drover down` on a machine whose engine is
/// gone still reads its journal (and says which socket refused).
pub struct Engine {
    socket: String,
    docker: OnceCell<Docker>,
}

impl Engine {
    /// The engine `DOCKER_HOST` names (a unix socket), else the default one.
    pub fn from_env() -> Engine {
        let socket = std::env::var("DOCKER_HOST")
            .ok()
            .and_then(|h| h.strip_prefix("unix://").map(str::to_owned))
            .unwrap_or_else(|| DEFAULT_SOCKET.to_owned());
        Engine::at(&socket)
    }

    /// The engine at `socket`.
    pub fn at(socket: &str) -> Engine {
        Engine {
            socket: socket.to_owned(),
            docker: OnceCell::new(),
        }
    }

    /// The socket path.
    pub fn socket(&self) -> &str {
        &self.socket
    }

    /// The client, connected and version-negotiated.
    pub async fn client(&self) -> Result<&Docker, ProviderError> {
        self.docker
            .get_or_try_init(|| async {
                let docker = Docker::connect_with_unix(
                    &self.socket,
                    REQUEST_TIMEOUT_S,
                    bollard::API_DEFAULT_VERSION,
                )
                .map_err(|e| self.unreachable(&e))?;
                docker
                    .negotiate_version()
                    .await
                    .map_err(|e| self.unreachable(&e))
            })
            .await
    }

    fn unreachable(&self, e: &bollard::errors::Error) -> ProviderError {
        error(
            ProviderErrorKind::Transient,
            format!(
                "docker: the engine at {} cannot be reached: {e}",
                self.socket
            ),
        )
    }

    /// An engine error during `what`, named with the socket; `kind` for
    /// answers that are not HTTP statuses (a refused or broken socket).
    pub fn failed(
        &self,
        what: &str,
        e: &bollard::errors::Error,
        kind: ProviderErrorKind,
    ) -> ProviderError {
        let kind = match status_of(e) {
            Some(404) => ProviderErrorKind::NotFound,
            Some(409) => ProviderErrorKind::Ambiguous,
            Some(400..=499) => ProviderErrorKind::Rejected,
            Some(_) => ProviderErrorKind::Transient,
            None => kind,
        };
        error(kind, format!("docker ({}): {what}: {e}", self.socket))
    }

    /// Whether the engine has the NVIDIA runtime a GPU device request needs.
    pub async fn nvidia_runtime(&self) -> Result<Result<(), String>, ProviderError> {
        let docker = self.client().await?;
        let info = docker.info().await.map_err(|e| {
            self.failed(
                "reading the engine's info",
                &e,
                ProviderErrorKind::Transient,
            )
        })?;
        let runtimes: Vec<String> = info
            .runtimes
            .map(|r| r.into_keys().collect())
            .unwrap_or_default();
        if runtimes.iter().any(|r| r == "nvidia") {
            return Ok(Ok(()));
        }
        let mut runtimes = runtimes;
        runtimes.sort();
        Ok(Err(format!(
            "the Docker engine at {} has no NVIDIA runtime (its runtimes: {}); \
             a group with `gpus` needs the NVIDIA Container Toolkit on the engine",
            self.socket,
            runtimes.join(", ")
        )))
    }

    /// The address containers on the default bridge reach this machine at
    /// (their gateway): the control plane binds there, so agents inside
    /// containers can dial it.
    pub async fn bridge_gateway(&self) -> Result<IpAddr, ProviderError> {
        let docker = self.client().await?;
        let network = docker
            .inspect_network(
                "bridge",
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await
            .map_err(|e| {
                self.failed(
                    "reading the bridge network",
                    &e,
                    ProviderErrorKind::Transient,
                )
            })?;
        let configs = network.ipam.and_then(|i| i.config).unwrap_or_default();
        for config in configs {
            if let Some(gateway) = config.gateway.and_then(|g| g.parse().ok()) {
                return Ok(gateway);
            }
            // An engine that does not report the gateway gives the bridge
            // the subnet's first address.
            if let Some(first) = config.subnet.as_deref().and_then(first_host) {
                return Ok(IpAddr::V4(first));
            }
        }
        Err(error(
            ProviderErrorKind::Rejected,
            format!(
                "docker ({}): the bridge network has no IPv4 subnet",
                self.socket
            ),
        ))
    }
}

/// The HTTP status of an engine answer, if it was one.
pub fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// The first host address of an IPv4 subnet, `172.17.0.0/16` -> `172.17.0.1`.
fn first_host(subnet: &str) -> Option<Ipv4Addr> {
    let (net, bits) = subnet.split_once('/')?;
    let net: Ipv4Addr = net.parse().ok()?;
    let bits: u32 = bits.parse().ok().filter(|b| *b < 31)?;
    let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
    Some(Ipv4Addr::from((u32::from(net) & mask) + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_host_of_a_subnet() {
        assert_eq!(
            first_host("172.17.0.0/16"),
            Some(Ipv4Addr::new(172, 17, 0, 1))
        );
        assert_eq!(first_host("10.1.2.0/24"), Some(Ipv4Addr::new(10, 1, 2, 1)));
        assert_eq!(first_host("10.1.2.0/31"), None);
        assert_eq!(first_host("fd00::/64"), None);
    }

    #[tokio::test]
    async fn a_missing_socket_is_named() {
        let engine = Engine::at("/nonexistent/docker.sock");
        let e = engine.client().await.unwrap_err();
        assert!(e.message.contains("/nonexistent/docker.sock"), "{e:?}");
        assert_eq!(e.kind, ProviderErrorKind::Transient);
    }
}
