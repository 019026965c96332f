//! `[audit.export]`: every entry of the audit chain reaches an OpenTelemetry collector (a
//! receiver on the OTLP protobuf types, `/v1/logs`) and a syslog receiver (RFC 5424, octet
//! counting, over TCP) once and in order, across a restart of toolgate and an outage of both
//! receivers, whose backlog is delivered when they return; the failures are visible to admins
//! (`GET /audit/exports`) and in `/metrics`. Over TLS, only a receiver whose certificate the
//! trusted roots vouch for gets anything.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message as _;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use common::{Backend, Binary, Location, Site, eventually, send};

const ROOT: &str = "tg_root_0123456789abcdef";

/// An OTLP/HTTP logs receiver: the entries' bodies, in the order received; it answers `503`
/// while `failing`.
struct Collector {
    addr: SocketAddr,
    records: Arc<Mutex<Vec<String>>>,
    failing: Arc<AtomicBool>,
}

impl Collector {
    async fn start() -> Self {
        let records = Arc::new(Mutex::new(Vec::new()));
        let failing = Arc::new(AtomicBool::new(false));
        let (kept, refusing) = (records.clone(), failing.clone());
        let app = axum::Router::new().route(
            "/v1/logs",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (kept, refusing) = (kept.clone(), refusing.clone());
                async move {
                    if refusing.load(Ordering::SeqCst) {
                        return StatusCode::SERVICE_UNAVAILABLE;
                    }
                    let request = ExportLogsServiceRequest::decode(body).unwrap();
                    let mut kept = kept.lock().unwrap();
                    for resource in request.resource_logs {
                        for scope in resource.scope_logs {
                            assert_eq!(scope.scope.unwrap().name, "toolgate.audit");
                            for record in scope.log_records {
                                let Some(any_value::Value::StringValue(body)) =
                                    record.body.unwrap().value
                                else {
                                    panic!("a log record whose body is not a string");
                                };
                                let seq = record
                                    .attributes
                                    .iter()
                                    .find(|kv| kv.key == "toolgate.audit.seq")
                                    .and_then(|kv| kv.value.clone()?.value);
                                let entry: Value = serde_json::from_str(&body).unwrap();
                                assert_eq!(
                                    seq,
                                    Some(any_value::Value::IntValue(
                                        entry["seq"].as_i64().unwrap()
                                    ))
                                );
                                kept.push(body);
                            }
                        }
                    }
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector {
            addr,
            records,
            failing,
        }
    }
}

/// A syslog receiver over TCP on `port`: each message's entry (the JSON line), in order, once
/// its RFC 5424 header is checked.
struct SyslogReceiver {
    port: u16,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl SyslogReceiver {
    async fn start(port: u16, messages: Arc<Mutex<Vec<String>>>) -> Self {
        Self::start_on(port, messages, None).await
    }

    /// [`SyslogReceiver::start`], over TLS with `tls`'s certificate when given.
    async fn start_on(
        port: u16,
        messages: Arc<Mutex<Vec<String>>>,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        // The port of a receiver just stopped is free once its aborted task is dropped.
        let listener = eventually("the receiver's port is free", async || {
            tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .ok()
        })
        .await;
        let port = listener.local_addr().unwrap().port();
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let (kept, spawned) = (messages, tasks.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let (kept, tls) = (kept.clone(), tls.clone());
                let reader = tokio::spawn(async move {
                    match tls {
                        None => read_frames(socket, kept).await,
                        Some(tls) => {
                            if let Ok(socket) = tls.accept(socket).await {
                                read_frames(socket, kept).await;
                            }
                        }
                    }
                });
                spawned.lock().unwrap().push(reader);
            }
        });
        tasks.lock().unwrap().push(accept);
        SyslogReceiver { port, tasks }
    }

    /// Gone: the port refuses, and every connection is closed.
    fn stop(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// Each message read off `socket`, its header checked, kept in `kept`.
async fn read_frames(mut socket: impl tokio::io::AsyncRead + Unpin, kept: Arc<Mutex<Vec<String>>>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let Ok(n) = socket.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..n]);
        while let Some(message) = take_frame(&mut buffer) {
            kept.lock().unwrap().push(checked(&message));
        }
    }
}

/// One octet-counted frame (`LEN SP MSG`) off the front of `buffer`, once it is all there.
fn take_frame(buffer: &mut Vec<u8>) -> Option<String> {
    let space = buffer.iter().position(|&b| b == b' ')?;
    let len: usize = std::str::from_utf8(&buffer[..space])
        .unwrap()
        .parse()
        .unwrap();
    if buffer.len() < space + 1 + len {
        return None;
    }
    let message = String::from_utf8(buffer[space + 1..space + 1 + len].to_vec()).unwrap();
    buffer.drain(..space + 1 + len);
    Some(message)
}

