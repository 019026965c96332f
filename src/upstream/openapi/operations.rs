//! A document's operations as tools: each selected operation becomes an MCP tool definition
//! (so pins, policies and every door treat it as any upstream tool) and the [`Operation`] a
//! call of it sends.
//!
//! The tool's input joins the path, query and header parameters, each by its name, and the
//! request body under `body`; its output is the first `2xx` JSON response's schema; its effect
//! follows the method (`GET`/`HEAD` read, `PUT`/`DELETE` idempotent, anything else a write),
//! as annotations a policy's `effect` can override. Its description begins with the method and
//! path, so a changed route is a changed definition. An operation that cannot be served (a
//! body of another media type, a security scheme without a credential, a schema refused) is
//! skipped, and named with the reason.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rmcp::model::{Tool as McpTool, ToolAnnotations};
use serde_json::{Map, Value};

use super::config::Source;
use super::document::Document;
use super::names::{essence, examples_of, is_json, tool_name};
use super::schema::{Resolver, Way};
use super::security::{Apply, Schemes};
use crate::contract::registry::glob_matches;
use crate::upstream::config::SEPARATOR;

/// The methods an OpenAPI path item may hold, as the document spells them.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];
/// The property of a tool's input that holds the request body.
pub(super) const BODY: &str = "body";
/// Header parameters left out of the input: OpenAPI's three (the request's own headers carry
/// them), `Idempotency-Key` (toolgate sends the call's own), and those that frame or route the
/// request, which no input may set.
const IGNORED_HEADERS: [&str; 11] = [
    "accept",
    "content-type",
    "authorization",
    "idempotency-key",
    "host",
    "content-length",
    "transfer-encoding",
    "te",
    "connection",
    "upgrade",
    "cookie",
];
/// The most values all the selected operations' schemas may hold once resolved (GitHub's whole
/// REST API holds about 560,000).
const MAX_DOCUMENT_VALUES: usize = 2_000_000;
/// The most tools one document serves (as for an MCP server's list).
const MAX_TOOLS: usize = 1000;

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Path,
    Query,
    Header,
}

/// How a parameter's value is written (OpenAPI's `style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    Simple,
    Label,
    Matrix,
    Form,
    SpaceDelimited,
    PipeDelimited,
    DeepObject,
}

/// One parameter of an operation.
pub(super) struct Param {
    pub(super) name: String,
    pub(super) place: Place,
    pub(super) style: Style,
    pub(super) explode: bool,
    /// Its value is sent as JSON text (a parameter described by `content`).
    pub(super) json: bool,
}

/// How a request body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Media {
    Json,
    Form,
    Multipart,
}

/// An operation's request body.
pub(super) struct Body {
    pub(super) media: Media,
    /// Its `Content-Type` (JSON only: form bodies get theirs from how they are written).
    pub(super) content_type: String,
}

/// What one call of an operation sends.
pub(crate) struct Operation {
    pub(super) method: reqwest::Method,
    /// The path as the document writes it (`/pet/{petId}`).
    pub(super) path: String,
    /// Where it is sent: the base URL, the path appended.
    pub(super) base: url::Url,
    pub(super) params: Vec<Param>,
    pub(super) body: Option<Body>,
    /// The credentials it carries.
    pub(super) auth: Vec<Apply>,
}

/// The tools of one document, ready to serve.
pub(super) struct Built {
    pub(super) tools: Vec<McpTool>,
    pub(super) operations: HashMap<String, Arc<Operation>>,
    /// Operations selected but not served, and why.
    pub(super) skipped: Vec<(String, String)>,
}

