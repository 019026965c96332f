//! The `toolgate` binary: parse the command line, read the configuration once, open the store,
//! build the router, serve until SIGINT or SIGTERM, then finish the requests in flight.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use toolgate::config::{Config, Overrides};
use toolgate::{ServerBuilder, ToolSet};

/// A tool server for LLM agents: tool schemas and calls over REST, with durable human approvals.
#[derive(Parser)]
#[command(name = "toolgate", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API.
    Serve {
        /// A TOML config file (see config/default.toml); every key has a default.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The address to listen on (overrides `bind`).
        #[arg(long, value_name = "ADDR")]
        bind: Option<SocketAddr>,
        /// The data directory (overrides `data_dir`).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// A PostgreSQL URL shared with other replicas (overrides `store.database_url`).
        #[arg(long, value_name = "URL")]
        database_url: Option<String>,
        /// Serve without API keys on a non-loopback address. Anyone who can reach the server
        /// can then call tools and approve calls.
        #[arg(long)]
        insecure_no_auth: bool,
    },
    /// Print the SHA-256 of a token read from standard input, for `[[auth.keys]] token_sha256`.
    HashToken,
    /// The audit record: `audit verify` checks an export of the chain or a call's receipt
    /// against the public keys (a URL's key from `TOOLGATE_TOKEN`); exit 1 names what fails.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Check an export (a file, or the URL of `/audit`) or a receipt against the key set.
    Verify {
        /// The export or receipt: a file, or a URL.
        source: String,
        /// The key set (`/.well-known/jwks.json`): a file, or a URL.
        #[arg(long, value_name = "FILE or URL")]
        keys: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::HashToken => ExitCode::from(toolgate::base::hash_token_command()),
        Command::Audit {
            command: AuditCommand::Verify { source, keys },
        } => ExitCode::from(toolgate::audit::verify_command(&source, &keys)),
        Command::Serve {
            config,
            bind,
            data_dir,
            database_url,
            insecure_no_auth,
        } => {
            let config = match Config::load(
                config.as_deref(),
                std::env::vars(),
                Overrides {
                    bind,
                    data_dir,
                    database_url,
                },
            ) {
                Ok(config) => config,
                Err(err) => {
                    eprintln!("toolgate: {err}");
                    return ExitCode::from(2);
                }
            };
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    eprintln!("toolgate: cannot start the async runtime: {err}");
                    return ExitCode::FAILURE;
                }
            };
            // The trace exporter is a task of the runtime.
            let telemetry = {
                let _entered = runtime.enter();
                match init_tracing(&config) {
                    Ok(telemetry) => telemetry,
                    Err(err) => {
                        eprintln!("toolgate: {err}");
                        return ExitCode::from(2);
                    }
                }
            };
            let served = runtime.block_on(serve(config, insecure_no_auth));
            if let Err(err) = &served {
                tracing::error!("{err}");
            }
            // The spans of the last requests, before the process is gone.
            runtime.block_on(telemetry.flush(std::time::Duration::from_secs(5)));
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
    }
}

/// Logs to stderr with `RUST_LOG`'s filter when it is set and valid, else the `log` key's,
/// else `info` (the MCP SDK's INFO lines left out: [`toolgate::telemetry::log_filter`]); in
/// `log_format`. And exports traces when `[telemetry]` (or the standard variables) name a
/// collector.
fn init_tracing(config: &Config) -> Result<toolgate::telemetry::Telemetry, String> {
    let from_env = std::env::var(tracing_subscriber::EnvFilter::DEFAULT_ENV).ok();
    let filter = toolgate::telemetry::log_filter(from_env.as_deref(), &config.log);
    toolgate::telemetry::init(filter, config.log_format, &config.telemetry, |name| {
        std::env::var(name).ok()
    })
}

async fn serve(config: Config, insecure_no_auth: bool) -> Result<(), Box<dyn std::error::Error>> {
    let keys = config.api_keys()?;
    let issuers = config.issuers()?;
    let store = config.open_store().await?;
    let mut tools = ToolSet::new();
    if config.examples.enabled {
        toolgate::examples::register(&mut tools, &config.examples, &config.data_dir)?;
    }
    // Upstream MCP servers: each reached once now (one that cannot start, or a bad or taken tool
    // name, stops the start), then supervised.
    let upstreams = toolgate::upstream::Upstreams::connect(config.upstreams()?, &tools).await?;
    let inbox = config
        .inbox
        .options_with(&issuers, |name| std::env::var(name).ok())
        .map_err(|err| format!("config key `inbox.oidc`: {}", err.0))?;
    let tool_count = tools.len() + upstreams.tool_count();
    let serving = ServerBuilder::with_shared_store(tools, store)
        .listen_address(config.bind)
        .insecure_no_auth(insecure_no_auth)
        .max_body_bytes(config.max_body_bytes)
        .max_json_depth(config.max_json_depth)
        .max_in_flight(config.max_in_flight)
        .body_timeout(config.server.body_timeout())
        .allowed_hosts(config.allowed_hosts())
        .api_keys(keys)
        .issuers(issuers)
        .dispatch_config(config.dispatch_config())
        .webhooks(config.webhooks()?)
        .notify(config.notify()?)
        .people(config.people()?)
        .mcp(config.mcp.options(config.bind.ip()))
        .inbox(inbox)
        .upstreams(upstreams)
        .signing(config.signing()?)
        .feed_retention(std::time::Duration::from_secs(config.feed.retention_s))
        .audit_checkpoints(config.audit.checkpoint_interval())
        .audit_export(config.audit_export()?)
        .start()
        .await
        .map_err(|refused| config.refusal(&refused))?;

    release_startup_memory();
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.bind))?;
    let addr = listener.local_addr()?;
    tracing::info!(
        %addr,
        tools = tool_count,
        data_dir = %config.data_dir.display(),
        "toolgate listening on http://{addr}"
    );
    if config.inbox.enabled {
        tracing::info!("the approval inbox is at http://{addr}/inbox");
    }
    // Each request carries its connection's address: the inbox limits sign-in attempts per
    // client address.
    let running = serving.running().clone();
    toolgate::http::connections::serve(
        listener,
        serving.router.clone(),
        config.server.connection_limits(),
        async move {
            shutdown_signal().await;
            // Requests held for a change (`?wait=`) are answered now, with the state as it is.
            running.release_held();
        },
    )
    .await;
    serving.drain().await;
    tracing::info!("toolgate stopped");
    Ok(())
}

/// Gives back to the system the heap that building the OpenAPI document and the schemas used
/// once: glibc keeps freed memory for reuse, and an idle server need not hold it.
fn release_startup_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns unused heap pages to the kernel; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}