/// An RFC 5424 message's entry, its header checked: `<110>1 TIMESTAMP HOST toolgate PID MSGID -
/// BOM MSG` (facility log audit, severity informational; `MSGID` the event's type).
fn checked(message: &str) -> String {
    let parts: Vec<&str> = message.splitn(8, ' ').collect();
    assert_eq!(parts.len(), 8, "{message}");
    assert_eq!(parts[0], "<110>1", "{message}");
    assert!(
        parts[1].ends_with('Z') && parts[1].contains('T'),
        "{message}"
    );
    assert_eq!(parts[3], "toolgate");
    assert!(parts[4].parse::<u32>().is_ok(), "{message}");
    assert_eq!(parts[6], "-");
    let line = parts[7]
        .strip_prefix('\u{feff}')
        .expect("a UTF-8 message starts with its BOM");
    let entry: Value = serde_json::from_str(line).unwrap();
    assert_eq!(
        parts[5],
        entry["event"]["type"].as_str().unwrap(),
        "{message}"
    );
    line.to_owned()
}

/// A configuration file that makes `ROOT` an admin's key.
fn root_config(at: &Location) -> PathBuf {
    let hash = hex::encode(toolgate::http::auth::token_sha256(ROOT));
    let path = at.data_dir().join("toolgate.toml");
    std::fs::write(
        &path,
        format!("[[auth.keys]]\nname = \"root\"\nrole = \"admin\"\ntoken_sha256 = \"{hash}\"\n"),
    )
    .unwrap();
    path
}

fn serve(at: &Location, collector: &Collector, syslog_port: u16) -> Binary {
    let path = root_config(at);
    let otlp = format!("http://{}", collector.addr);
    let syslog = format!("tcp://127.0.0.1:{syslog_port}");
    Binary::start_with(
        at,
        &["--config", path.to_str().unwrap()],
        &[
            ("TOOLGATE_AUDIT__EXPORT__OTLP_ENDPOINT", otlp.as_str()),
            ("TOOLGATE_AUDIT__EXPORT__SYSLOG_URL", syslog.as_str()),
            ("TOOLGATE_AUDIT__CHECKPOINT_INTERVAL_S", "3600"),
        ],
    )
}

