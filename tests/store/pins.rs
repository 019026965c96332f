//! Pins of upstream tools: an upstream's first connection is one however many processes make
//! it at once (the tools it lists pinned once, never replaced by a later listing), a tool new
//! afterwards is pinned only when asked, and an accept replaces a pin.

use std::sync::Arc;

use toolgate::store::{NewTools, Store, Timestamp, ToolPin};

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
    store.accept_pin(&accepted).await.unwrap();
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
