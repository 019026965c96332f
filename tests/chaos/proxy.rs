//! The connection between one replica and PostgreSQL, through a TCP proxy the run controls:
//! cut, every connection through it is dropped at once and new ones are refused, until it is
//! restored. The replica lives on, unable to reach its store (its lease runs out meanwhile).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

/// A proxy on 127.0.0.1 in front of the database server.
pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    /// A proxy forwarding every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (refusing, kept) = (cut.clone(), links.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if refusing.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is closed at once
                }
                let link = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                let mut links = kept.lock().unwrap();
                links.retain(|link| !link.is_finished());
                links.push(link);
            }
        });
        Proxy { port, cut, links }
    }

    /// Cuts the connection: every link through the proxy is dropped, and new ones refused.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}
