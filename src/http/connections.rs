//! The connections under the router: how many are open, and how long each may take.
//!
//! [`serve`] is the binary's accept loop (an app mounting the router in its own server keeps
//! its own). What it holds against a client that is slow on purpose:
//! - a request head must arrive whole within `header_timeout` of the connection's opening, or
//!   of its first byte after an idle spell; else the connection is closed;
//! - a keep-alive connection with no request for `idle_timeout` is closed (a request being
//!   answered, a held `?wait=` or an open stream included, is not idle);
//! - past `max_connections` open at once, [`RESERVED`] more are accepted for the health probes
//!   alone: such a connection must send its head (and, idle, its next one) within
//!   [`RESERVED_HEAD`], and any request but
//!   `GET /healthz` or `/readyz` on it is answered `503 overloaded` and closed; past those, new
//!   connections wait in the listen backlog, not accepted. So silent or slow clients holding
//!   every slot cannot keep a probe from being answered;
//! - the process's open-file limit is raised at start to what `max_connections` needs (up to
//!   the hard limit; a hard limit below it is logged, with what it means);
//! - an accept that fails (the process out of file descriptors) is logged at most once a
//!   second and tried again after a short pause: the listener never spins and never stops, and
//!   the connections already open keep being served (health probes included).
//!
//! The body's own deadline is the routes' ([`super::body`]): it answers `408` in the envelope.
//! hyper's header timer is not used: it starts whenever hyper waits for a head, idle or not,
//! which would make every idle spell as short as a head's deadline.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use axum::routing::future::RouteFuture;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tower::Service;

/// The default deadline of a request head: 10 seconds.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time a keep-alive connection may sit idle: 60 seconds.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default most connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// How long an accept waits after failing for lack of resources (file descriptors, memory).
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// The connections accepted past `max_connections`, for the health probes only.
pub const RESERVED: usize = 4;
/// How soon a connection on a reserved slot must send its request head.
pub const RESERVED_HEAD: Duration = Duration::from_secs(1);
/// The only routes answered on a reserved slot.
const PROBES: [&str; 2] = ["/healthz", "/readyz"];
/// The files the process needs besides its connections: the store, the logs, upstreams' pipes
/// and sockets, the provider clients.
const SPARE_FILES: u64 = 256;

/// The limits of [`serve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a request head may take to arrive.
    pub header_timeout: Duration,
    /// How long a keep-alive connection may sit with no request.
    pub idle_timeout: Duration,
    /// The most connections open at once.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `router` on `listener` within `limits`, each request carrying its client's address
/// (`ConnectInfo<SocketAddr>`), until `shutdown` resolves; then stops accepting, lets each
/// connection finish the request it is answering, and returns once all are closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let reserve = Arc::new(Semaphore::new(RESERVED));
    raise_open_files(limits.max_connections);
    let (stop, stopping) = watch::channel(false);
    // Each connection holds a sender: once all are dropped, every connection is closed.
    let (open, mut all_closed) = mpsc::channel::<()>(1);
    let mut failures = AcceptFailures::default();
    let mut shutdown = pin!(shutdown);
    loop {
        // A regular slot when one is free; else whichever frees first, a reserved one (for the
        // probes) included.
        let (permit, reserved) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => (permit, false),
            permit = reserve.clone().acquire_owned() => (permit, true),
        };
        let permit = permit.expect("the semaphores are never closed");
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                failures.note(&err);
                if lacks_resources(&err) {
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_PAUSE) => {}
                        () = &mut shutdown => break,
                    }
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        // A reserved slot is held no longer than a probe takes: its head, and any idle spell.
        let limits = if reserved {
            ConnectionLimits {
                header_timeout: limits.header_timeout.min(RESERVED_HEAD),
                idle_timeout: limits.idle_timeout.min(RESERVED_HEAD),
                ..limits
            }
        } else {
            limits
        };
        let connection = Connection {
            router: router.clone(),
            peer,
            limits,
            reserved,
            stopping: stopping.clone(),
        };
        let open = open.clone();
        tokio::spawn(async move {
            connection.run(stream).await;
            drop((permit, open));
        });
    }
    let _ = stop.send(true);
    drop(open);
    let _ = all_closed.recv().await;
}

