//! Pins of upstream tools: an upstream's first connection is one however many processes make
//! it at once (the tools it lists pinned once, never replaced by a later listing), a tool new
//! afterwards is pinned only when asked, and an accept replaces a pin. A change is told in the
//! feed once however many tell it at once, never against a pin replaced since, and again
//! only once accepted.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate::store::{FeedSubject, NewTools, Store, Timestamp, ToolChangeNote, ToolPin};

fn pin(tool: &str, hash: &str) -> ToolPin {
    ToolPin {
        upstream: "files".to_owned(),
        tool: tool.to_owned(),
        hash: hash.to_owned(),
        definition: format!("{{\"name\":\"{tool}\"}}"),
        pinned_at: Timestamp::now(),
        pinned_by: None,
        accepted: false,
    }
}

fn hashes(pins: &[ToolPin]) -> Vec<(&str, &str)> {
    pins.iter()
        .map(|pin| (pin.tool.as_str(), pin.hash.as_str()))
        .collect()
}

/// Every pin of `upstream`, as a connection that lists nothing and pins nothing reads them.
async fn all_pins(store: &dyn Store, upstream: &str) -> Vec<ToolPin> {
    store
        .pins_on_connect(upstream, Vec::new(), NewTools::Hold)
        .await
        .unwrap()
}

pub(crate) async fn an_upstreams_first_connection_pins_once(store: Arc<dyn Store>) {
    // Eight connections at once through one store (tasks, not processes: its writer orders
    // them), each listing its own hash of `echo`: one of them is the first, and every one reads
    // its pin back.
    let connecting = (0..8).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            let listed = vec![pin("echo", &format!("h{i}"))];
            store
                .pins_on_connect("files", listed, NewTools::PinFirst)
                .await
                .unwrap()
        })
    });
    let answers: Vec<Vec<ToolPin>> = futures_util::future::join_all(connecting)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let first = hashes(&answers[0]);
    assert_eq!(first.len(), 1, "{first:?}");
    for answer in &answers {
        assert_eq!(hashes(answer), first, "every process reads the one pin");
    }

    // Afterwards a changed tool keeps its pin, and a new one is pinned only when asked.
    let listed = vec![pin("echo", "changed"), pin("extra", "x1")];
    let pins = store
        .pins_on_connect("files", listed.clone(), NewTools::PinFirst)
        .await
        .unwrap();
    assert_eq!(
        hashes(&pins),
        first,
        "nothing new pinned after the first connection"
    );
    let pins = store
        .pins_on_connect("files", listed.clone(), NewTools::Hold)
        .await
        .unwrap();
    assert_eq!(hashes(&pins), first);
    let pins = store
        .pins_on_connect("files", listed, NewTools::Pin)
        .await
        .unwrap();
    assert_eq!(
        hashes(&pins),
        [first[0], ("extra", "x1")],
        "pinned when asked"
    );

    // An accept replaces the pin, with who accepted it.
    let accepted = ToolPin {
        pinned_by: Some("admin".to_owned()),
        accepted: true,
        ..pin("echo", "changed")
    };
    store.accept_pin(&accepted, "{}").await.unwrap();
    let pins = all_pins(&*store, "files").await;
    assert_eq!(hashes(&pins), [("echo", "changed"), ("extra", "x1")]);
    assert_eq!(pins[0], accepted);

    // Another upstream's first connection is its own; with `hold`, it pins nothing.
    let other = ToolPin {
        upstream: "web".to_owned(),
        ..pin("echo", "w")
    };
    let pins = store
        .pins_on_connect("web", vec![other], NewTools::Hold)
        .await
        .unwrap();
    assert!(pins.is_empty(), "{pins:?}");
    assert!(all_pins(&*store, "nowhere").await.is_empty());
}

fn note(tool: &str, pinned_hash: Option<&str>, hash: &str) -> ToolChangeNote {
    ToolChangeNote {
        tool: tool.to_owned(),
        pinned_hash: pinned_hash.map(str::to_owned),
        hash: hash.to_owned(),
        detail: json!({"tool": tool, "hash": hash}).to_string(),
    }
}

/// The feed's entries of upstream tools: type, upstream, change.
async fn told(store: &dyn Store) -> Vec<(String, String, Value)> {
    let page = store.feed(None, 100).await.unwrap();
    page.entries
        .into_iter()
        .filter_map(|entry| match entry.subject {
            FeedSubject::Upstream { upstream, change } => Some((entry.kind, upstream, change)),
            FeedSubject::Call(_) => None,
        })
        .collect()
}

pub(crate) async fn a_tool_change_is_told_once_until_accepted(store: Arc<dyn Store>) {
    store
        .pins_on_connect("files", vec![pin("echo", "h1")], NewTools::PinFirst)
        .await
        .unwrap();
    // Eight replicas read the same change at once, and a new tool besides.
    let telling = (0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move {
            let notes = vec![note("echo", Some("h1"), "h2"), note("extra", None, "x1")];
            store.tell_changes("files", notes).await.unwrap();
        })
    });
    for told in futures_util::future::join_all(telling).await {
        told.unwrap();
    }
    let entries = told(&*store).await;
    assert_eq!(
        entries,
        [
            (
                "upstream.tool_changed".to_owned(),
                "files".to_owned(),
                json!({"tool": "echo", "hash": "h2"})
            ),
            (
                "upstream.tool_changed".to_owned(),
                "files".to_owned(),
                json!({"tool": "extra", "hash": "x1"})
            ),
        ],
        "each change told once"
    );

    // A change read against a pin replaced since is not told: an admin accepted it meanwhile.
    let accepted = ToolPin {
        pinned_by: Some("admin".to_owned()),
        accepted: true,
        ..pin("echo", "h2")
    };
    store
        .accept_pin(&accepted, r#"{"tool":"echo","accepted_by":"admin"}"#)
        .await
        .unwrap();
    store
        .tell_changes("files", vec![note("echo", Some("h1"), "h2")])
        .await
        .unwrap();
    let entries = told(&*store).await;
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert_eq!(entries[2].0, "upstream.change_accepted");
    assert_eq!(entries[2].2["accepted_by"], "admin");

    // Once accepted, the tool's changes are forgotten: a change back to h1 is told, once.
    for _ in 0..2 {
        store
            .tell_changes("files", vec![note("echo", Some("h2"), "h1")])
            .await
            .unwrap();
    }
    let entries = told(&*store).await;
    assert_eq!(entries.len(), 4, "{entries:?}");
    assert_eq!(entries[3].2, json!({"tool": "echo", "hash": "h1"}));
    // Call entries and upstream entries share one feed: the cursor moves past both.
    let head = store.feed_head().await.unwrap();
    assert!(
        store
            .feed(Some(&head), 10)
            .await
            .unwrap()
            .entries
            .is_empty()
    );
}
