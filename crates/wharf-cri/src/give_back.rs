//! Giving back what a large answer allocated, as the answer ends.
//!
//! A listing or stats call over a hundred pods builds megabytes of messages (ListPodSandbox-
//! Metrics: 3 MB of Rust values for 100 pods), which malloc keeps once they are freed. The
//! idle trim (`idle.rs`) gives them back half a second after the last call; kubelet's
//! stats and metrics scrapes come seconds apart, so until then the daemon's RSS held a
//! burst's worth of freed memory. Here, a response whose body carried at least
//! [`LARGE`] bytes trims malloc when its last frame (gRPC's trailers) is polled: after the
//! message was encoded and dropped, before the trailers go out, so the caller sees the
//! call end with the memory already given back. A trim costs well under a millisecond,
//! against the tens of milliseconds such a call takes.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::TryFutureExt;
use futures_util::future::MapOk;
use http_body::{Body, Frame, SizeHint};
use tonic::codegen::{Service, http};

/// The smallest answer worth a trim: 64 kB of encoded messages, some hundreds of kB of
/// values before encoding.
pub const LARGE: usize = 64 << 10;

/// Wraps the gRPC routes: every response body is counted.
#[derive(Clone)]
pub struct GiveBack<S>(pub S);

impl<S, Req, B> Service<Req> for GiveBack<S>
where
    S: Service<Req, Response = http::Response<B>>,
{
    type Response = http::Response<Counted<B>>;
    type Error = S::Error;
    type Future = MapOk<S::Future, fn(http::Response<B>) -> http::Response<Counted<B>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.0.call(req).map_ok(|r| r.map(Counted::new))
    }
}

/// A response body that trims malloc as it ends if it carried [`LARGE`] bytes or more.
pub struct Counted<B> {
    inner: B,
    sent: usize,
    ended: bool,
}

impl<B> Counted<B> {
    fn new(inner: B) -> Self {
        Counted {
            inner,
            sent: 0,
            ended: false,
        }
    }

    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            if self.sent >= LARGE {
                crate::idle::trim_malloc();
            }
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => match frame.data_ref() {
                Some(data) => this.sent += data.len(),
                None => this.end(),
            },
            Poll::Ready(_) => this.end(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    /// A gRPC-like body: data frames of the given sizes, then trailers.
    fn body(sizes: &[usize]) -> impl Body<Data = Bytes, Error = std::convert::Infallible> + Unpin {
        let mut frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = sizes
            .iter()
            .map(|&n| Ok(Frame::data(Bytes::from(vec![0u8; n]))))
            .collect();
        frames.push(Ok(Frame::trailers(http::HeaderMap::new())));
        StreamBody::new(futures_util::stream::iter(frames))
    }

    async fn drain(mut b: Counted<impl Body<Data = Bytes> + Unpin>) -> Counted<impl Body> {
        while b.frame().await.is_some() {}
        b
    }

    #[tokio::test]
    async fn a_large_answer_trims_as_its_trailers_go_and_a_small_one_does_not() {
        // Other tests of this binary may trim too: only a missing trim is told apart.
        let before = crate::idle::malloc_trims();
        let large = drain(Counted::new(body(&[LARGE / 2, LARGE / 2]))).await;
        assert_eq!(large.sent, LARGE);
        assert!(large.ended);
        assert!(
            crate::idle::malloc_trims() > before,
            "no trim after {LARGE} bytes"
        );

        let small = drain(Counted::new(body(&[100]))).await;
        assert_eq!(small.sent, 100);
        assert!(small.ended);
    }

    #[tokio::test]
    async fn the_trim_comes_before_the_trailers_reach_the_caller() {
        let mut b = Counted::new(body(&[LARGE]));
        let data = b.frame().await.unwrap().unwrap();
        assert!(data.is_data() && !b.ended);
        let trailers = b.frame().await.unwrap().unwrap();
        // The trailers frame is handed on only after end() ran.
        assert!(trailers.is_trailers() && b.ended);
    }
}
