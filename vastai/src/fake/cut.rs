//! F5, cut: an answer lost on the wire. The status line, the headers and the
//! start of the JSON reach the client, then the connection breaks before the
//! promised `Content-Length` is met, as when a proxy or the network drops
//! the connection mid-answer. The client sees the loss at once (an
//! incomplete body), never a hang, in debug and release builds alike.

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body::Frame;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The length the headers promise: far more than is ever sent.
const PROMISED_LEN: &str = "4096";

/// The part of the answer that is sent before the break.
const SENT_PREFIX: &[u8] = b"{\"success\": true, \"new_con";

/// A body that yields a prefix, lets the server flush it, then fails. Its
/// length is unknown to hyper, so hyper frames it by the `Content-Length`
/// header, and the failure makes hyper close the connection (it cannot end a
/// fixed-length body early); a body of known, shorter length would instead
/// contradict the header (an assertion in debug builds, a client left
/// waiting for the rest in release builds).
enum CutBody {
    /// The prefix is still to be sent.
    Prefix,
    /// The prefix went out; one `Pending` lets hyper flush it.
    Flushing,
    /// The break.
    Broken,
}

impl http_body::Body for CutBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match *self {
            CutBody::Prefix => {
                *self = CutBody::Flushing;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(SENT_PREFIX)))))
            }
            CutBody::Flushing => {
                // hyper writes what it has before it polls the body again.
                *self = CutBody::Broken;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            CutBody::Broken => Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "fake F5: the create's answer is cut",
            )))),
        }
    }
}

/// A 200 answer to a committed create whose body breaks part-way.
pub(crate) fn cut_answer() -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CONTENT_LENGTH, PROMISED_LEN),
        ],
        Body::new(CutBody::Prefix),
    )
        .into_response()
}
