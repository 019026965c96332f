//! The test identity provider (`tests/oidc/provider.mjs`, oidc-provider on 127.0.0.1): started
//! per test, and asked for tokens as a client of it would.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// Where toolgate's tokens are meant for: the `resource` asked for, and the `aud` expected.
pub const RESOURCE: &str = "https://toolgate.test/mcp";

/// How long a start may take before it is tried again.
const START_WITHIN: Duration = Duration::from_secs(45);

/// One running provider.
pub struct Provider {
    /// Its issuer URL (`http://127.0.0.1:PORT`).
    pub issuer: String,
    child: Child,
    client: reqwest::Client,
}

impl Provider {
    /// Starts a provider with the defaults of `tests/oidc/README.md`, and `config` over them.
    ///
    /// A start that prints nothing within [`START_WITHIN`] is stopped and tried once more (a CI
    /// run once saw a provider print nothing for 30 s, where it takes 2-3 s on a busy machine);
    /// a failure shows what the provider wrote to stderr.
    pub fn start(config: Value) -> Provider {
        super::tls();
        let config = config.to_string();
        let mut failures = Vec::new();
        for _ in 0..2 {
            match Self::spawn(&config) {
                Ok((issuer, child)) => {
                    return Provider {
                        issuer,
                        child,
                        client: reqwest::Client::builder()
                            .timeout(Duration::from_secs(15))
                            .build()
                            .unwrap(),
                    };
                }
                Err(failure) => failures.push(failure),
            }
        }
        panic!(
            "the identity provider did not start:\n{}",
            failures.join("\n---\n")
        );
    }

    /// One start: the issuer and the running child, or what went wrong with the provider's
    /// stderr (the child is stopped).
    fn spawn(config: &str) -> Result<(String, Child), String> {
        let script = super::repo_root().join("tests/oidc/provider.mjs");
        // Its stderr goes to a file read only on failure: a pipe left unread would block it.
        let stderr = tempfile::tempfile().expect("a temporary file for the provider's stderr");
        let mut child = Command::new("node")
            .arg(script)
            .args(["--port", "0", "--json", config])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr.try_clone().expect("the stderr file cloned"))
            .spawn()
            .expect("node runs the test identity provider (bash .ci/test-deps installs it)");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep reading so the provider never blocks on a full pipe.
            for _ in lines {}
        });
        let started = std::time::Instant::now();
        let outcome = rx.recv_timeout(START_WITHIN);
        let line = match outcome {
            Ok(line) if line.starts_with("listening on ") => line,
            other => {
                let _ = child.kill();
                let status = child.wait();
                let mut said = String::new();
                let mut stderr = stderr;
                let _ = stderr.seek(SeekFrom::Start(0));
                let _ = stderr.read_to_string(&mut said);
                let tail: String = said
                    .chars()
                    .rev()
                    .take(4000)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                return Err(format!(
                    "after {:?}: {other:?}; exit {status:?}; stderr:\n{tail}",
                    started.elapsed()
                ));
            }
        };
        let issuer = line["listening on ".len()..].trim().to_owned();
        Ok((issuer, child))
    }

    /// A client-credentials access token of `client` (secret `<client>-secret`) for
    /// [`RESOURCE`], with `scope`.
    pub async fn machine_token(&self, client: &str, scope: &str) -> String {
        self.machine_token_for(client, scope, RESOURCE).await
    }

    /// The same, for `resource`.
    pub async fn machine_token_for(&self, client: &str, scope: &str, resource: &str) -> String {
        let response = self
            .client
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(format!("{client}-secret")))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(
                url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("grant_type", "client_credentials")
                    .append_pair("resource", resource)
                    .append_pair("scope", scope)
                    .finish(),
            )
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert!(status.is_success(), "token for {client}: {status} {body}");
        body["access_token"].as_str().unwrap().to_owned()
    }

    /// A token signed with the provider's own key: `request` is `{"alg","kid","header",
    /// "claims"}` as `POST /_test/sign` takes it.
    pub async fn sign(&self, request: Value) -> String {
        let body = self.post("/_test/sign", request).await;
        body["token"].as_str().unwrap().to_owned()
    }

    /// A new signing key for `alg`, used from now on; its `kid`.
    pub async fn rotate(&self, alg: &str) -> String {
        let body = self.post("/_test/rotate", json!({ "alg": alg })).await;
        body["kid"].as_str().unwrap().to_owned()
    }

    /// Requests per endpoint since the start or the last reset.
    pub async fn counts(&self) -> Value {
        let response = self
            .client
            .get(format!("{}/_test/counts", self.issuer))
            .send()
            .await
            .unwrap();
        response.json().await.unwrap()
    }

    /// Adds a static client, or merges `metadata` over the client of its `client_id` (the
    /// inbox's redirect URI once toolgate's port is known, say).
    pub async fn client(&self, metadata: Value) {
        self.post("/_test/clients", metadata).await;
    }

    /// Zeroes the counts.
    pub async fn reset_counts(&self) {
        self.post("/_test/reset-counts", json!({})).await;
    }

    /// Stops the provider: nothing answers at its URL any more.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let response = self
            .client
            .post(format!("{}{path}", self.issuer))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.stop();
    }
}
