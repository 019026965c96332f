//! `/mcp`'s defence against DNS rebinding is every route's (`crate::http::hosts`), with the
//! SDK transport's own check as a backstop; these tests send the same requests to both and
//! assert they agree, so an SDK upgrade that changes its rules fails here rather than letting
//! the two drift apart.

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::body::Body;
    use axum::http::StatusCode;
    use rmcp::ServerHandler;
    use rmcp::transport::streamable_http_server::StreamableHttpService;
    use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
    use tower::Service;

    use std::sync::Arc;

    use axum::extract::Request;

    use crate::http::hosts::AllowedHosts;

    /// A handler with nothing: the SDK's transport checks the headers before it is asked.
    #[derive(Clone)]
    struct Nothing;

    impl ServerHandler for Nothing {}

    /// Whether the SDK's own check lets the request through, configured as `super::service`
    /// configures it.
    async fn sdk_admits(allowed: &[String], host: Option<&str>, origin: Option<&str>) -> bool {
        let config = super::super::transport_config(allowed, 1 << 20);
        let mut service = StreamableHttpService::new(
            || Ok(Nothing),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        let response = Service::call(&mut service, request(host, origin)).await;
        let response: Result<_, Infallible> = response;
        let status = response.unwrap().status();
        status != StatusCode::FORBIDDEN && status != StatusCode::BAD_REQUEST
    }

    fn request(host: Option<&str>, origin: Option<&str>) -> Request {
        let mut request = Request::post("http://127.0.0.1:8080/mcp")
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(host) = host {
            request = request.header("host", host);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request
            .body(Body::from(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            ))
            .unwrap()
    }

    #[tokio::test]
    async fn the_check_agrees_with_the_sdks() {
        let lists: [&[&str]; 3] = [
            &["127.0.0.1", "localhost"],
            &["0.0.0.0", "mcp.example.com", "::1", "Tools.Internal:8443"],
            &["::1", "localhost", "[fe80::1]"],
        ];
        let hosts = [
            None,
            Some("localhost"),
            Some("LOCALHOST:8080"),
            Some("127.0.0.1:9"),
            Some("[::1]:8080"),
            Some("[::2]"),
            Some("mcp.example.com"),
            Some("mcp.example.com.evil.example"),
            Some("evil.example:8080"),
            Some("tools.internal:8443"),
            Some("tools.internal:8444"),
            Some("tools.internal"),
            Some("[fe80::1]:1"),
            Some("a b"),
            Some(""),
        ];
        let origins = [
            None,
            Some("http://localhost"),
            Some("https://localhost:3000"),
            Some("HTTP://LOCALHOST:1"),
            Some("ws://localhost"),
            Some("http://evil.example"),
            Some("null"),
            Some("localhost"),
            Some(""),
            Some("http://[::1]:6274"),
            Some("https://mcp.example.com"),
            Some("https://tools.internal:8443"),
            Some("http://127.0.0.1:6274"),
            Some("http://[fe80::1]"),
        ];
        for list in lists {
            let list: Vec<String> = list.iter().map(|h| (*h).to_owned()).collect();
            let ours = AllowedHosts::new(&list);
            for host in hosts {
                for origin in origins {
                    let request = request(host, origin);
                    let admitted = ours.check(request.uri(), request.headers()).is_ok();
                    assert_eq!(
                        admitted,
                        sdk_admits(&list, host, origin).await,
                        "{list:?}, Host {host:?}, Origin {origin:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_refusal_names_what_to_list() {
        let ours = AllowedHosts::new(&["127.0.0.1".into()]);
        let request = request(Some("Evil.Example:8080"), None);
        let err = ours.check(request.uri(), request.headers()).unwrap_err();
        assert_eq!(err.code(), "forbidden");
        let message = err.to_object().message;
        assert!(message.contains("`evil.example`"), "{message}");
        assert!(message.contains("[server] allowed_hosts"), "{message}");
    }
}
