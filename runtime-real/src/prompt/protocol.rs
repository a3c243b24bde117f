//! The prompt RPC's messages: newline-delimited JSON, one object a line,
//! serde's externally tagged enums (seed 004 §2.5, §7.8).
//!
//! ```text
//! client: {"SubmitPrompt":{"request_id":1,"prompt_text":"Once upon a time","max_tokens":64}}
//!         {"Shutdown":{}}          (or the bare string "Shutdown")
//! server: {"TextDelta":{"request_id":1,"text":" there"}}      zero or more, then one of
//!         {"Done":{"request_id":1,"tokens":12,"reason":"eos"}}
//!         {"Fault":{"request_id":1,"reason":"..."}}
//!         {"ProtocolError":{"reason":"line 3, column 1: ..."}}  then the server closes
//!         {"ShuttingDown":{}}      the answer to Shutdown
//! ```

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The longest line either side accepts, without its newline (1 MiB).
pub const LINE_BYTES_MAX: usize = 1 << 20;

/// What a client sends.
///
/// `Deserialize` is written by hand so that `Shutdown` may come as
/// `{"Shutdown":{}}` or as the bare string `"Shutdown"`; errors keep serde's
/// messages and positions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ClientMsg {
    /// A prompt to complete.
    SubmitPrompt {
        /// The client's id for it, echoed in every answer.
        request_id: u64,
        /// The text to complete.
        prompt_text: String,
        /// The most tokens to generate; absent, null or 0: no cap (the end of
        /// sequence or the context ends it). See [`ClientMsg::cap`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
    },
    /// Asks the run to stop in order.
    Shutdown {},
}

impl ClientMsg {
    /// The cap a `max_tokens` field means: `None` for absent, null or 0.
    pub fn cap(max_tokens: Option<u32>) -> Option<u32> {
        max_tokens.filter(|&n| n > 0)
    }
}

/// What the server sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerMsg {
    /// More text of a request's completion.
    TextDelta {
        /// The request.
        request_id: u64,
        /// The text, to append to what came before.
        text: String,
    },
    /// The request finished (terminal).
    Done {
        /// The request.
        request_id: u64,
        /// Tokens generated.
        tokens: u64,
        /// Why it stopped.
        reason: DoneReason,
    },
    /// The request ended without finishing (terminal).
    Fault {
        /// The request.
        request_id: u64,
        /// Why, for a person.
        reason: String,
    },
    /// The connection broke the protocol; the server closes it after this.
    ProtocolError {
        /// What was wrong, starting with the line number on the connection.
        reason: String,
    },
    /// The answer to a `Shutdown` request: the run is stopping.
    ShuttingDown {},
}

impl ServerMsg {
    /// Whether this ends its request (`Done` or `Fault`).
    pub fn is_terminal(&self) -> bool {
        matches!(self, ServerMsg::Done { .. } | ServerMsg::Fault { .. })
    }

    /// The message as one line of the protocol, newline included.
    pub fn to_line(&self) -> String {
        to_line(self)
    }
}

/// Why a request finished, on the wire in snake case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DoneReason {
    /// The model produced its end-of-sequence token.
    Eos,
    /// `max_tokens` tokens were produced.
    MaxTokens,
    /// The model's context is full.
    Context,
}

impl From<core_fsm::run::DoneReason> for DoneReason {
    fn from(reason: core_fsm::run::DoneReason) -> DoneReason {
        match reason {
            core_fsm::run::DoneReason::Eos => DoneReason::Eos,
            core_fsm::run::DoneReason::MaxTokens => DoneReason::MaxTokens,
            core_fsm::run::DoneReason::Context => DoneReason::Context,
        }
    }
}

/// `message` as one protocol line, newline included. Serializing these
/// types cannot fail (string keys, no maps of other keys).
pub fn to_line<T: Serialize>(message: &T) -> String {
    let mut line = serde_json::to_string(message).unwrap_or_else(|e| {
        serde_json::json!({ "ProtocolError": { "reason": e.to_string() } }).to_string()
    });
    line.push('\n');
    line
}

/// Parses line `line_number` of a connection into a client message; the
/// error is for a `ProtocolError`: `line N, column C: serde's message`.
pub fn parse_client_line(line_number: u64, text: &str) -> Result<ClientMsg, String> {
    serde_json::from_str(text).map_err(|e| located(line_number, &e))
}

/// `e`'s message, placed by the connection's line and serde's column. Each
/// protocol line is one JSON document, so serde's own line is always 1.
pub fn located(line_number: u64, e: &serde_json::Error) -> String {
    let message = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match message.strip_suffix(&position) {
        Some(bare) if e.column() > 0 => {
            format!("line {line_number}, column {}: {bare}", e.column())
        }
        _ => format!("line {line_number}: {message}"),
    }
}

/// The variant names, for serde's "expected" list.
const CLIENT_VARIANTS: &[&str] = &["SubmitPrompt", "Shutdown"];

/// The body of `SubmitPrompt`, as derived.
#[derive(Deserialize)]
struct SubmitBody {
    request_id: u64,
    prompt_text: String,
    #[serde(default)]
    max_tokens: Option<u32>,
}

/// The body of `Shutdown`: an object, its fields ignored, or null.
#[derive(Deserialize)]
struct ShutdownBody {}

impl<'de> Deserialize<'de> for ClientMsg {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ClientMsg, D::Error> {
        deserializer.deserialize_any(ClientVisitor)
    }
}

struct ClientVisitor;

impl<'de> Visitor<'de> for ClientVisitor {
    type Value = ClientMsg;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a client message: {\"SubmitPrompt\":{..}}, {\"Shutdown\":{}} or \"Shutdown\"")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<ClientMsg, E> {
        match name {
            "Shutdown" => Ok(ClientMsg::Shutdown {}),
            "SubmitPrompt" => Err(E::custom("SubmitPrompt needs its fields")),
            other => Err(E::unknown_variant(other, CLIENT_VARIANTS)),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ClientMsg, A::Error> {
        let Some(name) = map.next_key::<String>()? else {
            return Err(de::Error::invalid_length(0, &self));
        };
        let message = match name.as_str() {
            "SubmitPrompt" => {
                let body: SubmitBody = map.next_value()?;
                ClientMsg::SubmitPrompt {
                    request_id: body.request_id,
                    prompt_text: body.prompt_text,
                    max_tokens: body.max_tokens,
                }
            }
            "Shutdown" => {
                let _: Option<ShutdownBody> = map.next_value()?;
                ClientMsg::Shutdown {}
            }
            other => return Err(de::Error::unknown_variant(other, CLIENT_VARIANTS)),
        };
        if let Some(extra) = map.next_key::<String>()? {
            return Err(de::Error::custom(format!(
                "one message per line: `{extra}` follows `{name}` in the same object"
            )));
        }
        Ok(message)
    }
}
