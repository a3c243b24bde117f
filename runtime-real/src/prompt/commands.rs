//! `drover prompt` and `drover chat`: the prompt service's clients. Both
//! find the service's address in the state dir and keep one connection for
//! all their prompts.

use super::{Client, ServerMsg, read_addr};
use crate::exit::{EXIT_FAILURE, EXIT_OK};
use crate::state_dir::StateDir;
use std::io::{IsTerminal, Write};
use std::path::Path;
use tokio::io::AsyncBufReadExt;

/// Runs `drover prompt TEXT`: streams the completion of request 1 to
/// stdout (with `--json`, each server line as received); returns 0 when it
/// is done, 1 on a fault or a lost connection.
pub async fn prompt(state_dir: &Path, text: &str, max_tokens: Option<u32>, json: bool) -> i32 {
    let max_tokens = max_tokens.or_else(|| default_max_tokens(state_dir));
    let mut client = match connect(state_dir).await {
        Ok(client) => client,
        Err(e) => {
            crate::stdout::eline!("drover: {e}");
            return EXIT_FAILURE;
        }
    };
    match ask(&mut client, 1, text, max_tokens, json).await {
        // A reader that stopped reading (`| head`) wanted no more.
        Ok(Answer::Done | Answer::ReaderGone) => EXIT_OK,
        Ok(Answer::Fault(reason)) | Err(reason) => {
            crate::stdout::eline!("drover: prompt failed: {reason}");
            EXIT_FAILURE
        }
    }
}

/// Runs `drover chat`: each line of stdin is a prompt (request ids 1, 2,
/// ...), its answer streamed like `drover prompt`'s; the end of stdin ends
/// it. Returns 0, or 1 when a prompt failed or the connection was lost.
pub async fn chat(state_dir: &Path, max_tokens: Option<u32>, json: bool) -> i32 {
    let max_tokens = max_tokens.or_else(|| default_max_tokens(state_dir));
    let mut client = match connect(state_dir).await {
        Ok(client) => client,
        Err(e) => {
            crate::stdout::eline!("drover: {e}");
            return EXIT_FAILURE;
        }
    };
    let interactive = std::io::stdin().is_terminal();
    let mut input = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut request_id = 0u64;
    let mut failed = false;
    loop {
        if interactive {
            eprint!("> ");
            let _ = std::io::stderr().flush();
        }
        let line = match input.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                crate::stdout::eline!("drover: chat: reading stdin: {e}");
                return EXIT_FAILURE;
            }
        };
        // An empty line asks nothing (the run would refuse it).
        if line.trim().is_empty() {
            continue;
        }
        request_id += 1;
        match ask(&mut client, request_id, &line, max_tokens, json).await {
            Ok(Answer::Done) => {}
            Ok(Answer::ReaderGone) => return if failed { EXIT_FAILURE } else { EXIT_OK },
            Ok(Answer::Fault(reason)) => {
                crate::stdout::eline!("drover: prompt failed: {reason}");
                failed = true;
            }
            Err(reason) => {
                crate::stdout::eline!("drover: prompt failed: {reason}");
                return EXIT_FAILURE;
            }
        }
    }
    if interactive {
        crate::stdout::eline!("");
    }
    if failed { EXIT_FAILURE } else { EXIT_OK }
}

/// Connects to the service whose address the state dir holds.
async fn connect(state_dir: &Path) -> Result<Client, String> {
    let addr = read_addr(state_dir)?;
    Client::connect(addr).await.map_err(|e| {
        let file = StateDir::at(state_dir).prompt_addr();
        format!(
            "{e} (the address is from {}: is `drover up` still serving?)",
            file.display()
        )
    })
}

/// How a request ended.
enum Answer {
    /// `Done`.
    Done,
    /// `Fault`, with its reason.
    Fault(String),
    /// Stdout's reader closed it (a pipe into `head`): the answer is left
    /// unread, and the connection with it.
    ReaderGone,
}

/// What a failed write to stdout means: its reader is gone, or an error
/// for a person.
fn stdout_failed(e: std::io::Error) -> Result<Answer, String> {
    if crate::stdout::reader_gone(&e) {
        Ok(Answer::ReaderGone)
    } else {
        Err(format!("writing stdout: {e}"))
    }
}

/// Submits one prompt and streams its answer to stdout until its terminal
/// event. The error is for a person: the connection broke, or stdout.
async fn ask(
    client: &mut Client,
    request_id: u64,
    text: &str,
    max_tokens: Option<u32>,
    json: bool,
) -> Result<Answer, String> {
    client
        .submit(request_id, text, max_tokens)
        .await
        .map_err(|e| e.to_string())?;
    // Whether the last text written leaves the line open.
    let mut open_line = false;
    loop {
        let Some((line, message)) = client.next_line().await.map_err(|e| e.to_string())? else {
            return Err(format!(
                "the prompt service at {} closed the connection before request \
                 {request_id} ended",
                client.addr()
            ));
        };
        if json && let Err(e) = crate::stdout::line(&line) {
            return stdout_failed(e);
        }
        let answer = match message {
            ServerMsg::TextDelta {
                request_id: id,
                text,
            } if id == request_id => {
                if !json && !text.is_empty() {
                    if let Err(e) = crate::stdout::text(&text) {
                        return stdout_failed(e);
                    }
                    open_line = !text.ends_with('\n');
                }
                continue;
            }
            ServerMsg::Done { request_id: id, .. } if id == request_id => Answer::Done,
            ServerMsg::Fault {
                request_id: id,
                reason,
            } if id == request_id => Answer::Fault(reason),
            ServerMsg::ProtocolError { reason } => {
                return Err(format!("the prompt service refused it: {reason}"));
            }
            // Another request's events or `ShuttingDown` are not this
            // request's answer.
            _ => continue,
        };
        let ends_line = matches!(answer, Answer::Done) || open_line;
        if !json
            && ends_line
            && let Err(e) = crate::stdout::line("")
        {
            return stdout_failed(e).map(|gone| match gone {
                // The answer ended whole; only its newline was not read.
                Answer::ReaderGone => answer,
                other => other,
            });
        }
        return Ok(answer);
    }
}

/// The plan's `[prompt] default_max_tokens`, as the running pipeline
/// states it in `<state>/pipeline.json` (0 or absent: no cap).
fn default_max_tokens(state_dir: &Path) -> Option<u32> {
    let path = crate::state_dir::StateDir::at(state_dir).pipeline_status();
    let text = std::fs::read(path).ok()?;
    let status: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let n = status.get("default_max_tokens")?.as_u64()?;
    u32::try_from(n).ok().filter(|n| *n > 0)
}
