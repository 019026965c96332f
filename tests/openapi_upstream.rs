//! REST APIs behind toolgate: an `[[upstreams]]` entry with an OpenAPI document, served by the
//! real binary, calling Prism (a server that answers from the same document and refuses any
//! request that breaks it) through a recorder, so each test reads what reached the API and
//! Prism's judgement of it, not what toolgate says it sent.

mod common;

use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use common::prism::{Prism, Recorder, example_document, github_document};
use common::upstream::{descriptor, tool_names};
use common::{Binary, temp_dir};

/// The binary serving the examples and `config` (written to a file in `dir`).
fn serve(dir: &Path, config: &str) -> Binary {
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, config).unwrap();
    Binary::start_with(dir, &["--config", path.to_str().unwrap()], &[])
}

/// The petstore entry: `document` (a path), requests to `base`, both credentials, and `extra`.
fn petstore(document: &Path, base: &str, extra: &str) -> String {
    format!(
        "[[upstreams]]\nname = \"pets\"\nopenapi = {document:?}\nbase_url = {base:?}\n\
         credentials = {{ petstore_auth = \"oauth-token\", api_key = \"key-1\" }}\n{extra}\n",
    )
}

/// Every operation of the Petstore but `uploadFile` (a file upload), with its effect.
const PETSTORE: [(&str, &str); 19] = [
    ("addPet", "write"),
    ("createUser", "write"),
    ("createUsersWithArrayInput", "write"),
    ("createUsersWithListInput", "write"),
    ("deleteOrder", "idempotent"),
    ("deletePet", "idempotent"),
    ("deleteUser", "idempotent"),
    ("findPetsByStatus", "read"),
    ("findPetsByTags", "read"),
    ("getInventory", "read"),
    ("getOrderById", "read"),
    ("getPetById", "read"),
    ("getUserByName", "read"),
    ("loginUser", "read"),
    ("logoutUser", "read"),
    ("placeOrder", "write"),
    ("updatePet", "idempotent"),
    ("updatePetWithForm", "write"),
    ("updateUser", "idempotent"),
];

