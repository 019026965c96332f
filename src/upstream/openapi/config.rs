//! The OpenAPI keys of an `[[upstreams]]` entry: `openapi`, `base_url`, `include`, `exclude`,
//! `credentials`, checked when the file is read ([`check`]) and expanded when the upstream
//! starts ([`Source::resolve`]).

use std::fmt;

use crate::base::{Invalid, expand, invalid};
use crate::contract::registry::glob_matches;
use crate::upstream::config::{UpstreamConfig, check_http_url};

/// One `include` or `exclude` entry: `tag:<glob>` (a tag of the operation), `/<glob>` (its
/// path, as the document writes it), or a glob of its `operationId`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `tag:<glob>`.
    Tag(String),
    /// `/<glob>`.
    Path(String),
    /// Any other glob: of the operation's id.
    Id(String),
}

impl Selector {
    fn parse(text: &str) -> Result<Selector, String> {
        if let Some(tag) = text.strip_prefix("tag:") {
            if tag.is_empty() {
                return Err("`tag:` needs a tag (or a glob of tags) after it".into());
            }
            return Ok(Selector::Tag(tag.to_owned()));
        }
        if text.is_empty() {
            return Err("an entry must not be empty".into());
        }
        if text.starts_with('/') {
            return Ok(Selector::Path(text.to_owned()));
        }
        Ok(Selector::Id(text.to_owned()))
    }

    /// Whether the operation (its id, path and tags) is one this entry names.
    pub(super) fn matches(&self, id: Option<&str>, path: &str, tags: &[&str]) -> bool {
        match self {
            Selector::Tag(glob) => tags.iter().any(|tag| glob_matches(glob, tag)),
            Selector::Path(glob) => glob_matches(glob, path),
            Selector::Id(glob) => id.is_some_and(|id| glob_matches(glob, id)),
        }
    }
}

/// An OpenAPI upstream, with every `${NAME}` expanded.
#[derive(Clone)]
pub struct Source {
    /// The document: a URL or a file's path.
    pub document: String,
    /// Where requests go, if the entry says.
    pub base_url: Option<url::Url>,
    /// Headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// A secret per security scheme, by the scheme's name.
    pub credentials: Vec<(String, String)>,
    /// The operations to serve; empty, all.
    pub include: Vec<Selector>,
    /// The operations left out.
    pub exclude: Vec<Selector>,
}

impl fmt::Debug for Source {
    /// Header values and credentials are secrets: not shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", crate::upstream::link::shown_url(&self.document))
    }
}

impl Source {
    /// The source of `config` (checked), with its headers and credentials expanded.
    pub(in crate::upstream) fn resolve(
        config: &UpstreamConfig,
        headers: Vec<(String, String)>,
        credentials: Vec<(String, String)>,
    ) -> Result<Source, Invalid> {
        let selectors = |field: &str, entries: &[String]| {
            entries
                .iter()
                .map(|entry| Selector::parse(entry).map_err(|message| invalid(field, message)))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Source {
            document: config.openapi.clone().unwrap_or_default(),
            base_url: config
                .base_url
                .as_deref()
                .map(|url| check_http_url("base_url", url))
                .transpose()?,
            headers,
            credentials,
            include: selectors("include", &config.include)?,
            exclude: selectors("exclude", &config.exclude)?,
        })
    }
}

/// Checks the OpenAPI keys of `config`: set only with `openapi`, and well formed.
pub(in crate::upstream) fn check(config: &UpstreamConfig) -> Result<(), Invalid> {
    let Some(document) = &config.openapi else {
        for (field, set) in [
            ("base_url", config.base_url.is_some()),
            ("include", !config.include.is_empty()),
            ("exclude", !config.exclude.is_empty()),
            ("credentials", !config.credentials.is_empty()),
        ] {
            if set {
                return Err(invalid(
                    field,
                    "only an upstream with an `openapi` document has it",
                ));
            }
        }
        return Ok(());
    };
    if document.trim().is_empty() {
        return Err(invalid(
            "openapi",
            "must be the document's URL or its file's path",
        ));
    }
    if document.starts_with("http://") || document.starts_with("https://") {
        check_http_url("openapi", document)?;
    } else if document.contains("://") {
        return Err(invalid(
            "openapi",
            "must be an http:// or https:// URL, or a file's path",
        ));
    }
    if let Some(base) = &config.base_url {
        let parsed = check_http_url("base_url", base)?;
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(invalid(
                "base_url",
                "must not have a query or a fragment (an API key in a query goes in \
                 `credentials`)",
            ));
        }
    }
    for (field, entries) in [("include", &config.include), ("exclude", &config.exclude)] {
        for entry in entries {
            Selector::parse(entry).map_err(|message| invalid(field, message))?;
        }
    }
    for (scheme, value) in &config.credentials {
        let key = format!("credentials.{scheme}");
        expand(value, |_| Some(String::new())).map_err(|message| invalid(&key, message))?;
        if value.contains(['\r', '\n']) {
            return Err(invalid(key, "must be one line"));
        }
    }
    Ok(())
}
