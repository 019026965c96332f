//! The way a finished span leaves the process: a bounded queue and one task that posts batches
//! to the collector.
//!
//! A call never waits for the collector. Ending a span is a `try_send` into a queue of
//! [`QUEUE`] spans; a full queue drops the span. The exporter task takes up to [`BATCH`] spans
//! at a time (or what came within the batch delay) and posts them with a deadline; a batch the
//! collector does not take is dropped, not retried, so a collector that is down costs the
//! process a failed request per batch and nothing more. Every span is counted in `/metrics`
//! (`toolgate_trace_spans_total{result}`), exported or dropped and why.

use std::fmt;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::{mpsc, oneshot};

/// Spans waiting to be exported, at most (`OTEL_BSP_MAX_QUEUE_SIZE` overrides it).
const QUEUE: usize = 4096;
/// Spans per export request, at most (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
const BATCH: usize = 512;
/// How long the first span of a batch waits for others (`OTEL_BSP_SCHEDULE_DELAY`, in ms).
const DELAY: Duration = Duration::from_secs(1);
/// How long an export may take before its spans are given up (`OTEL_BSP_EXPORT_TIMEOUT`).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The batch settings, from the standard `OTEL_BSP_*` variables where set.
#[derive(Debug, Clone, Copy)]
pub(super) struct Batching {
    queue: usize,
    batch: usize,
    delay: Duration,
    timeout: Duration,
}

impl Batching {
    pub(super) fn from_env(env: impl Fn(&str) -> Option<String>) -> Self {
        let number = |name: &str| env(name).and_then(|v| v.trim().parse::<u64>().ok());
        Batching {
            queue: number("OTEL_BSP_MAX_QUEUE_SIZE")
                .map_or(QUEUE, |n| n.clamp(1, 1 << 20) as usize),
            batch: number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
                .map_or(BATCH, |n| n.clamp(1, 1 << 16) as usize),
            delay: number("OTEL_BSP_SCHEDULE_DELAY").map_or(DELAY, Duration::from_millis),
            timeout: number("OTEL_BSP_EXPORT_TIMEOUT")
                .map_or(EXPORT_TIMEOUT, Duration::from_millis),
        }
    }
}

enum Message {
    Span(Box<SpanData>),
    /// Export everything queued before it, then answer.
    Flush(oneshot::Sender<()>),
}

/// The tracer provider's span processor: hands sampled spans to the exporter task.
pub(super) struct QueueProcessor {
    queue: mpsc::Sender<Message>,
}

impl fmt::Debug for QueueProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueProcessor").finish_non_exhaustive()
    }
}

/// Flushes what the exporter task holds; see [`QueueProcessor::flusher`].
#[derive(Clone)]
pub(super) struct Flusher {
    queue: mpsc::Sender<Message>,
}

impl Flusher {
    /// Exports every span ended before now, waiting at most `within`.
    pub(super) async fn flush(&self, within: Duration) {
        let (done, answered) = oneshot::channel();
        if self.queue.send(Message::Flush(done)).await.is_ok() {
            let _ = tokio::time::timeout(within, answered).await;
        }
    }
}

impl QueueProcessor {
    /// Starts the exporter task (on the current tokio runtime) and returns its processor.
    pub(super) fn start<E>(exporter: E, batching: Batching, endpoint: String) -> Self
    where
        E: SpanExporter + 'static,
    {
        let (queue, spans) = mpsc::channel(batching.queue);
        tokio::spawn(run(exporter, spans, batching, endpoint));
        QueueProcessor { queue }
    }

    pub(super) fn flusher(&self) -> Flusher {
        Flusher {
            queue: self.queue.clone(),
        }
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.queue.try_send(Message::Span(Box::new(span))).is_err() {
            crate::metrics::trace_spans("dropped_queue_full", 1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The exporter task: batches, posts, counts; ends when every processor is gone.
async fn run<E: SpanExporter>(
    exporter: E,
    mut spans: mpsc::Receiver<Message>,
    batching: Batching,
    endpoint: String,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(batching.batch);
    let mut failing = false;
    loop {
        let mut flushed = None;
        match spans.recv().await {
            None => return,
            Some(Message::Span(span)) => batch.push(*span),
            Some(Message::Flush(done)) => flushed = Some(done),
        }
        if flushed.is_none() {
            let deadline = tokio::time::Instant::now() + batching.delay;
            while batch.len() < batching.batch {
                tokio::select! {
                    message = spans.recv() => match message {
                        Some(Message::Span(span)) => batch.push(*span),
                        Some(Message::Flush(done)) => { flushed = Some(done); break; }
                        None => break,
                    },
                    () = tokio::time::sleep_until(deadline) => break,
                }
            }
        }
        if !batch.is_empty() {
            let count = batch.len() as u64;
            let sent = tokio::time::timeout(
                batching.timeout,
                exporter.export(std::mem::take(&mut batch)),
            )
            .await
            .map_err(|_| "the collector did not answer in time".to_owned())
            .and_then(|result| result.map_err(|e| e.to_string()));
            match sent {
                Ok(()) => {
                    crate::metrics::trace_spans("exported", count);
                    if failing {
                        tracing::info!(endpoint, "the trace collector takes spans again");
                        failing = false;
                    }
                }
                Err(err) => {
                    crate::metrics::trace_spans("dropped_export_failed", count);
                    if !failing {
                        tracing::warn!(
                            endpoint,
                            error = %err,
                            "cannot export spans: dropping them until the collector takes them"
                        );
                        failing = true;
                    }
                }
            }
        }
        if let Some(done) = flushed {
            let _ = done.send(());
        }
    }
}
