//! A webhook receiver on 127.0.0.1 that keeps the JSON bodies it got, with the `[[webhooks]]`
//! table of a server that sends to it.

use std::sync::{Arc, Mutex};

use serde_json::Value;

/// The JSON bodies a receiver got, in order.
#[derive(Clone, Default)]
pub struct Receiver(pub Arc<Mutex<Vec<Value>>>);

impl Receiver {
    /// A receiver listening, and the `[[webhooks]]` table of a server that sends to it, with
    /// `extra` keys (`events = [...]`, say).
    pub async fn start(extra: &str) -> (Receiver, String) {
        let receiver = Receiver::default();
        let got = receiver.0.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: String| {
                let got = got.clone();
                async move {
                    got.lock()
                        .unwrap()
                        .push(serde_json::from_str(&body).unwrap());
                    axum::http::StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let webhook = format!(
            "[[webhooks]]\nurl = \"{url}\"\n\
             secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nallow_private = true\n{extra}"
        );
        (receiver, webhook)
    }

    /// Every body got so far.
    pub fn got(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }

    /// The first body of type `kind`, waiting for it.
    pub async fn of_type(&self, kind: &str) -> Value {
        super::eventually(&format!("a {kind} webhook"), async || {
            self.got()
                .into_iter()
                .find(|message| message["type"] == kind)
        })
        .await
    }
}
