//! The loader's tests: layers, key names in errors, and the sections' translations.

use std::path::PathBuf;
use std::time::Duration;

use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_documented_defaults_are_the_defaults() {
    let text = include_str!("../../config/default.toml");
    assert_eq!(Config::from_toml(text).unwrap(), Config::default());
}

#[test]
fn env_and_flags_override_in_order() {
    let config = Config::load(
        None,
        env(&[
            ("TOOLGATE_BIND", "0.0.0.0:9000"),
            ("TOOLGATE_EXAMPLES__SEND_EMAIL_DELAY_MS", "3000"),
            ("TOOLGATE_EXAMPLES__ENABLED", "false"),
            ("TOOLGATE_LOG", "debug,hyper=warn"),
            ("TOOLGATE_DATA_DIR", "2024"),
            // The test suite's, not a config key: ignored, not refused.
            (
                "TOOLGATE_TEST_DATABASE_URL",
                "postgres://postgres@127.0.0.1/postgres",
            ),
            ("PATH", "/usr/bin"),
        ]),
        Overrides {
            bind: Some("127.0.0.1:1".parse().unwrap()),
            data_dir: Some("/tmp/x".into()),
            database_url: None,
        },
    )
    .unwrap();
    assert_eq!(config.bind, "127.0.0.1:1".parse().unwrap());
    assert_eq!(config.data_dir, PathBuf::from("/tmp/x"), "the flag wins");
    assert_eq!(config.log, "debug,hyper=warn");
    assert_eq!(config.examples.send_email_delay_ms, 3000);
    assert!(!config.examples.enabled);
}

#[test]
fn string_keys_from_the_environment_stay_strings() {
    let config = Config::load(
        None,
        env(&[("TOOLGATE_DATA_DIR", "2024"), ("TOOLGATE_LOG", "true")]),
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(config.data_dir, PathBuf::from("2024"));
    assert_eq!(config.log, "true");
}

#[test]
fn unknown_keys_and_wrong_types_name_the_key() {
    let err = Config::from_toml("[examples]\napproval_threshold = 5\n").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("examples") && text.contains("approval_threshold"),
        "{text}"
    );

    let err = Config::from_toml("[examples]\nsend_email_delay_ms = \"soon\"\n").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("examples.send_email_delay_ms"), "{text}");

    let err =
        Config::load(None, env(&[("TOOLGATE_BOGUS", "1")]), Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("bogus"), "{err}");

    let err = Config::from_toml("bind = \"not an address\"").unwrap_err();
    assert!(err.to_string().contains("`bind`"), "{err}");

    let err = Config::from_toml(
        "[[auth.keys]]\nname = \"a\"\nrole = \"caller\"\ntoken_sha256 = \"abc\"\n",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("auth.keys[0].token_sha256"),
        "{err}"
    );
    let err =
        Config::from_toml("[[auth.keys]]\nname = \"a\"\nrole = \"root\"\ntoken_sha256 = \"abc\"\n")
            .unwrap_err();
    assert!(err.to_string().contains("auth.keys[0].role"), "{err}");
    let err = Config::from_toml("[tools.echo]\ntimeout_ms = 0\n").unwrap_err();
    assert!(err.to_string().contains("tools.echo.timeout_ms"), "{err}");
}

#[test]
fn key_names_that_differ_only_by_case_are_refused() {
    // The four-eyes rule and a quorum count principals by name: `twin` and `Twin` would be two
    // approvers for one person.
    let key = |name: &str| {
        format!(
            "[[auth.keys]]\nname = \"{name}\"\nrole = \"approver\"\ntoken_sha256 = \"{}\"\n",
            "ab".repeat(32)
        )
    };
    let err = Config::from_toml(&(key("twin") + &key("Twin")))
        .and_then(|config| config.api_keys().map(drop))
        .unwrap_err()
        .to_string();
    assert!(err.contains("auth.keys[1].name"), "{err}");
    assert!(err.contains("only by case"), "{err}");
    assert!(
        Config::from_toml(&(key("twin") + &key("twins")))
            .and_then(|config| config.api_keys().map(drop))
            .is_ok()
    );
}

