//! A TCP proxy in front of a test server that can stop forwarding or cut connections: what a
//! network partition, a frozen or half-dead server, or a load balancer that stops forwarding looks
//! like to a client. Tests point a backend URL at [`Proxy::addr`] instead of the server.
//!
//! ```ignore
//! let proxy = Proxy::start("127.0.0.1:16379").await;
//! let locker = connect(&format!("redis://{}", proxy.addr())).await?;
//! proxy.set(Mode::FREEZE);   // connections stay open, nothing gets through
//! proxy.set(Mode::Forward);  // healed
//! ```

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forwards both ways.
    Forward,
    /// Keeps connections open and accepts new ones, but forwards nothing in the directions set
    /// (bytes wait, as behind a partition that drops packets, until the mode changes).
    Freeze {
        /// Client to server.
        to_server: bool,
        /// Server to client.
        to_client: bool,
    },
    /// Closes every connection, and every new one as soon as it is accepted.
    Cut,
}

impl Mode {
    /// Nothing gets through either way.
    pub const FREEZE: Mode = Mode::Freeze {
        to_server: true,
        to_client: true,
    };

    fn lets_through(self, to_server: bool) -> bool {
        match self {
            Mode::Forward => true,
            Mode::Freeze {
                to_server: frozen_up,
                to_client: frozen_down,
            } => !(if to_server { frozen_up } else { frozen_down }),
            Mode::Cut => false,
        }
    }
}

/// A running proxy; it stops (closing every connection) when dropped.
pub struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port, forwarding to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let (mode, _) = watch::channel(Mode::Forward);
        let modes = mode.clone();
        let upstream = upstream.to_owned();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *modes.borrow() == Mode::Cut {
                    continue; // closed at once
                }
                tokio::spawn(relay(client, upstream.clone(), modes.subscribe()));
            }
        });
        Proxy { addr, mode, accept }
    }

    /// The `host:port` clients connect to.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Changes what the proxy does, for every connection at once.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.set(Mode::Cut);
    }
}

/// Carries one client connection to a new upstream connection until either side closes or the
/// proxy cuts it.
async fn relay(client: TcpStream, upstream: String, modes: watch::Receiver<Mode>) {
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        _ = pump(client_read, server_write, modes.clone(), true) => {}
        _ = pump(server_read, client_write, modes, false) => {}
    }
}

/// Copies one direction, holding bytes back while that direction is frozen; ends on a cut.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut modes: watch::Receiver<Mode>, to_server: bool) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // Read only while this direction is open: a frozen one leaves the bytes in the kernel.
        let open = modes.wait_for(|m| m.lets_through(to_server) || *m == Mode::Cut).await;
        if open.map_or(true, |m| *m == Mode::Cut) {
            return;
        }
        let n = tokio::select! {
            n = from.read(&mut buf) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = modes.changed() => continue, // look at the new mode before reading
        };
        // Bytes read just before a freeze wait for it to end.
        let open = modes.wait_for(|m| m.lets_through(to_server) || *m == Mode::Cut).await;
        if open.map_or(true, |m| *m == Mode::Cut) || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
