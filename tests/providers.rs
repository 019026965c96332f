//! `GET /tools?format=…`: each provider's tool list, checked by that provider's own code.
//!
//! The lists of the example tools and of two test tools with every shape a Rust type gives a
//! schema (`common::shapes`) are dumped and run through `tests/providers/check.py` in the test
//! suite's virtualenv (`.ci/venv`, from `.ci/requirements.txt`): the OpenAI Agents SDK's
//! `ensure_strict_json_schema` must leave each strict schema unchanged, the Anthropic SDK's
//! `transform_schema` must keep each schema's meaning, google-genai's `FunctionDeclaration`
//! and `JSONSchema` models must take each declaration, the MCP SDK's `Tool` model each MCP tool,
//! and every schema must be valid JSON Schema 2020-12. A strict-mode input, with `null` for each
//! optional field, is then called for real.

mod common;

use common::{TestServer, assert_error, shapes, temp_dir};
use reqwest::StatusCode;
use serde_json::{Map, Value, json};

const FORMATS: [&str; 5] = ["openai", "openai-responses", "anthropic", "gemini", "mcp"];

/// `book_trip`'s input as a model in OpenAI's strict mode sends it: every property, `null` for
/// each one left out.
fn strict_booking() -> Value {
    json!({
        "traveller": {"name": "Ada", "home": {"city": "Paris", "country": "FR"}, "age": null},
        "mode": {"train": {"class": 2}},
        "budget_cents": 18_446_744_073_709_551_615_u64,
        "note": null,
        "contact": null,
        "route": {
            "to": "Lyon",
            "via": [{"to": "Dijon", "via": [], "alternative": null}],
            "alternative": null,
        },
        "retries": null,
        "meal": {"kind": "vegetarian", "strict": true},
    })
}

/// `plan_trip`'s input as a plain client sends it.
fn plain_trip() -> Value {
    json!({
        "traveller": {"name": "Ada", "home": {"city": "Paris", "country": "FR"}},
        "mode": {"flight": {"carrier": "AF", "max_stops": 1}},
        "budget_cents": 120_000,
        "labels": {"purpose": "conference"},
        "seats": {"A": 2},
        "route": {"to": "Oslo", "via": [], "alternative": {"to": "Bergen", "via": []}},
        "meal": {"kind": "none"},
    })
}

#[tokio::test]
async fn each_format_is_served_an_unknown_one_is_refused_and_none_is_unchanged() {
    let dir = temp_dir();
    let server = TestServer::examples(dir.path()).await;
    let (status, plain) = server.api.get("/tools").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = plain["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ask_human", "echo", "issue_refund", "send_email"]);
    assert!(
        plain["tools"][1]["input_schema"]["$schema"].is_string(),
        "the tool's own schema"
    );

    let listed = |body: &Value, format: &str| -> Vec<Value> {
        let tools = body["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{format}: {body}"));
        assert_eq!(body.as_object().unwrap().len(), 1, "{format}: only `tools`");
        match format {
            "gemini" => tools[0]["functionDeclarations"].as_array().unwrap().clone(),
            _ => tools.clone(),
        }
    };
    for format in FORMATS {
        let (status, body) = server.api.get(&format!("/tools?format={format}")).await;
        assert_eq!(status, StatusCode::OK, "{format}: {body}");
        let tools = listed(&body, format);
        assert_eq!(tools.len(), names.len(), "{format}");
        let echo = &tools[1];
        let (name, schema) = match format {
            "openai" => (&echo["function"]["name"], &echo["function"]["parameters"]),
            "openai-responses" => (&echo["name"], &echo["parameters"]),
            "anthropic" => (&echo["name"], &echo["input_schema"]),
            "gemini" => (&echo["name"], &echo["parametersJsonSchema"]),
            _ => (&echo["name"], &echo["inputSchema"]),
        };
        assert_eq!(name, "echo", "{format}: name order");
        assert_eq!(schema["type"], "object", "{format}");
        assert_eq!(schema["properties"]["text"]["type"], "string", "{format}");
        for gone in ["$schema", "title"] {
            assert!(schema.get(gone).is_none(), "{format}: {gone}");
        }
    }
    let (_, mcp) = server.api.get("/tools?format=mcp").await;
    let refund = &mcp["tools"][2];
    assert_eq!(refund["annotations"]["readOnlyHint"], false);
    assert_eq!(refund["_meta"]["dev.toolgate/effect"], "write");
    assert_eq!(refund["outputSchema"]["type"], "object");
    assert!(
        mcp["tools"][1].get("outputSchema").is_none(),
        "echo declares none"
    );

    for bad in ["?format=OpenAI", "?format=", "?format=claude"] {
        let (status, body) = server.api.get(&format!("/tools{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_error(&body, "bad_request");
    }
    server.stop().await;
}

#[tokio::test]
async fn every_format_passes_its_providers_own_checks() {
    let dir = temp_dir();
    let server = TestServer::start(shapes::tools(dir.path()), dir.path()).await;
    let mut formats = Map::new();
    for format in FORMATS {
        let (status, body) = server.api.get(&format!("/tools?format={format}")).await;
        assert_eq!(status, StatusCode::OK, "{format}: {body}");
        formats.insert(format.into(), body["tools"].clone());
    }

    // Strict wherever strict mode can say the schema: all but the tool with maps.
    for tool in formats["openai"].as_array().unwrap() {
        let name = tool["function"]["name"].as_str().unwrap();
        assert_eq!(tool["function"]["strict"], name != "plan_trip", "{name}");
    }

    let (status, planned) = server.api.call("plan_trip", plain_trip()).await;
    assert_eq!(status, StatusCode::OK, "{planned}");
    let (status, refunded) = server
        .api
        .call(
            "issue_refund",
            json!({"order_id": "o-1", "amount_cents": 5, "reason": "late"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{refunded}");

    let dump = json!({
        "formats": formats,
        "plain_inputs": {"plan_trip": plain_trip(), "echo": {"text": "hi"}},
        "strict_inputs": {"book_trip": strict_booking()},
        "outputs": {"plan_trip": planned["output"], "issue_refund": refunded["output"]},
    });
    let said = common::providers::judged_by_providers(dir.path(), &dump);
    for format in FORMATS {
        assert!(
            said.contains(&format!("ok {format}:")),
            "{format} unchecked:\n{said}"
        );
    }

    // The strict-mode input the checks found to fit the strict schema is a call that runs,
    // its `null` for a defaulted field read as absent.
    let (status, booked) = server.api.call("book_trip", strict_booking()).await;
    assert_eq!(status, StatusCode::OK, "{booked}");
    assert_eq!(booked["output"]["retries"], 0);
    assert_eq!(booked["output"]["note"], Value::Null);
    assert_eq!(booked["output"]["budget_cents"], u64::MAX);
    server.stop().await;
}