/// Raises the process's soft limit of open files to what `max_connections` (and the reserve,
/// and [`SPARE_FILES`]) need, up to the hard limit; a hard limit below the need is logged, saying
/// what it means and what to change (accepts past it fail until a connection closes, which the
/// loop survives).
fn raise_open_files(max_connections: usize) {
    let need = u64::try_from(max_connections + RESERVED).unwrap_or(u64::MAX) + SPARE_FILES;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into the struct it is given, which lives here.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } != 0
        || limit.rlim_cur >= need
    {
        return;
    }
    let (soft, hard) = (limit.rlim_cur, limit.rlim_max);
    let raised = libc::rlimit {
        rlim_cur: need.min(hard),
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct it is given; raising a soft limit up to the hard one
    // needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) } == 0 {
        tracing::info!(
            from = soft,
            to = raised.rlim_cur,
            "raised the open-file limit for max_connections"
        );
    }
    if hard < need {
        tracing::warn!(
            max_connections,
            needed = need,
            hard_limit = hard,
            "the open-file hard limit is below what max_connections needs: past about {} \
             connections, accepts fail until one closes; raise `ulimit -Hn` (LimitNOFILE) or \
             lower [server] max_connections",
            hard.saturating_sub(SPARE_FILES)
        );
    }
}