#[test]
fn the_database_url_comes_from_file_env_or_flag_and_is_never_shown() {
    let file =
        Config::from_toml("[store]\ndatabase_url = \"postgres://a:pw@h/d\"\npool_size = 4\n")
            .unwrap();
    assert_eq!(file.store.postgres_url(), Some("postgres://a:pw@h/d"));
    assert_eq!(file.store.postgres_options().pool_size, 4);
    assert!(!format!("{file:?}").contains("pw"), "{file:?}");

    let env_set = Config::load(
        None,
        env(&[("TOOLGATE_STORE__DATABASE_URL", "postgres://e@h/d")]),
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(env_set.store.postgres_url(), Some("postgres://e@h/d"));
    let flag = Config::load(
        None,
        env(&[("TOOLGATE_STORE__DATABASE_URL", "postgres://e@h/d")]),
        Overrides {
            database_url: Some("postgres://f@h/d".into()),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(flag.store.postgres_url(), Some("postgres://f@h/d"));
    assert_eq!(
        Config::default().store.postgres_url(),
        None,
        "SQLite by default"
    );

    let err = Config::from_toml("[store]\nlease_ttl_ms = 1000\nheartbeat_ms = 1000\n").unwrap_err();
    assert!(err.to_string().contains("store.lease_ttl_ms"), "{err}");
}

#[test]
fn tool_settings_fall_back_to_the_defaults() {
    let config = Config::from_toml(
        "[tool_defaults]\ntimeout_ms = 1000\napproval_ttl_s = 60\n\
         [tools.send_email]\ntimeout_ms = 50\nmax_concurrency = 2\n",
    )
    .unwrap();
    let dispatch = config.dispatch_config();
    assert_eq!(dispatch.defaults.timeout, Duration::from_secs(1));
    let email = &dispatch.tools["send_email"];
    assert_eq!(email.timeout, Duration::from_millis(50));
    assert_eq!(email.max_concurrency, 2);
    assert_eq!(email.approval_ttl, Some(Duration::from_secs(60)));
}

#[test]
fn upstream_policies_and_approval_gates_become_tool_settings() {
    let config = Config::from_toml(
        "[tools.echo]\nrequire_approval = true\n\
         [[upstreams]]\nname = \"files\"\ncommand = [\"server\"]\n\
         [upstreams.policies.write_file]\nrequire_approval = true\ntimeout_ms = 70\n\
         max_concurrency = 3\napproval_ttl_s = 9\n\
         approval_schema = { type = \"object\", required = [\"ticket\"] }\n",
    )
    .unwrap();
    let dispatch = config.dispatch_config();
    let echo = dispatch.tools["echo"].approval.as_ref().unwrap();
    assert_eq!(echo, &crate::dispatch::ApprovalGate::default());
    let write = &dispatch.tools["files__write_file"];
    assert_eq!(write.timeout, Duration::from_millis(70));
    assert_eq!(write.max_concurrency, 3);
    assert_eq!(write.approval_ttl, Some(Duration::from_secs(9)));
    let gate = write.approval.as_ref().unwrap();
    assert_eq!(gate.input_schema["required"], serde_json::json!(["ticket"]));
    assert!(config.is_upstream_tool("files__anything"));
    assert!(!config.is_upstream_tool("files__"));
    assert!(!config.is_upstream_tool("other__x"));

    let refused = |text: &str| match Config::from_toml(text) {
        Err(ConfigError::Invalid { key, .. }) => key,
        other => panic!("{other:?}"),
    };
    // A schema without the gate it is for, or one that does not compile.
    assert_eq!(
        refused("[tools.echo]\napproval_schema = { type = \"object\" }\n"),
        "tools.echo.approval_schema"
    );
    assert_eq!(
        refused("[tools.echo]\nrequire_approval = true\napproval_schema = { type = 5 }\n"),
        "tools.echo.approval_schema"
    );
    // One tool's settings in two places; two upstreams of one name.
    let twice = "[tools.files__w]\ntimeout_ms = 5\n[[upstreams]]\nname = \"files\"\n\
                 command = [\"s\"]\n[upstreams.policies.w]\ntimeout_ms = 6\n";
    assert_eq!(refused(twice), "tools.files__w");
    let same = "[[upstreams]]\nname = \"a\"\ncommand = [\"s\"]\n\
                [[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
    assert_eq!(refused(same), "upstreams[1].name");
}

#[test]
fn the_webhook_proxy_comes_from_file_or_env_and_is_checked_like_a_target() {
    let hook = "[[webhooks]]\nurl = \"https://example.com/hook\"\n\
                secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
    let from_env = Config::load(
        None,
        env(&[(
            "TOOLGATE_WEBHOOK_DELIVERY__PROXY",
            "http://user:pw@proxy.example.com:3128",
        )]),
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(
        from_env.webhook_delivery.proxy,
        "http://user:pw@proxy.example.com:3128"
    );
    assert!(
        !format!("{from_env:?}").contains("pw"),
        "the proxy's password is never shown: {from_env:?}"
    );
    // A private proxy is refused for a webhook that does not allow private targets...
    let err = Config::from_toml(&format!(
        "{hook}[webhook_delivery]\nproxy = \"http://10.0.0.8:3128\"\n"
    ))
    .unwrap_err();
    assert!(err.to_string().contains("webhook_delivery.proxy"), "{err}");
    assert!(err.to_string().contains("private"), "{err}");
    // ...and let through for one that does.
    Config::from_toml(&format!(
        "{hook}allow_private = true\n[webhook_delivery]\nproxy = \"http://10.0.0.8:3128\"\n"
    ))
    .unwrap();
    for bad in ["not a url", "ftp://proxy.example.com"] {
        let err =
            Config::from_toml(&format!("[webhook_delivery]\nproxy = \"{bad}\"\n")).unwrap_err();
        assert!(
            err.to_string().contains("webhook_delivery.proxy"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn quotas_layer_from_file_env_and_keys_and_bad_ones_name_their_key() {
    let hash = "a".repeat(64);
    let text = format!(
        "[quotas]\ncalls_per_minute = 60\n\
         [[auth.keys]]\nname = \"agent\"\nrole = \"caller\"\ntoken_sha256 = \"{hash}\"\n\
         quotas = {{ calls_per_minute = 600, max_running = 2 }}\n\
         [tools.echo]\nquotas = {{ calls_per_minute = 6, burst = 1 }}\n"
    );
    let config = Config::from_toml(&text).unwrap();
    let dispatch = config.dispatch_config();
    let agent = dispatch.quotas.of(Some("agent"));
    assert_eq!(agent.calls_per_minute, Some(600));
    assert_eq!((agent.max_running, agent.max_held), (Some(2), Some(64)));
    assert_eq!(dispatch.quotas.of(None).calls_per_minute, Some(60));
    assert_eq!(dispatch.tools["echo"].quotas.burst, Some(1));

    let from_env = Config::load(
        None,
        env(&[
            ("TOOLGATE_QUOTAS__MAX_HELD", "3"),
            ("TOOLGATE_TOOLS__ECHO__QUOTAS__MAX_RUNNING", "1"),
        ]),
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(from_env.quotas.max_held, Some(3));
    assert_eq!(from_env.tools["echo"].quotas.unwrap().max_running, Some(1));

    let key_of = |text: &str| match Config::from_toml(text) {
        Err(ConfigError::Invalid { key, .. }) => key,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        key_of("[quotas]\ncalls_per_minute = 0\n"),
        "quotas.calls_per_minute"
    );
    assert_eq!(key_of("[quotas]\nburst = 5\n"), "quotas.burst");
    assert_eq!(key_of("[quotas]\nmax_held = -1\n"), "quotas.max_held");
    assert_eq!(
        key_of("[tools.echo]\nquotas = { max_held = 2 }\n"),
        "tools.echo.quotas.max_held"
    );
    let bad_key = format!(
        "[[auth.keys]]\nname = \"a\"\nrole = \"caller\"\ntoken_sha256 = \"{hash}\"\n\
         quotas = {{ max_running = 0 }}\n"
    );
    assert_eq!(key_of(&bad_key), "auth.keys[0].quotas.max_running");

    // An upstream tool's policy carries its own quota, checked with its upstream.
    let upstream = "[[upstreams]]\nname = \"files\"\ncommand = [\"s\"]\n\
                    [upstreams.policies.w]\nquotas = { calls_per_minute = 30 }\n";
    let config = Config::from_toml(upstream).unwrap();
    let served = &config.dispatch_config().tools["files__w"];
    assert_eq!(served.quotas.calls_per_minute, Some(30));
    let held = upstream.replace("calls_per_minute = 30", "max_held = 1");
    assert_eq!(key_of(&held), "upstreams[0].policies.w.quotas.max_held");
}

#[test]
fn an_issuer_needs_the_resource_url_and_leaves_key_names_alone() {
    let issuer = "[[auth.issuers]]\nname = \"corp\"\nissuer = \"https://id.example.com\"\n\
                  audiences = [\"https://tools.example.com/mcp\"]\n\
                  [[auth.issuers.grants]]\nwhen = { scope = \"tools:call\" }\nrole = \"caller\"\n";
    let err = Config::from_toml(issuer).unwrap_err().to_string();
    assert!(err.contains("auth.resource_url"), "{err}");
    // And no resource without an issuer: a client with a static key is never sent to sign in.
    let err = Config::from_toml("[auth]\nresource_url = \"https://tools.example.com/mcp\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("only with [[auth.issuers]]"), "{err}");
    let with_resource =
        format!("[auth]\nresource_url = \"https://tools.example.com/mcp\"\n{issuer}");
    let config = Config::from_toml(&with_resource).unwrap();
    let issuers = config.issuers().unwrap();
    assert!(issuers.enabled());
    // A key named like one of the issuer's principals would see that principal's calls.
    let key = "[[auth.keys]]\nname = \"corp:alice\"\nrole = \"caller\"\ntoken_sha256 = \""
        .to_owned()
        + &"ab".repeat(32)
        + "\"\n";
    let err = Config::from_toml(&(with_resource.clone() + &key))
        .unwrap_err()
        .to_string();
    assert!(err.contains("auth.keys[0].name"), "{err}");
    let insecure = with_resource.replace(
        "https://tools.example.com/mcp\"\n[[",
        "http://tools.example.com/mcp\"\n[[",
    );
    let err = Config::from_toml(&insecure)
        .and_then(|config| config.issuers().map(drop))
        .unwrap_err()
        .to_string();
    assert!(err.contains("resource_url"), "{err}");
}

#[test]
fn an_upstream_acting_as_its_caller_names_a_configured_issuer_and_is_http() {
    let auth = "[upstreams.auth]\nmode = \"token_exchange\"\nissuer = \"corp\"\n\
                audience = \"https://files.test\"\nclient_id = \"toolgate\"\n\
                client_secret_env = \"S\"\n";
    let issuer = "[auth]\nresource_url = \"https://tools.test/mcp\"\n[[auth.issuers]]\n\
                  name = \"corp\"\nissuer = \"https://id.test\"\naudiences = [\"https://tools.test/mcp\"]\n\
                  [[auth.issuers.grants]]\nwhen = { scope = \"tools:call\" }\nrole = \"caller\"\n";
    let http = format!(
        "{issuer}[[upstreams]]\nname = \"files\"\nurl = \"http://127.0.0.1:9/mcp\"\n{auth}"
    );
    let config = Config::from_toml(&http).unwrap();
    assert_eq!(config.upstreams[0].auth.as_ref().unwrap().issuer, "corp");

    let stdio = format!("{issuer}[[upstreams]]\nname = \"files\"\ncommand = [\"x\"]\n{auth}");
    let err = Config::from_toml(&stdio).unwrap_err();
    assert!(err.to_string().contains("upstreams[0].auth.mode"), "{err}");

    let stranger =
        format!("[[upstreams]]\nname = \"files\"\nurl = \"http://127.0.0.1:9/mcp\"\n{auth}");
    let err = Config::from_toml(&stranger).unwrap_err();
    assert!(
        err.to_string().contains("upstreams[0].auth.issuer"),
        "{err}"
    );
}
