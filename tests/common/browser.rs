//! A browser, as the inbox's pages meet one: a cookie jar (one cookie per name, as the server
//! sets them; a cookie set empty or with `Max-Age=0` is dropped), no redirects followed, forms
//! posted url-encoded; and the answers it gets. The inbox's, the decision links' and the edits'
//! tests drive the pages through it.

use std::collections::HashMap;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;

/// A browser's cookie jar on one server.
pub struct Browser {
    /// The server's base URL.
    pub base: String,
    /// The client, which follows no redirect.
    pub client: reqwest::Client,
    /// The cookies it holds, by name.
    pub cookies: HashMap<String, String>,
}

/// An answer: status, headers, body.
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    /// The header `name`, or `""`.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Every `set-cookie` header.
    pub fn set_cookies(&self) -> Vec<&str> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    }

    /// The first hidden `csrf` field's value.
    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("no csrf field in {}", self.body));
        let rest = &self.body[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

impl Browser {
    /// A browser with no cookies, on `server`.
    pub fn new(server: &super::TestServer) -> Browser {
        Browser::at(&server.api.base)
    }

    /// A browser with no cookies, on the server at `base`.
    pub fn at(base: &str) -> Browser {
        super::tls();
        Browser {
            base: base.to_owned(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: HashMap::new(),
        }
    }

    /// The `cookie` header it sends.
    pub fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Sends `request` with its cookies, and keeps the ones it is answered.
    pub async fn send(&mut self, request: reqwest::RequestBuilder) -> Page {
        let request = if self.cookies.is_empty() {
            request
        } else {
            request.header("cookie", self.cookie_header())
        };
        let response = request.send().await.expect("request sent");
        let (status, headers) = (response.status(), response.headers().clone());
        for value in headers.get_all("set-cookie") {
            let text = value.to_str().unwrap();
            let pair = text.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() || text.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        let body = response.text().await.unwrap();
        Page {
            status,
            headers,
            body,
        }
    }

    /// `GET path`.
    pub async fn get(&mut self, path: &str) -> Page {
        let request = self.client.get(format!("{}{path}", self.base));
        self.send(request).await
    }

    /// `POST path` with the url-encoded `form`.
    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.send(request).await
    }

    /// Opens the inbox's sign-in page and signs in with the API key `key`: the answer.
    pub async fn sign_in(&mut self, key: &str) -> Page {
        let page = self.get("/inbox").await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let csrf = page.csrf();
        self.post("/inbox/sign-in", &[("key", key), ("csrf", &csrf)])
            .await
    }
}
