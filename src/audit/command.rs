//! `toolgate audit verify <FILE or URL> --keys <FILE or URL>`: checks an export of the audit
//! chain (JSON lines, as `GET /audit` serves them; a URL of `/audit` is read page by page) or a
//! receipt (`GET /calls/{id}/receipt`, a JSON object) against a key set, and says what it
//! found: exit 0 when everything verifies, 1 naming the first entry that fails, 2 when the
//! input cannot be read. A URL that needs a key reads it from `TOOLGATE_TOKEN`.

use std::time::Duration;

use serde_json::Value;

use super::verify::{Keys, verify_export, verify_receipt};

/// The largest export or key set read, in bytes (per page, for a URL).
const MAX_READ: usize = 512 * 1024 * 1024;

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the command: its exit code, having printed what it found.
pub fn verify(source: &str, keys: &str) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("toolgate: cannot start the async runtime: {err}");
            return 2;
        }
    };
    runtime.block_on(async {
        let read = async {
            let keys = read(keys, false).await?;
            let keys: Value =
                serde_json::from_str(&keys).map_err(|e| format!("the key set is not JSON: {e}"))?;
            let keys = Keys::from_jwks(&keys)?;
            Ok::<_, String>((read(source, true).await?, keys))
        };
        let (text, keys) = match read.await {
            Ok(read) => read,
            Err(err) => {
                eprintln!("toolgate: {err}");
                return 2;
            }
        };
        let receipt = serde_json::from_str::<Value>(&text)
            .ok()
            .filter(|value| value.get("entries").is_some());
        let checked = match &receipt {
            Some(receipt) => verify_receipt(receipt, &keys),
            None => verify_export(&text, &keys),
        };
        match checked {
            Ok(report) => {
                let what = if receipt.is_some() {
                    "receipt"
                } else {
                    "chain"
                };
                let covered = match report.covered_to {
                    Some(to) => format!(
                        "signed through entry {to}; {} after it not signed yet",
                        report.unsigned
                    ),
                    None => "no checkpoint in it".to_owned(),
                };
                println!(
                    "ok: {what} verified: entries {} to {} ({}), {} checkpoint(s), {covered}",
                    report.first, report.last, report.entries, report.checkpoints
                );
                0
            }
            Err(failure) => {
                println!("FAILED: {failure}");
                1
            }
        }
    })
}

/// A file's text, or a URL's body (every page of an `/audit` URL when `pages`).
async fn read(source: &str, pages: bool) -> Result<String, String> {
    if !(source.starts_with("http://") || source.starts_with("https://")) {
        let text = std::fs::read_to_string(source)
            .map_err(|err| format!("cannot read {source}: {err}"))?;
        return Ok(text);
    }
    crate::base::install_crypto();
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|err| format!("no HTTP client: {err}"))?;
    let token = std::env::var("TOOLGATE_TOKEN").ok();
    let mut url = url::Url::parse(source).map_err(|err| format!("{source}: {err}"))?;
    let paged = pages && url.path().ends_with("/audit");
    let mut text = String::new();
    let mut after = 0i64;
    loop {
        if paged {
            url.query_pairs_mut()
                .clear()
                .append_pair("after", &after.to_string())
                .append_pair("limit", "10000");
        }
        let mut request = client.get(url.clone());
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|err| format!("{url}: {err}"))?;
        let status = response.status();
        if response.content_length().unwrap_or(0) > MAX_READ as u64 {
            return Err(format!("{url}: larger than {MAX_READ} bytes"));
        }
        let body = response
            .text()
            .await
            .map_err(|err| format!("{url}: {err}"))?;
        if !status.is_success() {
            return Err(format!("{url} answered {status}: {body}"));
        }
        if !paged {
            return Ok(body);
        }
        let Some(last) = body.lines().rev().find(|line| !line.trim().is_empty()) else {
            return Ok(text);
        };
        after = serde_json::from_str::<Value>(last)
            .ok()
            .and_then(|entry| entry["seq"].as_i64())
            .ok_or_else(|| format!("{url}: a line that is not an entry"))?;
        text.push_str(&body);
        if text.len() > MAX_READ {
            return Err(format!("{source}: larger than {MAX_READ} bytes"));
        }
    }
}
