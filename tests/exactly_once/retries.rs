//! Live failures retried by effect: a read and an idempotent tool run again, a write never.

use super::*;

/// Fails its first `failures` attempts (permanently if told), then echoes its attempt.
#[derive(Tool)]
#[tool(effect = "read")]
struct FlakyRead {
    runs: Arc<AtomicUsize>,
    failures: usize,
    permanent: bool,
}

/// Fails its first attempt, then succeeds; records the keys it ran under.
#[derive(Tool)]
#[tool(effect = "idempotent")]
struct FlakyIdempotent {
    runs: Arc<AtomicUsize>,
    keys: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

/// Always fails.
#[derive(Tool)]
#[tool(effect = "write")]
struct FlakyWrite {
    runs: Arc<AtomicUsize>,
}

#[toolgate::async_trait]
impl ToolHandler for FlakyRead {
    type Input = Nothing;
    type Output = Value;
    async fn call(&self, ctx: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Value>, HandlerError> {
        if self.runs.fetch_add(1, Ordering::SeqCst) < self.failures {
            let error = HandlerError::message("upstream hiccup");
            return Err(if self.permanent {
                error.permanent()
            } else {
                error
            });
        }
        Ok(ToolOutcome::output(json!({"attempt": ctx.attempt()})))
    }
}

#[toolgate::async_trait]
impl ToolHandler for FlakyIdempotent {
    type Input = Nothing;
    type Output = Value;
    async fn call(&self, ctx: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Value>, HandlerError> {
        self.keys
            .lock()
            .unwrap()
            .push(ctx.idempotency_key().map(str::to_owned));
        if self.runs.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(HandlerError::message("timeout talking to the provider"));
        }
        Ok(ToolOutcome::output(json!("done")))
    }
    fn idempotency_key(&self, _: &Nothing) -> Option<String> {
        Some("provision:42".into())
    }
}

#[toolgate::async_trait]
impl ToolHandler for FlakyWrite {
    type Input = Nothing;
    type Output = Value;
    async fn call(&self, _: &ToolCtx, _: Nothing) -> Result<ToolOutcome<Value>, HandlerError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Err(HandlerError::message("the bank said no"))
    }
}

async fn live_failures_are_retried_by_effect(backend: Backend) {
    let location = Location::new(backend).await;
    let counters: Vec<Arc<AtomicUsize>> = (0..4).map(|_| Arc::default()).collect();
    let keys = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tools = ToolSet::new();
    tools
        .register(FlakyRead {
            runs: counters[0].clone(),
            failures: 2,
            permanent: false,
        })
        .unwrap()
        .register(FlakyIdempotent {
            runs: counters[1].clone(),
            keys: keys.clone(),
        })
        .unwrap()
        .register(FlakyWrite {
            runs: counters[2].clone(),
        })
        .unwrap();
    let server = serve(tools, &location, quick_retries()).await;
    let api = &server.api;

    // A read retries until it succeeds; `attempts` counts every run.
    let (status, body) = api.call("flaky_read", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"]["attempt"], 3);
    assert_eq!(counters[0].load(Ordering::SeqCst), 3);
    let (_, record) = api
        .get(&format!("/calls/{}", body["call_id"].as_str().unwrap()))
        .await;
    assert_eq!(record["attempts"], 3);

    // An idempotent tool retries with the same key.
    let (status, _) = api.call("flaky_idempotent", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys, vec![Some("provision:42".to_owned()); 2]);

    // A write never retries: its effect may have happened.
    let (status, body) = api.call("flaky_write", json!({})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["status"], "failed");
    assert_error(&body, "tool_failed");
    assert_eq!(counters[2].load(Ordering::SeqCst), 1);
    server.stop().await;

    // A permanent failure is never retried, even for a read.
    let location = Location::new(backend).await;
    let mut tools = ToolSet::new();
    tools
        .register(FlakyRead {
            runs: counters[3].clone(),
            failures: 5,
            permanent: true,
        })
        .unwrap();
    let server = serve(tools, &location, quick_retries()).await;
    let (status, body) = server.api.call("flaky_read", json!({})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["error"]["message"], "upstream hiccup");
    assert_eq!(counters[3].load(Ordering::SeqCst), 1);
    server.stop().await;
}

crate::on_each_backend! {
    #[tokio::test] async fn live_failures_are_retried_by_effect;
}
