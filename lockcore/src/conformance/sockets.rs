//! The options of this process's own sockets, as a test reads them: which of a locker's
//! connections close with a reset (`SO_LINGER` 0). A backend that drops a connection whose
//! request went unanswered must not have that request delivered later, after the clean-up sent
//! over a new connection; a reset drops what the closed socket had not delivered.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use socket2::SockRef;

/// `SO_LINGER` (`None`: off) of each of this process's TCP sockets whose local port is in
/// `ports` (the client ports a server lists for a locker's connections). A port with no socket
/// in this process is left out: another process's connection.
///
/// # Panics
///
/// If `/proc/self/fd` cannot be read (not Linux), or a socket's `SO_LINGER` cannot.
pub fn lingers_of_local_ports(ports: &[u16]) -> Vec<(u16, Option<Duration>)> {
    own_sockets()
        .into_iter()
        .filter_map(|socket| {
            let local = socket.local_addr().ok()?.port();
            ports.contains(&local).then(|| {
                let linger = SockRef::from(&socket).linger().expect("SO_LINGER");
                (local, linger)
            })
        })
        .collect()
}

/// Asserts that each socket of `lingers` (from [`lingers_of_local_ports`]) closes with a reset:
/// `SO_LINGER` on, at 0.
///
/// # Panics
///
/// At the first that does not, naming its port.
pub fn assert_each_closes_with_a_reset(lingers: &[(u16, Option<Duration>)]) {
    for (port, linger) in lingers {
        assert_eq!(
            *linger,
            Some(Duration::ZERO),
            "the connection from port {port} closes without a reset"
        );
    }
}

/// The local ports of this process's open TCP connections to `peer_port` (a proxy's port, say):
/// a test of a locker behind the proxy reads which of its connections are still open.
///
/// # Panics
///
/// If `/proc/self/fd` cannot be read (not Linux).
pub fn local_ports_connected_to(peer_port: u16) -> Vec<u16> {
    own_sockets()
        .into_iter()
        .filter(|socket| socket.peer_addr().is_ok_and(|peer| peer.port() == peer_port))
        .filter_map(|socket| Some(socket.local_addr().ok()?.port()))
        .collect()
}

/// Waits until none of `ports` (local ports of this process's connections to `peer_port`, from
/// [`local_ports_connected_to`]) is open any more.
///
/// # Panics
///
/// If one is still open after `limit`.
pub async fn until_closed(peer_port: u16, ports: &[u16], limit: Duration) {
    let closed = async {
        loop {
            let open = local_ports_connected_to(peer_port);
            if ports.iter().all(|port| !open.contains(port)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    super::within(limit, "the connections closed", closed).await;
}

/// This process's TCP sockets, each as a duplicate of its descriptor (closing the duplicate
/// leaves the socket open).
fn own_sockets() -> Vec<std::net::TcpStream> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let Ok(fd) = entry.expect("an fd").file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: only borrowed while this process keeps it open; a descriptor closed meanwhile
        // (or reused by a file) makes the calls on it fail, which skips it.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let Ok(socket) = fd.try_clone_to_owned().map(std::net::TcpStream::from) else {
            continue;
        };
        if socket.local_addr().is_ok() {
            found.push(socket);
        }
    }
    found
}
