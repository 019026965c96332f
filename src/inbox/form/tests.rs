//! The forms' round trip: schema to controls, controls to JSON.

use serde_json::json;

use std::collections::HashMap;

use crate::contract::error::InputViolation;

use super::*;
use crate::inbox::prose::Segment;

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
    assert_eq!(order.help, Some(Prose::parse("The order.")));
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

/// The receipt of `issue_refund`, as schemars writes it: an unsigned amount (`minimum: 0`,
/// `format: uint64`) and a one-value enum, with inline code in a description.
fn receipt() -> Value {
    json!({
        "type": "object",
        "required": ["amount_cents", "status", "refund_id"],
        "properties": {
            "refund_id": {"type": "string", "description": "The provider's `rf_…` reference."},
            "amount_cents": {"type": "integer", "format": "uint64", "minimum": 0},
            "fee_cents": {"type": "integer", "format": "uint64", "minimum": 5},
            "offset": {"type": "integer", "format": "int64", "minimum": 0},
            "status": {"$ref": "#/$defs/RefundStatus"},
            "kind": {"type": "string", "enum": ["full"]}
        },
        "$defs": {"RefundStatus": {"oneOf": [
            {"type": "string", "const": "issued", "description": "Paid back."}
        ]}}
    })
}

#[test]
fn a_bound_shows_only_when_the_schema_sets_one() {
    let form = render("complete", &receipt(), &Submitted::default(), &[]);
    let bounds: HashMap<&str, Option<&str>> = controls(&form)
        .into_iter()
        .filter_map(|c| match &c.kind {
            Kind::Number { min, .. } => Some((c.name.as_str(), min.as_deref())),
            _ => None,
        })
        .collect();
    // `minimum: 0` on a `uint64` only restates that the type is unsigned.
    assert_eq!(bounds["v/amount_cents"], None);
    assert_eq!(
        bounds["v/fee_cents"],
        Some("5"),
        "a bound set by the author"
    );
    assert_eq!(
        bounds["v/offset"],
        Some("0"),
        "0 on a signed type is a real bound"
    );
}

#[test]
fn a_required_choice_of_one_value_is_chosen_already() {
    let form = render("complete", &receipt(), &Submitted::default(), &[]);
    let options = |name: &str| -> Vec<(String, bool)> {
        let control = controls(&form)
            .into_iter()
            .find(|c| c.name == name)
            .unwrap();
        let Kind::Choice { options } = &control.kind else {
            panic!("{name} is a choice");
        };
        options
            .iter()
            .map(|o| (o.label.clone(), o.selected))
            .collect()
    };
    assert_eq!(options("v/status"), [("issued".to_owned(), true)]);
    // Not required: it may still be left out.
    assert_eq!(
        options("v/kind"),
        [("(none)".to_owned(), true), ("full".to_owned(), false)]
    );
    // Read back, the preselected value is the answer.
    let answer = read(&receipt(), &submitted(&[("v/status", "0")])).unwrap();
    assert_eq!(answer, json!({"status": "issued"}));
}

#[test]
fn help_keeps_inline_code_apart_and_unescaped_for_the_template() {
    let form = render("complete", &receipt(), &Submitted::default(), &[]);
    let refund = controls(&form)
        .into_iter()
        .find(|c| c.name == "v/refund_id")
        .unwrap();
    let help = refund.help.clone().unwrap();
    assert_eq!(
        help.0,
        [
            Segment {
                code: false,
                text: "The provider's ".into()
            },
            Segment {
                code: true,
                text: "rf_…".into()
            },
            Segment {
                code: false,
                text: " reference.".into()
            },
        ]
    );
}

#[test]
fn a_value_is_listed_with_its_schemas_labels_and_grouped_digits() {
    let schema = json!({
        "type": "object",
        // In name order, so that the test holds with or without serde_json's
        // `preserve_order`.
        "properties": {
            "amount_cents": {"type": "integer", "description": "How much to refund, in cents."},
            "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
            "order_id": {"type": "string", "title": "Order"}
        },
        "$defs": {"Line": {"type": "object", "properties": {"unitPrice": {"type": "number"}}}}
    });
    let value = json!({
        "amount_cents": 1_999_900,
        "order_id": "o-17",
        "lines": [{"unitPrice": -12345.5}],
        "extra": {"ok": true, "none": null}
    });
    let lines: Vec<(usize, String, Option<String>)> = show(&schema, &value)
        .into_iter()
        .map(|line| (line.depth, line.label, line.value))
        .collect();
    let line = |depth, label: &str, value: Option<&str>| {
        (depth, label.to_owned(), value.map(str::to_owned))
    };
    assert_eq!(
        lines,
        [
            line(0, "Amount cents", Some("1,999,900")),
            line(0, "Lines", None),
            line(1, "Item 1", None),
            line(2, "Unit price", Some("-12,345.5")),
            line(0, "Order", Some("o-17")),
            line(0, "Extra", None),
            line(1, "None", Some("(none)")),
            line(1, "Ok", Some("Yes")),
        ]
    );
    let help = show(&schema, &value)[0].help.clone();
    assert_eq!(help, Some(Prose::parse("How much to refund, in cents.")));
}

