//! An instance's log (Vast.ai's `request_logs`, §A.9) as datastream lines:
//! the text cut into lines, every line passed through the API key's
//! redaction and the `token=` mask first, a line longer than 16 KiB cut
//! there (and saying so), like a Docker container's output.

use core_fsm::port::LogStream;
use vastai::ApiKey;

/// How many of the log's last lines are asked for.
pub const TAIL_LINES: u32 = 1000;
/// The longest line kept; the rest of a longer one is cut.
const LINE_MAX: usize = 16 * 1024;

/// The log's lines, oldest first, on stdout (Vast.ai hands out one text).
pub fn lines(text: &str, key: &ApiKey) -> Vec<(LogStream, Vec<u8>)> {
    let all: Vec<&str> = text.lines().collect();
    // The server keeps to the tail asked for; a longer answer is cut here.
    let skip = all.len().saturating_sub(TAIL_LINES as usize);
    all[skip..]
        .iter()
        .map(|line| {
            let clean = crate::say::mask(&key.redact(line));
            (LogStream::Stdout, cut(clean).into_bytes())
        })
        .collect()
}

fn cut(mut line: String) -> String {
    if line.len() > LINE_MAX {
        let mut end = LINE_MAX;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str(" [cut]");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_lose_the_key_and_tokens_and_long_ones_are_cut() {
        let key = ApiKey::new("vk-unit-secret");
        let text = "booting\r\nenv VAST=vk-unit-secret\ncurl ?api_key=abc&x=1 token=t0k\n";
        let got: Vec<String> = lines(text, &key)
            .into_iter()
            .map(|(stream, bytes)| {
                assert_eq!(stream, LogStream::Stdout);
                String::from_utf8(bytes).unwrap()
            })
            .collect();
        assert_eq!(
            got,
            [
                "booting",
                "env VAST=***",
                "curl ?api_key=***&x=1 token=<masked>"
            ]
        );
        let long = "é".repeat(LINE_MAX);
        let (_, bytes) = &lines(&long, &key)[0];
        assert!(bytes.len() <= LINE_MAX + 6 && bytes.ends_with(b" [cut]"));
    }
}
