//! The forms' round trip: schema to controls, controls to JSON.

use serde_json::json;

use std::collections::HashMap;

use crate::contract::error::InputViolation;

use super::*;

fn submitted(pairs: &[(&str, &str)]) -> Submitted {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    Submitted::from_pairs(&pairs)
}

fn controls(form: &Form) -> Vec<&Control> {
    form.nodes
        .iter()
        .filter_map(|node| match node {
            Node::Control(control) => Some(control),
            _ => None,
        })
        .collect()
}

fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["order_id", "amount_cents", "status"],
        "properties": {
            "order_id": {"type": "string", "title": "Order", "description": "The order."},
            "amount_cents": {"type": "integer", "minimum": 1},
            "status": {"$ref": "#/$defs/Status"},
            "note": {"type": ["string", "null"]},
            "urgent": {"type": "boolean"},
            "lines": {"type": "array", "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "number"}}
            }},
            "meta": {"type": "object", "additionalProperties": {"type": "string"}},
            "shipping": {"type": "object", "properties": {"city": {"type": "string"}}}
        },
        "$defs": {"Status": {"oneOf": [
            {"type": "string", "const": "issued", "description": "Paid back."},
            {"type": "string", "const": "held"}
        ]}}
    })
}

#[test]
fn each_type_has_its_control() {
    let form = render("approve", &schema(), &Submitted::default(), &[]);
    let by_name: HashMap<&str, &Control> = controls(&form)
        .into_iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    let order = by_name["v/order_id"];
    assert_eq!(order.label, "Order");
    assert_eq!(order.help.as_deref(), Some("The order."));
    assert!(order.required);
    assert!(matches!(
        order.kind,
        Kind::Line {
            input_type: "text",
            ..
        }
    ));
    assert!(matches!(
        &by_name["v/amount_cents"].kind,
        Kind::Number { step: "1", min: Some(min), max: None } if min == "1"
    ));
    let Kind::Choice { options } = &by_name["v/status"].kind else {
        panic!("an enum is a choice");
    };
    let labels: Vec<&str> = options.iter().map(|o| o.label.as_str()).collect();
    assert_eq!(labels, ["(none)", "issued", "held"]);
    assert!(matches!(by_name["v/note"].kind, Kind::Long { .. }));
    assert!(!by_name["v/note"].required);
    assert!(matches!(by_name["v/urgent"].kind, Kind::Choice { .. }));
    assert!(matches!(by_name["v/meta"].kind, Kind::Json { .. }), "a map");
    assert!(by_name.contains_key("v/shipping/city"));
    assert!(by_name.contains_key("v/lines/-/sku"), "the row template");
    assert!(!by_name.contains_key("v/lines/0/sku"), "no rows yet");
}

#[test]
fn a_form_reads_back_into_typed_json_leaving_out_what_is_empty() {
    let form = submitted(&[
        ("csrf", "x"),
        ("v/order_id", "o-1"),
        ("v/amount_cents", "250"),
        ("v/status", "1"),
        ("v/note", ""),
        ("v/urgent", "true"),
        ("v/lines/3/sku", "b"),
        ("v/lines/0/sku", "a"),
        ("v/lines/0/qty", "1.5"),
        ("v/lines/7/sku", ""),
        ("v/meta", "{\"k\": \"v\"}"),
        ("v/shipping/city", ""),
    ]);
    let value = read(&schema(), &form).unwrap();
    assert_eq!(
        value,
        json!({
            "order_id": "o-1",
            "amount_cents": 250,
            "status": "held",
            "urgent": true,
            "lines": [{"sku": "a", "qty": 1.5}, {"sku": "b"}],
            "meta": {"k": "v"}
        })
    );
    // Text that is no number stays text, for the schema to refuse where it is.
    let odd = read(&schema(), &submitted(&[("v/amount_cents", "ten")])).unwrap();
    assert_eq!(odd, json!({"amount_cents": "ten"}));
    let bad = read(&schema(), &submitted(&[("v/meta", "{nope")])).unwrap_err();
    assert_eq!(bad[0].path, "/meta");
}

#[test]
fn a_refusal_is_shown_at_its_field_with_what_was_typed() {
    let typed = submitted(&[("v/amount_cents", "0"), ("v/lines/2/sku", "x")]);
    let violations = [
        InputViolation {
            path: "/amount_cents".into(),
            message: "0 is less than the minimum of 1".into(),
        },
        InputViolation {
            path: "/lines/2/qty".into(),
            message: "deep".into(),
        },
        InputViolation {
            path: "".into(),
            message: "\"order_id\" is a required property".into(),
        },
    ];
    let form = render("approve", &schema(), &typed, &violations);
    let by_name: HashMap<&str, &Control> = controls(&form)
        .into_iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    let amount = by_name["v/amount_cents"];
    assert_eq!(amount.value, "0");
    assert_eq!(
        amount.error.as_deref(),
        Some("0 is less than the minimum of 1")
    );
    assert_eq!(amount.described_by(), "approve-f/amount_cents-error");
    assert_eq!(
        by_name["v/order_id"].error.as_deref(),
        Some("This field is required.")
    );
    assert_eq!(by_name["v/lines/2/sku"].value, "x", "the row is kept");
    assert_eq!(by_name["v/lines/2/qty"].error.as_deref(), Some("deep"));
    assert_eq!(form.problems.len(), 3);
    assert_eq!(
        form.problems[2].anchor, None,
        "the whole answer: the summary"
    );
}

#[test]
fn what_cannot_be_rendered_is_json() {
    let schema = json!({"oneOf": [{"type": "object"}, {"type": "string"}]});
    let form = render("approve", &schema, &Submitted::default(), &[]);
    let only = controls(&form);
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].name, "v");
    assert!(matches!(only[0].kind, Kind::Json { .. }));
    let value = read(&schema, &submitted(&[("v", "\"yes\"")])).unwrap();
    assert_eq!(value, json!("yes"));
    let empty = read(&json!({"type": "object"}), &Submitted::default()).unwrap();
    assert_eq!(empty, json!({}));
}