async fn echo(api: &common::Api, text: &str) {
    let (status, _, body) = send(
        api,
        Method::POST,
        "/tools/echo/call",
        Some(json!({"input": {"text": text}})),
        Some(ROOT),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// The chain's lines, as `GET /audit` serves them.
async fn chain(api: &common::Api) -> Vec<String> {
    let text = api
        .client
        .get(format!("{}/audit?limit=10000", api.base))
        .bearer_auth(ROOT)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines().map(str::to_owned).collect()
}

/// Once both receivers hold exactly the chain, in order: the chain.
async fn delivered(api: &common::Api, collector: &Collector, syslog: &Arc<Mutex<Vec<String>>>) {
    eventually("both receivers hold the whole chain", async || {
        let lines = chain(api).await;
        let otlp = collector.records.lock().unwrap().clone();
        let messages = syslog.lock().unwrap().clone();
        (otlp == lines && messages == lines).then_some(())
    })
    .await;
}

async fn every_entry_is_exported_once_across_a_restart_and_an_outage(backend: Backend) {
    let at = Location::new(backend).await;
    let collector = Collector::start().await;
    let messages = Arc::new(Mutex::new(Vec::new()));
    let syslog = SyslogReceiver::start(0, messages.clone()).await;
    let server = serve(&at, &collector, syslog.port);
    for n in 0..5 {
        echo(&server.api, &format!("first {n}")).await;
    }
    delivered(&server.api, &collector, &messages).await;

    // Both receivers go away: the entries made meanwhile wait, and the failures show.
    collector.failing.store(true, Ordering::SeqCst);
    syslog.stop();
    for n in 0..3 {
        echo(&server.api, &format!("during the outage {n}")).await;
    }
    eventually("both exports fail, visibly", async || {
        let (status, _, body) =
            send(&server.api, Method::GET, "/audit/exports", None, Some(ROOT)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let exports = body["exports"].as_array()?.clone();
        let failing = exports
            .iter()
            .filter(|e| e["failures"].as_i64() > Some(0) && e["last_error"].is_string());
        (failing.count() == 2 && body["head_seq"].as_i64()? > exports[0]["after_seq"].as_i64()?)
            .then_some(())
    })
    .await;
    let metrics = server.api.metrics(ROOT).await;
    for sink in ["otlp", "syslog"] {
        assert!(
            metrics.contains(&format!(
                "toolgate_audit_export_failures_total{{sink=\"{sink}\"}}"
            )),
            "{metrics}"
        );
    }
    let (status, _, body) = send(
        &server.api,
        Method::GET,
        "/audit/exports",
        None,
        Some(BOB_IS_NOT),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    // toolgate restarts with its backlog; the receivers come back.
    assert!(server.terminate());
    collector.failing.store(false, Ordering::SeqCst);
    let syslog = SyslogReceiver::start(syslog.port, messages.clone()).await;
    let server = serve(&at, &collector, syslog.port);
    for n in 0..3 {
        echo(&server.api, &format!("after the restart {n}")).await;
    }
    delivered(&server.api, &collector, &messages).await;
    let lines = chain(&server.api).await;
    let seqs: Vec<i64> = lines
        .iter()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    assert!(
        lines.iter().any(|line| line.contains("audit.checkpoint")),
        "the stop's checkpoint was exported too"
    );
    let metrics = server.api.metrics(ROOT).await;
    assert!(
        metrics.contains("toolgate_audit_export_lag{sink=\"otlp\"} 0"),
        "{metrics}"
    );
    syslog.stop();
}

/// A certificate authority of its own (`<name>-ca.pem`) and a certificate it signed for
/// `localhost` and 127.0.0.1 with its key, made in `dir` by the openssl command line: the
/// authority's PEM, the server's acceptor.
fn authority(dir: &Path, name: &str) -> (PathBuf, tokio_rustls::TlsAcceptor) {
    let file = |what: &str| dir.join(format!("{name}-{what}"));
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl command line");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    std::fs::write(
        file("ca.ext"),
        "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n",
    )
    .unwrap();
    std::fs::write(
        file("server.ext"),
        "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n\
         extendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let path = |what: &str| file(what).to_str().unwrap().to_owned();
    let (ca_key, ca_csr, ca) = (path("ca.key"), path("ca.csr"), path("ca.pem"));
    let (key, csr, cert) = (path("server.key"), path("server.csr"), path("server.pem"));
    let subject = format!("/CN={name} test authority");
    openssl(
        &[
            &["req", "-new"][..],
            &ec,
            &["-keyout", &ca_key, "-subj", &subject, "-out", &ca_csr],
        ]
        .concat(),
    );
    openssl(&[
        "x509",
        "-req",
        "-in",
        &ca_csr,
        "-signkey",
        &ca_key,
        "-days",
        "2",
        "-extfile",
        &path("ca.ext"),
        "-out",
        &ca,
    ]);
    openssl(
        &[
            &["req", "-new"][..],
            &ec,
            &["-keyout", &key, "-subj", "/CN=localhost", "-out", &csr],
        ]
        .concat(),
    );
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &path("server.ext"),
        "-out",
        &cert,
    ]);
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, PrivateKeyDer::from_pem_file(&key).unwrap())
    .unwrap();
    (
        file("ca.pem"),
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    )
}

/// `[audit.export] syslog_url = "tls://..."`: toolgate sends the chain only to a receiver whose
/// certificate the trusted roots vouch for (here `SSL_CERT_FILE`, read by the platform's
/// verifier). An impostor on the receiver's port, with a certificate of another authority, gets
/// nothing, and the failure is visible; the genuine receiver then gets every entry, in order.
#[tokio::test]
async fn syslog_over_tls_reaches_only_a_receiver_the_trusted_roots_vouch_for() {
    let dir = common::temp_dir();
    let (trusted, genuine) = authority(dir.path(), "trusted");
    let (_, impostor) = authority(dir.path(), "impostor");
    let stolen = Arc::new(Mutex::new(Vec::new()));
    let fake = SyslogReceiver::start_on(0, stolen.clone(), Some(impostor)).await;
    let port = fake.port;

    let at = Location::new(Backend::Sqlite).await;
    let config = root_config(&at);
    let url = format!("tls://localhost:{port}");
    let server = Binary::start_with(
        &at,
        &["--config", config.to_str().unwrap()],
        &[
            ("TOOLGATE_AUDIT__EXPORT__SYSLOG_URL", url.as_str()),
            ("SSL_CERT_FILE", trusted.to_str().unwrap()),
        ],
    );
    echo(&server.api, "for the auditors only").await;
    let error = eventually("the export to the impostor fails, visibly", async || {
        let (_, _, body) = send(&server.api, Method::GET, "/audit/exports", None, Some(ROOT)).await;
        let syslog = body["exports"]
            .as_array()?
            .iter()
            .find(|e| e["sink"] == "syslog")?
            .clone();
        (syslog["failures"].as_i64()? > 0).then(|| syslog["last_error"].to_string())
    })
    .await;
    assert!(error.contains("certificate"), "{error}");
    assert!(
        stolen.lock().unwrap().is_empty(),
        "the impostor got entries"
    );
    fake.stop();

    let messages = Arc::new(Mutex::new(Vec::new()));
    let receiver = SyslogReceiver::start_on(port, messages.clone(), Some(genuine)).await;
    echo(&server.api, "and after").await;
    eventually("the genuine receiver holds the whole chain", async || {
        let lines = chain(&server.api).await;
        (*messages.lock().unwrap() == lines).then_some(())
    })
    .await;
    assert!(
        stolen.lock().unwrap().is_empty(),
        "the impostor got entries"
    );
    receiver.stop();
}

/// A key no one configured.
const BOB_IS_NOT: &str = "tg_nobody_0123456789abcdef";

on_each_backend! {
    #[tokio::test] async fn every_entry_is_exported_once_across_a_restart_and_an_outage;
}