/// Whether an accept failed for lack of resources, which only time (a connection closing)
/// gives back; any other failure concerns the one connection, and the next accept goes on.
fn lacks_resources(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Accept failures, logged at most once a second with the count of those not logged.
#[derive(Default)]
struct AcceptFailures {
    logged_at: Option<Instant>,
    unlogged: u64,
}

impl AcceptFailures {
    fn note(&mut self, err: &io::Error) {
        let now = Instant::now();
        if self
            .logged_at
            .is_some_and(|at| now.duration_since(at) < Duration::from_secs(1))
        {
            self.unlogged += 1;
            return;
        }
        tracing::warn!(
            error = %err,
            also_since_last = self.unlogged,
            "cannot accept a connection; trying again"
        );
        self.logged_at = Some(now);
        self.unlogged = 0;
    }
}

/// One accepted connection.
struct Connection {
    router: Router,
    peer: SocketAddr,
    limits: ConnectionLimits,
    /// On a reserved slot: the probes alone are answered.
    reserved: bool,
    stopping: watch::Receiver<bool>,
}

impl Connection {
    async fn run(mut self, stream: TcpStream) {
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched {
            stream,
            activity: activity.clone(),
        });
        let service = PerRequest {
            router: self.router.clone(),
            peer: self.peer,
            activity: activity.clone(),
            reserved: self.reserved,
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .keep_alive(true);
        let mut connection = pin!(builder.serve_connection(io, service));
        let mut stopping = false;
        loop {
            let deadline = activity.deadline(&self.limits);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(err) = result {
                        tracing::debug!(peer = %self.peer, error = %err, "connection ended");
                    }
                    return;
                }
                () = tokio::time::sleep_until(deadline.into()) => {
                    if activity.deadline(&self.limits) <= Instant::now() {
                        // Dropped, the connection is closed: nothing is being answered on it.
                        tracing::debug!(peer = %self.peer, "connection timed out");
                        return;
                    }
                }
                changed = self.stopping.wait_for(|stop| *stop), if !stopping => {
                    stopping = true;
                    if changed.is_ok() {
                        // An idle connection closes now; a busy one after its answer.
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

/// What a connection is doing, shared by its reads, its requests and its deadline. All of them
/// run on the connection's own task, one at a time: relaxed atomics are all the order needed.
struct Activity {
    opened: Instant,
    /// Requests begun whose answer is not yet all written.
    busy: AtomicU32,
    /// When the connection last went idle (or opened), in ms since `opened`; with
    /// [`HEAD_STARTED`] set once a byte of the next head has arrived.
    since: AtomicU64,
}

/// The flag of [`Activity::since`] saying a head has started to arrive.
const HEAD_STARTED: u64 = 1 << 63;

impl Activity {
    fn new() -> Self {
        Activity {
            opened: Instant::now(),
            busy: AtomicU32::new(0),
            // A new connection owes its first head at once.
            since: AtomicU64::new(HEAD_STARTED),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX >> 1)
    }

    /// Bytes arrived: when idle, they begin a head, which now has its deadline.
    fn read(&self) {
        if self.busy.load(Ordering::Relaxed) == 0 {
            let since = self.since.load(Ordering::Relaxed);
            if since & HEAD_STARTED == 0 {
                self.since
                    .store(self.now_ms() | HEAD_STARTED, Ordering::Relaxed);
            }
        }
    }

    fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// When the connection is to be closed if nothing changes. Busy, it has no deadline: the
    /// time returned is when to look again.
    fn deadline(&self, limits: &ConnectionLimits) -> Instant {
        if self.busy.load(Ordering::Relaxed) > 0 {
            return Instant::now() + limits.idle_timeout;
        }
        let since = self.since.load(Ordering::Relaxed);
        let (at, within) = if since & HEAD_STARTED != 0 {
            (since & !HEAD_STARTED, limits.header_timeout)
        } else {
            (since, limits.idle_timeout)
        };
        self.opened + Duration::from_millis(at) + within
    }
}

/// A request being answered, until its answer's body is all written (or dropped).
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let activity = &self.0;
        if activity.busy.fetch_sub(1, Ordering::Relaxed) == 1 {
            activity.since.store(activity.now_ms(), Ordering::Relaxed);
        }
    }
}

/// The router as hyper calls it: with the client's address, each request marking the
/// connection busy until its answer is written.
#[derive(Clone)]
struct PerRequest {
    router: Router,
    peer: SocketAddr,
    activity: Arc<Activity>,
    reserved: bool,
}

impl hyper::service::Service<Request<Incoming>> for PerRequest {
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = Answering;

    fn call(&self, request: Request<Incoming>) -> Answering {
        let busy = self.activity.begin();
        let refused = self.reserved
            && !(request.method() == axum::http::Method::GET
                && PROBES.contains(&request.uri().path()));
        let routed = if refused {
            Routed::Refused {
                response: Some(over_max_connections()),
            }
        } else {
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(ConnectInfo(self.peer));
            Routed::Routed {
                future: self.router.clone().call(request),
            }
        };
        Answering {
            routed,
            busy: Some(busy),
        }
    }
}

/// The answer on a reserved slot to anything but a probe: `503 overloaded`, and the connection
/// closed, so the slot is free for the next probe.
fn over_max_connections() -> Response<Body> {
    use axum::response::IntoResponse as _;
    let mut response = super::error::ApiError::Overloaded("The server".into()).into_response();
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

pin_project_lite::pin_project! {
    /// The router's answer to one request, its body keeping the connection busy.
    struct Answering {
        #[pin]
        routed: Routed,
        busy: Option<Busy>,
    }
}

pin_project_lite::pin_project! {
    /// Where an answer comes from: the router, or the refusal of a reserved slot.
    #[project = RoutedProj]
    enum Routed {
        Routed { #[pin] future: RouteFuture<Infallible> },
        Refused { response: Option<Response<Body>> },
    }
}

impl Future for Answering {
    type Output = Result<Response<Answer>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match this.routed.project() {
            RoutedProj::Routed { future } => {
                let Ok(response) = std::task::ready!(future.poll(cx));
                response
            }
            RoutedProj::Refused { response } => response.take().expect("answered once"),
        };
        let busy = this.busy.take().expect("answered once");
        Poll::Ready(Ok(response.map(|body| Answer { body, _busy: busy })))
    }
}

pin_project_lite::pin_project! {
    /// An answer's body, keeping its connection busy until it is all written.
    struct Answer {
        #[pin]
        body: Body,
        _busy: Busy,
    }
}

impl HttpBody for Answer {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection's socket, telling its [`Activity`] when bytes arrive.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
