//! Reading an OpenAPI document: from a file or a URL, JSON or YAML, bounded in size and time,
//! and held to OpenAPI 3.0 or 3.1.

use std::time::Duration;

use serde_json::Value;

/// The largest document read (GitHub's whole REST API is 13 MB).
pub(super) const MAX_DOCUMENT_BYTES: usize = 32 * 1024 * 1024;
/// How long fetching a document by URL may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// A document read: its JSON, and the URL it was fetched from (a relative `servers` URL is
/// relative to it).
pub(super) struct Document {
    pub(super) root: Value,
    pub(super) url: Option<url::Url>,
}

impl Document {
    /// Whether it is OpenAPI 3.1 (its schemas are JSON Schema 2020-12) rather than 3.0.
    pub(super) fn is_31(&self) -> bool {
        self.version().starts_with("3.1.")
    }

    fn version(&self) -> &str {
        self.root
            .get("openapi")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// Reads the bytes of the document at `source` (a URL fetched with `client`, else a file's
/// path), and the URL they came from.
pub(super) async fn read(
    client: &reqwest::Client,
    source: &str,
) -> Result<(Vec<u8>, Option<url::Url>), String> {
    if source.starts_with("http://") || source.starts_with("https://") {
        let url = url::Url::parse(source).map_err(|err| format!("not a URL: {err}"))?;
        let bytes = tokio::time::timeout(FETCH_TIMEOUT, fetch(client, url.clone()))
            .await
            .map_err(|_| format!("not read within {} s", FETCH_TIMEOUT.as_secs()))??;
        Ok((bytes, Some(url)))
    } else {
        Ok((read_file(source).await?, None))
    }
}

impl Document {
    /// The document in `bytes`, read from `url`: JSON or YAML, OpenAPI 3.0 or 3.1.
    pub(super) fn parse(bytes: &[u8], url: Option<url::Url>) -> Result<Document, String> {
        let root = parse(bytes)?;
        let document = Document { root, url };
        let version = document.version();
        if !(version.starts_with("3.0.") || version.starts_with("3.1.")) {
            return Err(match document.root.get("swagger") {
                Some(_) => "is a Swagger 2.0 document; toolgate reads OpenAPI 3.0 and 3.1 \
                            (convert it first, e.g. with swagger2openapi)"
                    .into(),
                None => format!(
                    "is not an OpenAPI 3.0 or 3.1 document (its `openapi` is {})",
                    document
                        .root
                        .get("openapi")
                        .map_or("missing".to_owned(), |v| format!("`{v}`"))
                ),
            });
        }
        if !document.root.get("paths").is_none_or(Value::is_object) {
            return Err("its `paths` is not an object".into());
        }
        Ok(document)
    }
}

async fn read_file(path: &str) -> Result<Vec<u8>, String> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|err| format!("cannot open `{path}`: {err}"))?;
    let length = file
        .metadata()
        .await
        .map_err(|err| format!("cannot read `{path}`: {err}"))?
        .len();
    if length > MAX_DOCUMENT_BYTES as u64 {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(length as usize);
    use tokio::io::AsyncReadExt as _;
    file.take(MAX_DOCUMENT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|err| format!("cannot read `{path}`: {err}"))?;
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(too_large());
    }
    Ok(bytes)
}

async fn fetch(client: &reqwest::Client, url: url::Url) -> Result<Vec<u8>, String> {
    let shown = crate::upstream::link::shown_url(url.as_str());
    let mut response = client
        .get(url)
        .header(
            reqwest::header::ACCEPT,
            "application/json, application/yaml;q=0.9, */*;q=0.1",
        )
        .send()
        .await
        .map_err(|err| format!("cannot fetch {shown}: {}", err.without_url()))?;
    if !response.status().is_success() {
        return Err(format!("{shown} answered {}", response.status()));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| format!("cannot read {shown}: {}", err.without_url()))?
    {
        if bytes.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(too_large());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

fn too_large() -> String {
    format!("is larger than {} MiB", MAX_DOCUMENT_BYTES / (1024 * 1024))
}

/// The document's JSON: JSON if it opens with `{`, else YAML (read with its alias and depth
/// budgets, so a billion laughs is refused).
fn parse(bytes: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_owned())?;
    let text = text.trim_start_matches('\u{feff}');
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|err| format!("is not valid JSON: {err}"))
    } else {
        serde_saphyr::from_str(text).map_err(|err| format!("is not valid YAML: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_read_alike() {
        let json = parse(br#"{"openapi": "3.1.0", "paths": {"/a": {}}}"#).unwrap();
        let yaml = parse(b"openapi: 3.1.0\npaths:\n  /a: {}\n").unwrap();
        assert_eq!(json, yaml);
    }

    #[test]
    fn a_billion_laughs_is_refused() {
        let mut yaml = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        let mut previous = 'a';
        for name in 'b'..='k' {
            let refs = vec![format!("*{previous}"); 10].join(", ");
            yaml.push_str(&format!("{name}: &{name} [{refs}]\n"));
            previous = name;
        }
        let err = parse(yaml.as_bytes()).unwrap_err();
        assert!(err.starts_with("is not valid YAML"), "{err}");
    }
}