async fn every_operation_is_a_tool_with_its_effect_and_schemas(document: &str) {
    let dir = temp_dir();
    let server = serve(
        dir.path(),
        &petstore(&example_document(document), "http://127.0.0.1:9", ""),
    );
    let api = &server.api;
    let mut names: Vec<String> = tool_names(api)
        .await
        .into_iter()
        .filter(|name| name.starts_with("pets__"))
        .collect();
    names.sort();
    let expected: Vec<String> = PETSTORE
        .iter()
        .map(|(id, _)| format!("pets__{id}"))
        .collect();
    assert_eq!(names, expected);
    for (id, effect) in PETSTORE {
        let tool = descriptor(api, &format!("pets__{id}")).await;
        assert_eq!(tool["effect"], effect, "{id}");
    }
    // The file upload is named at start, with why.
    let log = server.log();
    assert!(
        log.iter().any(|line| line.contains("uploadFile")
            && (line.contains("file field `file`")
                || line.contains("application/octet-stream, which toolgate does not send"))
            && line.contains("not served")),
        "{log:#?}"
    );

    let find = descriptor(api, "pets__findPetsByStatus").await;
    assert!(
        find["description"]
            .as_str()
            .unwrap()
            .starts_with("GET /pet/findByStatus\n\nFinds Pets by status"),
        "{find}"
    );
    let status = &find["input_schema"]["properties"]["status"];
    assert_eq!(status["type"], "array", "{find}");
    assert_eq!(
        status["items"]["enum"],
        json!(["available", "pending", "sold"])
    );
    assert_eq!(find["input_schema"]["required"], json!(["status"]));
    assert_eq!(find["output_schema"]["type"], "array", "{find}");
    assert_eq!(
        find["output_schema"]["items"]["required"],
        json!(["name", "photoUrls"])
    );

    let get = descriptor(api, "pets__getPetById").await;
    assert_eq!(
        get["input_schema"]["properties"]["petId"]["type"],
        "integer"
    );
    assert_eq!(get["input_schema"]["required"], json!(["petId"]));
    assert_eq!(get["output_schema"]["properties"]["name"]["type"], "string");

    // A body (a `$ref` to a request body, to a schema) is the input's `body`.
    let add = descriptor(api, "pets__addPet").await;
    assert_eq!(add["input_schema"]["required"], json!(["body"]), "{add}");
    let body = &add["input_schema"]["properties"]["body"];
    assert_eq!(body["required"], json!(["name", "photoUrls"]), "{add}");
    assert_eq!(
        body["properties"]["category"]["properties"]["name"]["type"],
        "string"
    );

    // A call whose input breaks the schema never reaches the API.
    let (status, body) = api.call("pets__getPetById", json!({"petId": "five"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}

#[tokio::test]
async fn every_petstore_operation_is_a_tool_with_its_effect_and_schemas_30_json() {
    every_operation_is_a_tool_with_its_effect_and_schemas("3.0/json/petstore.json").await;
}

#[tokio::test]
async fn every_petstore_operation_is_a_tool_with_its_effect_and_schemas_31_yaml() {
    every_operation_is_a_tool_with_its_effect_and_schemas("3.1/yaml/petstore.yaml").await;
}

#[tokio::test]
async fn calls_of_each_method_reach_prism_valid() {
    let document = example_document("3.0/json/petstore.json");
    let prism = Prism::start(&document).await;
    let recorder = Recorder::start(&prism).await;
    let dir = temp_dir();
    let server = serve(dir.path(), &petstore(&document, &recorder.url(), ""));
    let api = &server.api;
    let pet =
        json!({"name": "Rex", "photoUrls": ["https://example.com/rex.png"], "status": "available"});
    let calls = [
        // The only answers these operations declare are errors: Prism gives the declared one.
        ("addPet", json!({"body": pet}), "405"),
        ("updatePet", json!({"body": pet}), "400"),
        (
            "updatePetWithForm",
            json!({"petId": 7, "body": {"name": "Rex", "status": "sold"}}),
            "405",
        ),
        ("deletePet", json!({"petId": 7, "api_key": "extra"}), "400"),
        (
            "findPetsByStatus",
            json!({"status": ["available", "sold"]}),
            "200",
        ),
        ("findPetsByTags", json!({"tags": ["a b", "c/d"]}), "200"),
        ("getPetById", json!({"petId": 7}), "200"),
        ("getInventory", json!({}), "200"),
        (
            "placeOrder",
            json!({"body": {"petId": 7, "quantity": 1}}),
            "200",
        ),
        ("getOrderById", json!({"orderId": 5}), "200"),
        ("deleteOrder", json!({"orderId": 5}), "400"),
        (
            "createUsersWithArrayInput",
            json!({"body": [{"username": "ann"}]}),
            "200",
        ),
        (
            "loginUser",
            json!({"username": "ann", "password": "p w&d"}),
            "200",
        ),
        ("getUserByName", json!({"username": "ann smith"}), "200"),
        (
            "updateUser",
            json!({"username": "ann", "body": {"email": "a@example.com"}}),
            "400",
        ),
    ];
    for (id, input, answer) in &calls {
        let (status, body) = api.call(&format!("pets__{id}"), input.clone()).await;
        if *answer == "200" {
            assert_eq!(status, StatusCode::OK, "{id}: {body}");
            assert_eq!(body["status"], "completed", "{id}: {body}");
        } else {
            // A 4xx is the tool failing, with the status.
            assert_eq!(body["status"], "failed", "{id}: {body}");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                message.starts_with(&format!("The API answered {answer}")),
                "{id}: {body}"
            );
        }
    }
    let seen = recorder.seen();
    assert_eq!(seen.len(), calls.len(), "{seen:#?}");
    for request in &seen {
        assert_eq!(request.refused, None, "Prism refused {request:#?}");
    }
    let find = &recorder.to("GET", "/pet/findByStatus")[0];
    assert_eq!(
        find.target,
        "/pet/findByStatus?status=available&status=sold"
    );
    assert_eq!(find.header("authorization"), Some("Bearer oauth-token"));
    let tags = &recorder.to("GET", "/pet/findByTags")[0];
    assert_eq!(tags.target, "/pet/findByTags?tags=a+b&tags=c%2Fd");
    let get = &recorder.to("GET", "/pet/7")[0];
    assert_eq!(get.header("api_key"), Some("key-1"));
    assert_eq!(get.header("authorization"), None);
    let user = &recorder.to("GET", "/user/ann")[0];
    assert_eq!(user.target, "/user/ann%20smith");
    let form = &recorder.to("POST", "/pet/7")[0];
    assert_eq!(
        form.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(&form.body[..], b"name=Rex&status=sold");
    let order = &recorder.to("POST", "/store/order")[0];
    assert_eq!(order.header("content-type"), Some("application/json"));
    assert_eq!(
        serde_json::from_slice::<Value>(&order.body).unwrap(),
        json!({"petId": 7, "quantity": 1})
    );
    // A write carries an idempotency key (the call's id, when the caller gave none); a read and
    // an idempotent call none.
    assert!(
        order
            .header("idempotency-key")
            .unwrap()
            .starts_with("call_")
    );
    assert_eq!(find.header("idempotency-key"), None);
    assert_eq!(
        recorder.to("DELETE", "/store/order/5")[0].header("idempotency-key"),
        None
    );
}

#[tokio::test]
async fn a_gated_write_runs_once_when_approved_with_its_key_and_a_replay_sends_nothing() {
    let document = example_document("3.1/json/petstore.json");
    let prism = Prism::start(&document).await;
    let recorder = Recorder::start(&prism).await;
    let dir = temp_dir();
    let policy = "[upstreams.policies.placeOrder]\nrequire_approval = true\n";
    let server = serve(dir.path(), &petstore(&document, &recorder.url(), policy));
    let api = &server.api;
    let input = json!({"body": {"petId": 7, "quantity": 2, "status": "placed"}});

    let (status, _, _, body) = api
        .call_keyed("pets__placeOrder", "order-7", input.clone())
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let call_id = body["call_id"].as_str().unwrap().to_owned();
    let token = body["suspension"]["token"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(recorder.seen().is_empty(), "sent before approval");

    let (status, body) = api.approve(&token, json!({"note": "fine"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    let output = body["output"].clone();
    assert!(output["id"].is_i64(), "{body}");
    let sent = recorder.to("POST", "/store/order");
    assert_eq!(sent.len(), 1, "{sent:#?}");
    // The key the API sees is the caller's, scoped to the caller and hashed (as every handler
    // sees it): two callers' `order-7` are two keys upstream too.
    let key = sent[0].header("idempotency-key").unwrap().to_owned();
    assert!(key.starts_with("client:") && key.len() == 71, "{key}");
    assert_eq!(sent[0].refused, None);

    // The same key again: the record answers, and nothing more reaches the API.
    let (status, replayed, _, body) = api.call_keyed("pets__placeOrder", "order-7", input).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(replayed.as_deref(), Some("true"));
    assert_eq!(body["call_id"], call_id.as_str());
    assert_eq!(body["output"], output);
    assert_eq!(recorder.to("POST", "/store/order").len(), 1);
}

/// The ids of the operations of GitHub's document tagged `tag`, as the document lists them.
fn github_operations(tag: &str) -> Vec<String> {
    let text = std::fs::read_to_string(github_document()).unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    let mut ids = Vec::new();
    for item in document["paths"].as_object().unwrap().values() {
        for operation in item.as_object().unwrap().values() {
            let tagged = operation["tags"]
                .as_array()
                .is_some_and(|tags| tags.iter().any(|t| t == tag));
            if tagged {
                ids.push(operation["operationId"].as_str().unwrap().to_owned());
            }
        }
    }
    ids
}

#[tokio::test]
async fn githubs_whole_document_filtered_by_tag_serves_tools_the_providers_take_and_prism_accepts()
{
    let document = github_document();
    // The answers made from the schemas: some of the document's examples are wrapped in an
    // extension Prism answers as they are, which the output schemas rightly refuse.
    let prism = Prism::start_with(&document, &["--dynamic", "--seed", "39"]).await;
    let recorder = Recorder::start(&prism).await;
    let dir = temp_dir();
    let config = format!(
        "[[upstreams]]\nname = \"gh\"\nopenapi = {:?}\nbase_url = {:?}\ninclude = [\"tag:issues\"]\n\
         headers = {{ Authorization = \"Bearer gh-token\" }}\n",
        document.to_str().unwrap(),
        recorder.url()
    );
    let server = serve(dir.path(), &config);
    let api = &server.api;

    // Every operation of the tag, and nothing else, none skipped.
    let mut expected: Vec<String> = github_operations("issues")
        .iter()
        .map(|id| format!("gh__{}", id.replace('/', "_")))
        .collect();
    expected.sort();
    let mut names: Vec<String> = tool_names(api)
        .await
        .into_iter()
        .filter(|name| name.starts_with("gh__"))
        .collect();
    names.sort();
    assert!(expected.len() > 40, "{expected:?}");
    assert_eq!(names, expected);
    let log = server.log().join("\n");
    assert!(log.contains("skipped=0"), "{log}");

    // Each provider's own code takes every tool's schema.
    let mut formats = serde_json::Map::new();
    for format in ["openai", "openai-responses", "anthropic", "gemini", "mcp"] {
        let (status, body) = api.get(&format!("/tools?format={format}")).await;
        assert_eq!(status, StatusCode::OK, "{format}: {body}");
        formats.insert(format.into(), body["tools"].clone());
    }
    let dump = json!({"formats": formats, "plain_inputs": {}, "strict_inputs": {}, "outputs": {}});
    common::providers::judged_by_providers(dir.path(), &dump);

    // Calls of each method reach Prism, serving the same document, valid.
    let calls = [
        (
            "issues_list-for-repo",
            json!({"owner": "octo", "repo": "hello", "state": "open", "labels": "bug,ui", "per_page": 5}),
        ),
        (
            "issues_get",
            json!({"owner": "octo", "repo": "hello", "issue_number": 7}),
        ),
        (
            "issues_create",
            json!({"owner": "octo", "repo": "hello", "body": {"title": "Found a bug", "labels": ["bug"]}}),
        ),
        (
            "issues_update",
            json!({"owner": "octo", "repo": "hello", "issue_number": 7, "body": {"state": "closed", "state_reason": "completed"}}),
        ),
        (
            "issues_lock",
            json!({"owner": "octo", "repo": "hello", "issue_number": 7, "body": {"lock_reason": "resolved"}}),
        ),
        (
            "issues_remove-label",
            json!({"owner": "octo", "repo": "hello", "issue_number": 7, "name": "needs triage"}),
        ),
    ];
    for (id, input) in &calls {
        let (status, body) = api.call(&format!("gh__{id}"), input.clone()).await;
        assert_eq!(status, StatusCode::OK, "{id}: {body}");
        assert_eq!(body["status"], "completed", "{id}: {body}");
    }
    let seen = recorder.seen();
    assert_eq!(seen.len(), calls.len(), "{seen:#?}");
    for request in &seen {
        assert_eq!(request.refused, None, "Prism refused {request:#?}");
        assert_eq!(request.header("authorization"), Some("Bearer gh-token"));
    }
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["GET", "GET", "POST", "PATCH", "PUT", "DELETE"]);
    assert_eq!(
        seen[5].target,
        "/repos/octo/hello/issues/7/labels/needs%20triage"
    );
}

#[tokio::test]
async fn a_changed_operation_is_held_until_an_admin_accepts_it() {
    let original = example_document("3.0/json/petstore.json");
    let prism = Prism::start(&original).await;
    let recorder = Recorder::start(&prism).await;
    let dir = temp_dir();
    let copy = dir.path().join("petstore.json");
    std::fs::copy(&original, &copy).unwrap();
    let server = serve(
        dir.path(),
        &petstore(
            &copy,
            &recorder.url(),
            "refresh_s = 1\ninclude = [\"tag:store\"]",
        ),
    );
    let api = &server.api;
    let (status, body) = api.call("pets__getInventory", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // The API moves the route: the same tool, another request.
    let mut document: Value =
        serde_json::from_str(&std::fs::read_to_string(&copy).unwrap()).unwrap();
    let paths = document["paths"].as_object_mut().unwrap();
    let item = paths.remove("/store/inventory").unwrap();
    paths.insert("/store/stock".into(), item);
    std::fs::write(&copy, document.to_string()).unwrap();

    let change = common::eventually("the change is seen", async || {
        let (status, body) = api.get("/upstreams/pets/changes").await;
        (status == StatusCode::OK && body["changes"].as_array()?.len() == 1).then_some(body)
    })
    .await;
    let change = &change["changes"][0];
    assert_eq!(change["tool"], "getInventory", "{change}");
    assert_eq!(change["kind"], "changed");
    assert!(
        change["differs"]
            .as_array()
            .unwrap()
            .contains(&json!("description")),
        "{change}"
    );
    // The replica that saw the change serves the held tool right after it records the change.
    let body = common::eventually("the tool is held", async || {
        let (status, body) = api.call("pets__getInventory", json!({})).await;
        (status == StatusCode::CONFLICT).then_some(body)
    })
    .await;
    assert_eq!(body["error"]["code"], "tool_changed");
    let before = recorder.seen().len();

    // Accepted: calls go to the new route.
    let hash = change["upstream"]["hash"].as_str().unwrap();
    let (status, body) = api
        .post(
            "/upstreams/pets/changes/getInventory/accept",
            json!({"hash": hash}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let _ = api.call("pets__getInventory", json!({})).await;
    let seen = recorder.seen();
    assert_eq!(seen.len(), before + 1, "{seen:#?}");
    assert!(
        seen[..before]
            .iter()
            .all(|s| s.target == "/store/inventory"),
        "{seen:#?}"
    );
    assert_eq!(seen[before].target, "/store/stock");
}

#[tokio::test]
async fn header_query_and_form_field_styles_reach_prism_valid() {
    let document = example_document("3.0/json/parameters-style.json");
    let prism = Prism::start(&document).await;
    let recorder = Recorder::start(&prism).await;
    let dir = temp_dir();
    // The cookie operations share a path with `#`s in it (and cookies are not sent); Prism 5.16
    // itself fails on a path parameter holding an object, on `pipeDelimited` and
    // `spaceDelimited` query parameters, and on objects in `form` ones (a TypeError in its
    // validator, the request unanswered and the server gone): those styles are covered by the
    // unit tests of `upstream::openapi::request`, path encoding by the Petstore's calls.
    let config = format!(
        "[[upstreams]]\nname = \"styles\"\nopenapi = {:?}\nbase_url = {:?}\n\
         exclude = [\"/cookies*\", \"/anything/path/*\", \"query_*Delimited*\"]\n",
        document.to_str().unwrap(),
        recorder.url()
    );
    let server = serve(dir.path(), &config);
    let api = &server.api;
    let values = json!({
        "primitive": "x y",
        "array": ["a", "b/c"],
        "object": {"name": "n", "description": "d"},
    });
    let names: Vec<String> = tool_names(api)
        .await
        .into_iter()
        .filter(|name| name.starts_with("styles__"))
        .collect();
    assert_eq!(names.len(), 13, "{names:?}");
    for name in &names {
        // Each input property the tool has, filled; a form's fields under `body`.
        let schema = &descriptor(api, name).await["input_schema"];
        let mut input = serde_json::Map::new();
        for (property, field) in schema["properties"].as_object().unwrap() {
            let value = if property == "body" {
                // Plain fields: the form's primitive one, where it has one.
                let fields = field["properties"].as_object().unwrap();
                match fields.contains_key("primitive") {
                    true => json!({"primitive": values["primitive"]}),
                    false => json!({}),
                }
            } else if property == "object"
                && !(name.contains("deepObject") || name.contains("headers"))
            {
                // Prism fails on an object in any other style (its validator throws).
                continue;
            } else {
                values[property].clone()
            };
            input.insert(property.clone(), value);
        }
        let (status, body) = api.call(name, Value::Object(input)).await;
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
    }
    let seen = recorder.seen();
    assert_eq!(seen.len(), names.len());
    for request in &seen {
        assert_eq!(request.refused, None, "Prism refused {request:#?}");
    }
    let target = |method: &str, prefix: &str| recorder.to(method, prefix)[0].target.clone();
    assert_eq!(
        target("GET", "/anything/query/deepObject"),
        "/anything/query/deepObject?object%5Bdescription%5D=d&object%5Bname%5D=n"
    );
    assert_eq!(
        target("GET", "/anything/query/form"),
        "/anything/query/form?primitive=x+y&array=a%2Cb%2Fc"
    );
    let headers = &recorder.to("POST", "/anything/headers/simple")[0];
    assert_eq!(headers.header("object"), Some("description=d,name=n"));
    assert_eq!(headers.header("array"), Some("a,b/c"));
    let form = &recorder.to("POST", "/anything/form-data")[0];
    let text = String::from_utf8_lossy(&form.body);
    assert!(
        form.header("content-type")
            .unwrap()
            .starts_with("multipart/form-data; boundary="),
        "{form:#?}"
    );
    assert!(text.contains("name=\"primitive\"\r\n\r\nx y\r\n"), "{text}");
}

#[tokio::test]
async fn an_answer_past_its_bound_fails_the_call() {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/big",
        get(async || {
            let huge = format!("{{\"a\":\"{}\"}}", "x".repeat(17 * 1024 * 1024));
            ([("content-type", "application/json")], huge)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let dir = temp_dir();
    let document = json!({"openapi": "3.0.3", "info": {"title": "t", "version": "1"},
        "paths": {"/big": {"get": {"operationId": "big", "responses": {"200": {"description": "ok"}}}}}});
    let path = dir.path().join("api.json");
    std::fs::write(&path, document.to_string()).unwrap();
    let config = format!(
        "[[upstreams]]\nname = \"api\"\nopenapi = {:?}\nbase_url = \"http://{addr}\"\n",
        path.to_str().unwrap()
    );
    let server = serve(dir.path(), &config);
    let (_, body) = server.api.call("api__big", json!({})).await;
    assert_eq!(body["status"], "failed", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("a body larger than 16 MiB"), "{message}");
}