/// Builds the tools of `document` for the upstream `upstream`, whose entry selects operations
/// by `source` and by its `tools` globs. Fails, naming the operation, on an operation without
/// an id, or two served under one name.
pub(super) fn build(
    document: &Document,
    upstream: &str,
    globs: &[String],
    source: &Source,
    exchange: bool,
) -> Result<Built, String> {
    let root = &document.root;
    let default_base = super::servers::base(document, source, root.get("servers"))?;
    let schemes = Schemes::new(document, source, exchange);
    let mut built = Built {
        tools: Vec::new(),
        operations: HashMap::new(),
        skipped: Vec::new(),
    };
    // The values resolved so far, over every operation.
    let mut values = 0;
    // Served name → the operation, to name both sides of a clash.
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let paths = root.get("paths").and_then(Value::as_object);
    for (path, item) in paths.into_iter().flatten() {
        let mut resolver = Resolver::new(root, document.is_31());
        let Ok(item) = resolver.object(item) else {
            built.skipped.push((
                path.clone(),
                "its path item's reference does not resolve".into(),
            ));
            continue;
        };
        for method in METHODS {
            let Some(operation) = item.get(method).filter(|op| op.is_object()) else {
                continue;
            };
            let id = operation.get("operationId").and_then(Value::as_str);
            let tags: Vec<&str> = operation
                .get("tags")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let chosen = |selectors: &[super::config::Selector]| {
                selectors
                    .iter()
                    .any(|selector| selector.matches(id, path, &tags))
            };
            if (!source.include.is_empty() && !chosen(&source.include)) || chosen(&source.exclude) {
                continue;
            }
            let label = format!("{} {path}", method.to_uppercase());
            let Some(id) = id else {
                return Err(format!(
                    "the operation {label} has no operationId, so it has no tool name; leave it \
                     out with `exclude = [\"{path}\"]`"
                ));
            };
            let name = tool_name(upstream, id);
            if !globs.iter().any(|glob| glob_matches(glob, &name)) {
                continue;
            }
            let this = format!("`{id}` ({label})");
            if let Some(first) = names.insert(name.clone(), this.clone()) {
                return Err(format!(
                    "the operations {first} and {this} would both be served as \
                     `{upstream}{SEPARATOR}{name}`; leave one out with `exclude`"
                ));
            }
            let parts = Parts {
                root,
                item,
                operation,
                method,
                path,
                default_base: &default_base,
                schemes: &schemes,
            };
            if built.tools.len() >= MAX_TOOLS {
                built.skipped.push((
                    format!("`{id}` ({label})"),
                    format!("more than {MAX_TOOLS} operations are selected; select fewer"),
                ));
                continue;
            }
            match parts.tool(&name, document, source, &mut values) {
                Ok((tool, op)) => {
                    built.operations.insert(name, Arc::new(op));
                    built.tools.push(tool);
                }
                Err(why) => built.skipped.push((format!("`{id}` ({label})"), why)),
            }
            if values > MAX_DOCUMENT_VALUES {
                return Err(format!(
                    "the selected operations' schemas hold more than {MAX_DOCUMENT_VALUES} \
                     values once their references are resolved; select fewer with `include`"
                ));
            }
        }
    }
    Ok(built)
}

/// One operation and what it is read with.
struct Parts<'a> {
    root: &'a Value,
    item: &'a Value,
    operation: &'a Value,
    method: &'a str,
    path: &'a str,
    default_base: &'a Option<url::Url>,
    schemes: &'a Schemes,
}

impl<'a> Parts<'a> {
    fn tool(
        &self,
        name: &str,
        document: &Document,
        source: &Source,
        values: &mut usize,
    ) -> Result<(McpTool, Operation), String> {
        let mut resolver = Resolver::new(self.root, document.is_31());
        let built = self.build(&mut resolver, name, document, source);
        *values += resolver.values();
        built
    }

