//! The answers that change only with the tool list, serialized once per generation of it:
//! `GET /tools` in toolgate's format and each provider's, each tool's descriptor, and the
//! OpenAPI document.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::contract::registry::ToolSet;
use crate::schema::Format;

/// Answers that change only with the tool list, serialized once per generation of it.
pub(super) struct Catalog {
    pub(super) tools_json: Bytes,
    /// `GET /tools?format=…`, in the order of `Format::ALL`.
    provider_json: Vec<(Format, Bytes)>,
    pub(super) descriptor_json: HashMap<String, Bytes>,
    pub(super) openapi_json: Bytes,
}

impl Catalog {
    pub(super) fn new(tools: &ToolSet, auth: bool) -> Self {
        let descriptors = tools.descriptors();
        let descriptor_json = descriptors
            .iter()
            .map(|d| (d.name.clone(), to_json_bytes(d)))
            .collect();
        let provider_json = Format::ALL
            .into_iter()
            .map(|format| {
                let list = super::tools::ProviderToolList {
                    tools: crate::schema::tool_list(format, &descriptors),
                };
                (format, to_json_bytes(&list))
            })
            .collect();
        let tools_json = to_json_bytes(&super::tools::ToolList { tools: descriptors });
        let openapi_json = to_json_bytes(&super::openapi::document(tools, auth));
        Catalog {
            tools_json,
            provider_json,
            descriptor_json,
            openapi_json,
        }
    }

    /// The tool list in `format`.
    pub(super) fn provider_tools(&self, format: Format) -> &Bytes {
        self.provider_json
            .iter()
            .find(|(f, _)| *f == format)
            .map(|(_, bytes)| bytes)
            .expect("the catalog holds every format")
    }
}

fn to_json_bytes<T: serde::Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("serializing plain data to JSON cannot fail"))
}

/// Answers with JSON serialized once per generation of the tool list.
pub(super) fn json_response(bytes: &Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes.clone()).into_response()
}
