//! What the webhook scenarios share with the load generator: the webhook's secret, and the
//! signed sample message that the receiver's baseline (`webhook_receiver`) posts.

use std::sync::OnceLock;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use toolgate::feed::webhooks::{parse_secret, signature};

/// The webhook's secret (32 bytes): a benchmark's, not a secret.
pub(crate) const SECRET: &str = "whsec_dG9vbGdhdGUtYmVuY2gtd2ViaG9vay1zZWNyZXQtMzI=";

/// The sample message of the receiver's baseline, signed: its body and signature.
fn sample() -> &'static (String, String) {
    static SAMPLE: OnceLock<(String, String)> = OnceLock::new();
    SAMPLE.get_or_init(|| {
        // A `call.suspended` delivery of `ask_human`, as toolgate sends it (804 bytes).
        let at = "2026-12-01T12:00:00.000Z";
        let body = serde_json::json!({
            "data": {
                "at": at,
                "call": {
                    "attempts": 1,
                    "call_id": "call_00000000000000000000000000sample",
                    "caller": null,
                    "created_at": at,
                    "effect": "read",
                    "idempotency_key": null,
                    "status": "suspended",
                    "tool": "ask_human",
                    "updated_at": at
                },
                "suspension": {
                    "expires_at": null,
                    "input_schema": {
                        "$schema": "https://json-schema.org/draft/2020-12/schema",
                        "additionalProperties": false,
                        "description": "The person's answer: what the approver sends, and what \
                                        the tool returns.",
                        "properties": {
                            "answer": {"description": "The answer.", "type": "string"}
                        },
                        "required": ["answer"],
                        "title": "HumanAnswer",
                        "type": "object"
                    },
                    "reason": "ship it?",
                    "token": "sus_0000000000000000000000000000000000sample"
                },
                "type": "call.suspended"
            },
            "timestamp": at,
            "type": "call.suspended"
        })
        .to_string();
        let secret = parse_secret(SECRET).expect("the bench's secret");
        let signed = signature(&secret, "msg_bench_sample", 1_700_000_000, &body);
        (body, signed)
    })
}

/// The baseline's request: the signed sample message, to `/`.
pub(crate) fn sample_request() -> Result<Request<Full<Bytes>>, String> {
    let (body, signed) = sample();
    Request::post("/")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("webhook-id", "msg_bench_sample")
        .header("webhook-timestamp", "1700000000")
        .header("webhook-signature", signed.as_str())
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .map_err(|e| e.to_string())
}