    fn build(
        &self,
        resolver: &mut Resolver<'a>,
        name: &str,
        document: &Document,
        source: &Source,
    ) -> Result<(McpTool, Operation), String> {
        // A dot segment in the route would move it elsewhere once the URL is normalised.
        let dots = self.path.split('/').any(|segment| {
            let segment = segment.to_ascii_lowercase().replace("%2e", ".");
            segment == "." || segment == ".."
        });
        if dots {
            return Err("its path has a `.` or `..` segment".into());
        }
        let listed = |value: Option<&'a Value>| {
            value.filter(|servers| servers.as_array().is_some_and(|list| !list.is_empty()))
        };
        let servers =
            listed(self.operation.get("servers")).or_else(|| listed(self.item.get("servers")));
        let base = match servers {
            Some(servers) if source.base_url.is_none() => {
                super::servers::base(document, source, Some(servers))?
            }
            _ => self.default_base.clone(),
        }
        .ok_or("no server URL: the document names none usable; set `base_url`")?;
        let auth = self.schemes.apply(self.operation)?;
        let mut properties = Map::new();
        let mut required = Vec::new();
        let mut params = Vec::new();
        // Parameters of the path item, then the operation's own (which replace a same one).
        let mut declared: Vec<&Value> = Vec::new();
        for list in [
            self.item.get("parameters"),
            self.operation.get("parameters"),
        ] {
            for param in list.and_then(Value::as_array).into_iter().flatten() {
                let param = resolver.object(param)?;
                let key = |p: &Value| (p.get("name").cloned(), p.get("in").cloned());
                declared.retain(|seen| key(seen) != key(param));
                declared.push(param);
            }
        }
        for param in declared {
            let Some((param, schema, needed)) = self.param(resolver, param)? else {
                continue;
            };
            if properties.contains_key(&param.name) || param.name == BODY {
                return Err(format!(
                    "two of its inputs would be named `{}` (parameters of one name in two \
                     places, or a parameter named `body`)",
                    param.name
                ));
            }
            if needed {
                required.push(Value::String(param.name.clone()));
            }
            properties.insert(param.name.clone(), schema);
            params.push(param);
        }
        let body = match self.operation.get("requestBody") {
            Some(body) => {
                let body = resolver.object(body)?;
                let (media, content_type, schema) = self.body(resolver, body)?;
                if body.get("required") == Some(&Value::Bool(true)) {
                    required.push(BODY.into());
                }
                properties.insert(BODY.into(), schema);
                Some(Body {
                    media,
                    content_type,
                })
            }
            None => None,
        };
        let mut input = Map::new();
        input.insert("type".into(), "object".into());
        input.insert("properties".into(), Value::Object(properties));
        if !required.is_empty() {
            input.insert("required".into(), Value::Array(required));
        }
        input.insert("additionalProperties".into(), false.into());
        let method = reqwest::Method::from_bytes(self.method.to_uppercase().as_bytes())
            .map_err(|_| "its method is not an HTTP method".to_owned())?;
        let annotations = match method.as_str() {
            "GET" | "HEAD" | "OPTIONS" => ToolAnnotations::new().read_only(true),
            "PUT" | "DELETE" => ToolAnnotations::new().read_only(false).idempotent(true),
            _ => ToolAnnotations::new().read_only(false).idempotent(false),
        };
        // Where the document sends requests is part of what is pinned: a document that moves
        // them to another host is a changed definition, held for an admin. The entry's
        // `base_url` is the operator's, not the document's.
        let at = source.base_url.is_none().then_some(&base);
        let mut tool = McpTool::new(name.to_owned(), self.description(at), Arc::new(input))
            .with_annotations(annotations);
        if let Some(output) = self.output(resolver)? {
            tool = tool.with_raw_output_schema(Arc::new(output));
        }
        Ok((
            tool,
            Operation {
                method,
                path: self.path.to_owned(),
                base,
                params,
                body,
                auth,
            },
        ))
    }

    /// `METHOD /path` (with `at <base URL>` when the document chose it), then the summary and
    /// the description.
    fn description(&self, at: Option<&url::Url>) -> String {
        let mut text = format!("{} {}", self.method.to_uppercase(), self.path);
        if let Some(base) = at {
            text.push_str(&format!(" at {base}"));
        }
        for field in ["summary", "description"] {
            if let Some(part) = self.operation.get(field).and_then(Value::as_str)
                && !part.trim().is_empty()
            {
                text.push_str("\n\n");
                text.push_str(part.trim());
            }
        }
        if self.operation.get("deprecated") == Some(&Value::Bool(true)) {
            text.push_str("\n\n(Deprecated.)");
        }
        text
    }

    /// One parameter, its schema (with its description and examples) and whether it is
    /// required; `None` for one OpenAPI says to ignore, or an optional cookie.
    fn param(
        &self,
        resolver: &mut Resolver<'a>,
        param: &Value,
    ) -> Result<Option<(Param, Value, bool)>, String> {
        let name = param
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a parameter has no name")?;
        let needed = param.get("required") == Some(&Value::Bool(true));
        let place = match param.get("in").and_then(Value::as_str) {
            Some("path") => Place::Path,
            Some("query") => Place::Query,
            Some("header") if IGNORED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) => {
                return Ok(None);
            }
            Some("header") => Place::Header,
            Some("cookie") if !needed => return Ok(None),
            Some("cookie") => {
                return Err(format!(
                    "it requires the cookie `{name}`, which toolgate does not send"
                ));
            }
            _ => return Err(format!("the parameter `{name}` has no valid `in`")),
        };
        let style = match param.get("style").and_then(Value::as_str) {
            None => match place {
                Place::Query => Style::Form,
                _ => Style::Simple,
            },
            Some("simple") => Style::Simple,
            Some("label") if place == Place::Path => Style::Label,
            Some("matrix") if place == Place::Path => Style::Matrix,
            Some("form") if place == Place::Query => Style::Form,
            Some("spaceDelimited") if place == Place::Query => Style::SpaceDelimited,
            Some("pipeDelimited") if place == Place::Query => Style::PipeDelimited,
            Some("deepObject") if place == Place::Query => Style::DeepObject,
            Some(other) => {
                return Err(format!(
                    "the parameter `{name}` has the style `{other}`, which its place does not \
                     allow"
                ));
            }
        };
        let explode = param
            .get("explode")
            .and_then(Value::as_bool)
            .unwrap_or(style == Style::Form);
        let (schema, json) = match (param.get("schema"), param.get("content")) {
            (Some(schema), _) => (schema, false),
            (None, Some(Value::Object(content))) => match content.iter().next() {
                Some((media, entry)) if is_json(media) => {
                    (entry.get("schema").unwrap_or(&Value::Bool(true)), true)
                }
                _ => {
                    return Err(format!(
                        "the parameter `{name}` is described by a media type other than JSON"
                    ));
                }
            },
            _ => (&Value::Bool(true), false),
        };
        let mut schema = resolver.schema(schema, Way::Request)?;
        if let Value::Object(out) = &mut schema {
            for field in ["description", "deprecated"] {
                if let Some(value) = param.get(field) {
                    out.insert(field.into(), value.clone());
                }
            }
            let examples = examples_of(param);
            if !examples.is_empty() {
                out.insert("examples".into(), Value::Array(examples));
            }
        }
        Ok(Some((
            Param {
                name: name.to_owned(),
                place,
                style,
                explode,
                json,
            },
            schema,
            needed || place == Place::Path,
        )))
    }

    /// The request body's media, content type and schema (with its description).
    fn body(
        &self,
        resolver: &mut Resolver<'a>,
        body: &Value,
    ) -> Result<(Media, String, Value), String> {
        let content = body
            .get("content")
            .and_then(Value::as_object)
            .ok_or("its request body has no content")?;
        let chosen = content
            .iter()
            .find(|(media, _)| is_json(media))
            .map(|(media, entry)| (Media::Json, media, entry))
            .or_else(|| {
                content.iter().find_map(|(media, entry)| {
                    let kind = match essence(media).as_str() {
                        "application/x-www-form-urlencoded" => Media::Form,
                        "multipart/form-data" => Media::Multipart,
                        _ => return None,
                    };
                    Some((kind, media, entry))
                })
            });
        let Some((media, content_type, entry)) = chosen else {
            let listed: Vec<&str> = content.keys().map(String::as_str).collect();
            return Err(format!(
                "its request body is {}, which toolgate does not send (JSON, form and \
                 multipart fields only)",
                listed.join(", ")
            ));
        };
        let mut schema = resolver.schema(
            entry.get("schema").unwrap_or(&Value::Bool(true)),
            Way::Request,
        )?;
        if media != Media::Json {
            super::request::check_fields(&schema)?;
        }
        if let (Value::Object(out), Some(text)) = (&mut schema, body.get("description")) {
            out.insert("description".into(), text.clone());
        }
        if let Value::Object(out) = &mut schema {
            let examples = examples_of(entry);
            if !examples.is_empty() && !out.contains_key("examples") {
                out.insert("examples".into(), Value::Array(examples));
            }
        }
        Ok((media, content_type.clone(), schema))
    }

    /// The schema of the first `2xx` response with a JSON body, if it is an object schema.
    fn output(&self, resolver: &mut Resolver<'a>) -> Result<Option<Map<String, Value>>, String> {
        let Some(responses) = self.operation.get("responses").and_then(Value::as_object) else {
            return Ok(None);
        };
        let mut codes: Vec<&String> = responses
            .keys()
            .filter(|code| code.starts_with('2'))
            .collect();
        codes.sort();
        let Some(code) = codes.first() else {
            return Ok(None);
        };
        let response = resolver.object(&responses[code.as_str()])?;
        let schema = response
            .get("content")
            .and_then(Value::as_object)
            .and_then(|content| content.iter().find(|(media, _)| is_json(media)))
            .and_then(|(_, entry)| entry.get("schema"));
        match schema {
            Some(schema) => match resolver.schema(schema, Way::Response)? {
                Value::Object(schema) => Ok(Some(schema)),
                _ => Ok(None),
            },
            None => Ok(None),
        }
    }
}