/// The form's fields as the page renders them.
#[derive(askama::Template)]
#[template(source = "{% include \"form_fields.html\" %}", ext = "html")]
struct Fields {
    form: Form,
}

fn html(form: Form) -> String {
    askama::Template::render(&Fields { form }).unwrap()
}

/// Arrays of arrays, `depth` deep, each with 20 rows to start with (as a hostile upstream
/// server may declare its output): 21 copies a level.
fn nested_arrays(depth: usize) -> Value {
    let mut schema = json!({"type": "string"});
    for _ in 0..depth {
        schema = json!({"type": "array", "minItems": 20, "items": schema});
    }
    json!({"type": "object", "required": ["rows"], "properties": {
        "note": {"type": "string"},
        "rows": schema,
    }})
}

fn json_controls(form: &Form) -> Vec<&Control> {
    controls(form)
        .into_iter()
        .filter(|c| {
            matches!(
                c.kind,
                Kind::Json {
                    too_large: true,
                    ..
                }
            )
        })
        .collect()
}

#[test]
fn a_schema_too_large_for_the_page_becomes_a_json_field_saying_why() {
    for depth in [4, 5, 6] {
        let schema = nested_arrays(depth);
        let form = render("complete", &schema, &Submitted::default(), &[]);
        assert!(
            form.nodes.len() <= 2_000,
            "{depth}: {} nodes",
            form.nodes.len()
        );
        let large = json_controls(&form);
        assert_eq!(
            large.len(),
            1,
            "{depth}: the nested arrays are one JSON field"
        );
        assert_eq!(large[0].name, "v/rows");
        // What fits is still a control.
        assert!(controls(&form).iter().any(|c| c.name == "v/note"));
        let page = html(form);
        assert!(page.len() < 1_100 * 1024, "{depth}: {} bytes", page.len());
        assert!(
            page.contains("too large to show as fields"),
            "the page says why"
        );
        // The JSON field is read back as JSON, as the form showed it.
        let answer = read(
            &schema,
            &submitted(&[("v/note", "hi"), ("v/rows", "[[[[\"a\"]]]]")]),
        )
        .unwrap();
        assert_eq!(answer, json!({"note": "hi", "rows": [[[["a"]]]]}));
        let refused = read(&schema, &submitted(&[("v/rows", "[[")])).unwrap_err();
        assert_eq!(refused[0].path, "/rows");
    }
}

#[test]
fn a_wide_object_is_shown_within_the_budget() {
    let properties: serde_json::Map<String, Value> = (0..5_000)
        .map(|i| {
            (
                format!("field_{i}"),
                json!({"type": "string", "description": "x".repeat(200)}),
            )
        })
        .collect();
    let wide = json!({"type": "object", "properties": properties});
    let schema = json!({"type": "object", "properties": {
        "small": {"type": "integer"},
        "wide": wide,
    }});
    let form = render("settle", &schema, &Submitted::default(), &[]);
    assert!(form.nodes.len() <= 2_000, "{} nodes", form.nodes.len());
    assert_eq!(json_controls(&form)[0].name, "v/wide");
    let page = html(form);
    assert!(page.len() < 1_100 * 1024, "{} bytes", page.len());
    assert!(page.contains("too large to show as fields"));
}

#[test]
fn a_schema_within_the_budget_is_all_controls() {
    let schema = nested_arrays(2);
    let form = render("complete", &schema, &Submitted::default(), &[]);
    assert!(json_controls(&form).is_empty());
    // 20 rows of 20 rows, each with its template: every string a control of its own.
    assert_eq!(
        controls(&form)
            .iter()
            .filter(|c| c.name.starts_with("v/rows/"))
            .count(),
        21 * 21
    );
}

#[test]
fn a_value_fills_the_form_that_reads_it_back_under_another_name() {
    let value = json!({
        "order_id": "o-1", "amount_cents": 250, "status": "held", "urgent": false,
        "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1.5}],
        "meta": {"k": "v"}, "shipping": {"city": "Lyon"}
    });
    let filled = filled(&schema(), &value);
    assert_eq!(read(&schema(), &filled).unwrap(), value);
    // Rendered as the edit form (`e/…`), posted back, it reads the same.
    let form = render_named("edit", "e", &schema(), &filled, &[]);
    let pairs: Vec<(String, String)> = controls(&form)
        .into_iter()
        .filter(|control| !control.name.contains("/-"))
        .map(|control| {
            let value = match &control.kind {
                Kind::Choice { options } => options
                    .iter()
                    .find(|option| option.selected)
                    .map_or(String::new(), |option| option.value.clone()),
                _ => control.value.clone(),
            };
            (control.name.clone(), value)
        })
        .collect();
    assert!(pairs.iter().all(|(name, _)| name.starts_with("e/")));
    let posted = Submitted::from_pairs_named(&pairs, "e");
    assert_eq!(read(&schema(), &posted).unwrap(), value);
}
