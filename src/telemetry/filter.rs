//! Which log lines are written: `RUST_LOG`'s filter when it is set and valid, else the `log`
//! key's, else `info`; each with the MCP SDK's own INFO lines left out unless it names them.

use tracing_subscriber::EnvFilter;

/// The MCP SDK's directive, added to a filter that does not name `rmcp` itself: its INFO lines
/// are its internals (at each upstream connect, the server's whole `initialize` answer in one
/// line; a child's exit; every notification), and ours say what matters ("the upstream MCP
/// server is up", with its tool count). `rmcp=info` (or `debug`) in the filter shows them.
const SDK_DIRECTIVE: &str = "rmcp=warn";

/// The filter of log lines: `from_env` (`RUST_LOG`) when it is set and valid, else
/// `configured` (the `log` key) when valid, else `info`; each with the SDK's INFO lines left
/// out (`rmcp=warn`) unless one of its directives is about `rmcp` already.
pub fn log_filter(from_env: Option<&str>, configured: &str) -> EnvFilter {
    from_env
        .and_then(|filter| EnvFilter::try_new(quiet_sdk(filter)).ok())
        .or_else(|| EnvFilter::try_new(quiet_sdk(configured)).ok())
        .unwrap_or_else(|| EnvFilter::new(quiet_sdk("info")))
}

/// `filter` with [`SDK_DIRECTIVE`], unless one of its directives is about `rmcp` already.
fn quiet_sdk(filter: &str) -> String {
    let names_sdk = filter.split(',').any(|directive| {
        let target = directive
            .trim()
            .split(['=', '['])
            .next()
            .unwrap_or_default();
        target == "rmcp" || target.starts_with("rmcp::")
    });
    if names_sdk {
        filter.to_owned()
    } else {
        format!("{filter},{SDK_DIRECTIVE}")
    }
}

#[cfg(test)]
mod tests {
    use super::{log_filter, quiet_sdk};

    #[test]
    fn the_sdk_is_quiet_unless_the_filter_names_it() {
        assert_eq!(quiet_sdk("info"), "info,rmcp=warn");
        assert_eq!(
            quiet_sdk("toolgate=debug,info"),
            "toolgate=debug,info,rmcp=warn"
        );
        assert_eq!(quiet_sdk("info,rmcp=debug"), "info,rmcp=debug");
        assert_eq!(quiet_sdk("rmcp::service=info"), "rmcp::service=info");
        assert_eq!(
            quiet_sdk("info, rmcp[serve]=info"),
            "info, rmcp[serve]=info"
        );
        // A target that only starts with the same letters is another crate.
        assert_eq!(quiet_sdk("rmcpx=info"), "rmcpx=info,rmcp=warn");
    }

    #[test]
    fn the_environment_wins_when_valid_then_the_key_then_info() {
        let shown = |from_env, configured| log_filter(from_env, configured).to_string();
        let from_env = shown(Some("toolgate=debug"), "toolgate=trace");
        assert!(from_env.contains("toolgate=debug"), "{from_env}");
        assert!(from_env.contains("rmcp=warn"), "{from_env}");
        let configured = shown(Some("toolgate=[[not a filter"), "toolgate=trace");
        assert!(configured.contains("toolgate=trace"), "{configured}");
        let neither = shown(None, "toolgate=[[not a filter");
        assert!(!neither.contains("toolgate"), "{neither}");
        assert!(neither.contains("info"), "{neither}");
    }
}
