//! One-time join tokens: minted from OS randomness, bound to one
//! `(run, node, lease)`, redeemed at most once, revocable.
//!
//! The book keeps only pending tokens and a bounded memory of used and revoked
//! ones (so a replay is reported as a replay). Comparison is constant-time
//! over every entry, so the lookup's timing says nothing about the secret.

use super::RejectReason;
use core_fsm::ids::{LeaseId, LogicalNodeId, RunId};
use core_fsm::port::JoinBinding;
use rand::TryRng;

/// Bytes of randomness in a token (256 bits).
const TOKEN_BYTES: usize = 32;

/// Most entries the book remembers; beyond it the oldest settled (used or
/// revoked) entry is forgotten first, then the oldest pending one.
pub(crate) const TOKEN_ENTRIES_MAX: usize = 8192;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokenState {
    Pending,
    Used,
    Revoked,
}

struct Entry {
    secret: [u8; TOKEN_BYTES],
    binding: JoinBinding,
    state: TokenState,
}

/// The orchestrator's tokens.
#[derive(Default)]
pub(crate) struct TokenBook {
    entries: Vec<Entry>,
}

/// What an agent claims in its `Join`.
pub(crate) struct Claim<'a> {
    pub token: &'a str,
    pub node: &'a LogicalNodeId,
    pub run: Option<RunId>,
    pub lease: Option<&'a LeaseId>,
}

impl TokenBook {
    /// Mints a fresh token for `binding`; an older pending token of the same
    /// binding is revoked (one live token per binding).
    pub fn mint(&mut self, binding: JoinBinding) -> String {
        let mut secret = [0u8; TOKEN_BYTES];
        rand::rngs::SysRng
            .try_fill_bytes(&mut secret)
            .expect("the OS random source failed; no safe token can be minted");
        self.revoke(&binding);
        self.make_room();
        self.entries.push(Entry {
            secret,
            binding,
            state: TokenState::Pending,
        });
        assert!(self.entries.len() <= TOKEN_ENTRIES_MAX);
        to_hex(&secret)
    }

    /// Revokes the pending token of `binding`, if any.
    pub fn revoke(&mut self, binding: &JoinBinding) {
        for entry in &mut self.entries {
            if entry.state == TokenState::Pending && entry.binding == *binding {
                entry.state = TokenState::Revoked;
            }
        }
    }

    /// Redeems a token: the binding it was minted for, or why not. Only a
    /// pending token whose binding matches the claim is consumed.
    pub fn redeem(&mut self, claim: &Claim<'_>) -> Result<JoinBinding, RejectReason> {
        let secret = from_hex(claim.token).ok_or(RejectReason::UnknownToken)?;
        let mut found = None;
        for (index, entry) in self.entries.iter().enumerate() {
            // Every entry is compared in full; no early exit on a match.
            if constant_time_eq(&entry.secret, &secret) {
                found = Some(index);
            }
        }
        let entry = &mut self.entries[found.ok_or(RejectReason::UnknownToken)?];
        match entry.state {
            TokenState::Used => return Err(RejectReason::TokenReplayed),
            TokenState::Revoked => return Err(RejectReason::TokenRevoked),
            TokenState::Pending => {}
        }
        let binding = &entry.binding;
        let run_ok = claim.run.is_none_or(|run| run == binding.run_id);
        let lease_ok = claim.lease.is_none_or(|lease| *lease == binding.lease_id);
        if *claim.node != binding.node || !run_ok || !lease_ok {
            return Err(RejectReason::BindingMismatch {
                node: claim.node.clone(),
            });
        }
        entry.state = TokenState::Used;
        Ok(entry.binding.clone())
    }

    /// Pending tokens (for tests and status).
    pub fn pending(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.state == TokenState::Pending)
            .count()
    }

    fn make_room(&mut self) {
        if self.entries.len() < TOKEN_ENTRIES_MAX {
            return;
        }
        let victim = self
            .entries
            .iter()
            .position(|e| e.state != TokenState::Pending)
            .unwrap_or(0);
        self.entries.remove(victim);
    }
}

fn constant_time_eq(a: &[u8; TOKEN_BYTES], b: &[u8; TOKEN_BYTES]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<[u8; TOKEN_BYTES]> {
    let text = text.as_bytes();
    if text.len() != TOKEN_BYTES * 2 {
        return None;
    }
    let mut out = [0u8; TOKEN_BYTES];
    for (slot, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *slot = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(node: &str) -> JoinBinding {
        JoinBinding {
            run_id: RunId(1),
            node: LogicalNodeId::from(node),
            lease_id: LeaseId::from("local:1"),
        }
    }

    fn claim<'a>(token: &'a str, node: &'a LogicalNodeId) -> Claim<'a> {
        Claim {
            token,
            node,
            run: None,
            lease: None,
        }
    }

    #[test]
    fn one_time_and_bound() {
        let mut book = TokenBook::default();
        let token = book.mint(binding("w-0"));
        assert_eq!(token.len(), 64);
        let other = LogicalNodeId::from("w-1");
        assert!(matches!(
            book.redeem(&claim(&token, &other)),
            Err(RejectReason::BindingMismatch { .. })
        ));
        let node = LogicalNodeId::from("w-0");
        assert_eq!(book.redeem(&claim(&token, &node)).unwrap(), binding("w-0"));
        assert_eq!(
            book.redeem(&claim(&token, &node)),
            Err(RejectReason::TokenReplayed)
        );
        assert_eq!(
            book.redeem(&claim("nope", &node)),
            Err(RejectReason::UnknownToken)
        );
    }

    #[test]
    fn reminting_revokes_the_older_token() {
        let mut book = TokenBook::default();
        let first = book.mint(binding("w-0"));
        let second = book.mint(binding("w-0"));
        assert_ne!(first, second);
        let node = LogicalNodeId::from("w-0");
        assert_eq!(
            book.redeem(&claim(&first, &node)),
            Err(RejectReason::TokenRevoked)
        );
        assert!(book.redeem(&claim(&second, &node)).is_ok());
        assert_eq!(book.pending(), 0);
    }

    #[test]
    fn the_book_is_bounded() {
        let mut book = TokenBook::default();
        for i in 0..TOKEN_ENTRIES_MAX + 10 {
            book.mint(binding(&format!("w-{i}")));
        }
        assert_eq!(book.entries.len(), TOKEN_ENTRIES_MAX);
    }
}
