//! A TCP proxy in front of a test server that can stop forwarding or cut connections: what a
//! network partition, a frozen or half-dead server, or a load balancer that stops forwarding looks
//! like to a client. Tests point a backend URL at [`Proxy::addr`] instead of the server.
//!
//! ```ignore
//! let proxy = Proxy::start("127.0.0.1:16379").await;
//! let locker = connect(&format!("redis://{}", proxy.addr())).await?;
//! proxy.set(Mode::FREEZE);   // connections stay open, nothing gets through
//! proxy.set(Mode::Forward);  // healed
//! proxy.set(Mode::FreezeExisting); // the connections open now go silent; new ones work
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
    /// Forwards nothing, either way, on the connections accepted before this mode was set (bytes
    /// wait, as on a flow a NAT or firewall dropped), and forwards both ways on those accepted
    /// after: a half-open connection while new ones work.
    FreezeExisting,
}

impl Mode {
    /// Nothing gets through either way.
    pub const FREEZE: Mode = Mode::Freeze {
        to_server: true,
        to_client: true,
    };

    fn lets_through(self, to_server: bool) -> bool {
        match self {
            Mode::Forward | Mode::FreezeExisting => true,
            Mode::Freeze {
                to_server: frozen_up,
                to_client: frozen_down,
            } => !(if to_server { frozen_up } else { frozen_down }),
            Mode::Cut => false,
        }
    }
}

/// The mode, and how many connections had been accepted when it was set (those numbered below
/// are the existing ones of [`Mode::FreezeExisting`]).
type State = (Mode, u64);

/// Whether the traffic of connection `number` goes through, in `state`, in the direction of
/// `to_server`.
fn lets_through(state: &State, number: u64, to_server: bool) -> bool {
    match state {
        (Mode::FreezeExisting, existing) => number >= *existing,
        (mode, _) => mode.lets_through(to_server),
    }
}

/// A running proxy; it stops (closing every connection) when dropped.
pub struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<State>,
    /// How many connections have been accepted (each one's number is the count before it).
    accepted: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy on a free loopback port, forwarding to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let (mode, _) = watch::channel((Mode::Forward, 0));
        let modes = mode.clone();
        let accepted = Arc::new(AtomicU64::new(0));
        let counter = accepted.clone();
        let upstream = upstream.to_owned();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if modes.borrow().0 == Mode::Cut {
                    continue; // closed at once
                }
                let number = counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(relay(client, upstream.clone(), number, modes.subscribe()));
            }
        });
        Proxy {
            addr,
            mode,
            accepted,
            accept,
        }
    }

    /// The `host:port` clients connect to.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Changes what the proxy does, for every connection at once.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace((mode, self.accepted.load(Ordering::SeqCst)));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.set(Mode::Cut);
    }
}

/// Carries client connection `number` to a new upstream connection until either side closes or
/// the proxy cuts it.
async fn relay(client: TcpStream, upstream: String, number: u64, modes: watch::Receiver<State>) {
    let Ok(server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        _ = pump(client_read, server_write, number, modes.clone(), true) => {}
        _ = pump(server_read, client_write, number, modes, false) => {}
    }
}

/// Copies one direction of connection `number`, holding bytes back while that direction is
/// frozen; ends on a cut.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    number: u64,
    mut modes: watch::Receiver<State>,
    to_server: bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // Read only while this direction is open: a frozen one leaves the bytes in the kernel.
        let open = modes
            .wait_for(|m| lets_through(m, number, to_server) || m.0 == Mode::Cut)
            .await;
        if open.map_or(true, |m| m.0 == Mode::Cut) {
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
        let open = modes
            .wait_for(|m| lets_through(m, number, to_server) || m.0 == Mode::Cut)
            .await;
        if open.map_or(true, |m| m.0 == Mode::Cut) || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
