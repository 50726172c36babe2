//! A virtual IP in front of `scripts/backends`' MariaDB pair (`mysql-ha`): `mysql://` takes one
//! host, and MySQL's failover setups put an address that moves (a virtual IP, or a proxy such as
//! ProxySQL) in front of the primary. The suite's is a forwarder in the driver: new connections
//! go to the server it points at, and pointing it at the promoted replica after a failover ends
//! the connections it carried. The workers' own proxies (partitions) sit in front of it.

use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Context, Result};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running forwarder; it lives as long as the driver.
pub struct Vip {
    addr: String,
    upstream: Arc<Mutex<String>>,
    moved: watch::Sender<u64>,
}

impl Vip {
    /// Starts a forwarder on a free loopback port, pointing at `upstream` (`host:port`; empty: the
    /// pair's primary, looked up at the first connection). Needs a tokio runtime.
    fn start(upstream: &str) -> Result<Vip> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the virtual IP")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?.to_string();
        let listener = TcpListener::from_std(listener)?;
        let upstream = Arc::new(Mutex::new(upstream.to_owned()));
        let (moved, _) = watch::channel(0u64);
        let (to, generation) = (upstream.clone(), moved.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut server = to.lock().map(|u| u.clone()).unwrap_or_default();
                if server.is_empty() {
                    // The first connection: the primary is looked up now (not when the targets are
                    // listed: a run without this target needs no pair).
                    match tokio::task::spawn_blocking(primary_address).await {
                        Ok(Ok(primary)) => {
                            if let Ok(mut u) = to.lock() {
                                u.clone_from(&primary);
                            }
                            server = primary;
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "the virtual IP has no primary to point at");
                            continue;
                        }
                        Err(_) => continue,
                    }
                }
                let mut moved = generation.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&server).await else {
                        return;
                    };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = moved.changed() => {}
                    }
                });
            }
        });
        Ok(Vip { addr, upstream, moved })
    }

    /// The `host:port` clients connect to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// New connections go to `upstream`; the open ones are ended.
    pub fn point_at(&self, upstream: &str) {
        if let Ok(mut u) = self.upstream.lock() {
            *u = upstream.to_owned();
        }
        self.moved.send_modify(|n| *n += 1);
        tracing::info!(upstream, "the virtual IP moved");
    }
}

static MYSQL_HA: OnceLock<Vip> = OnceLock::new();

/// The virtual IP of the `mysql-ha` pair, started at the first call (on the driver's runtime).
///
/// # Errors
///
/// When no loopback port can be bound.
pub fn mysql_ha() -> Result<&'static Vip> {
    if let Some(vip) = MYSQL_HA.get() {
        return Ok(vip);
    }
    let vip = Vip::start("")?;
    Ok(MYSQL_HA.get_or_init(|| vip))
}

/// The address of the pair's primary now (`scripts/backends leader mysql-ha`, then `address`).
pub fn primary_address() -> Result<String> {
    let ask = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        std::panic::catch_unwind(|| {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            locksmith_core::conformance::servers::backends(&refs)
        })
        .map_err(|_| {
            anyhow::anyhow!("scripts/backends {args:?} failed (is the mysql-ha pair up? scripts/backends up all)")
        })
    };
    let id = ask(&["leader", "mysql-ha"])?;
    ask(&["address", &id])
}
