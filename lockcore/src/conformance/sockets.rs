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
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let Ok(fd) = entry.expect("an fd").file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: only borrowed while this process keeps it open; a descriptor closed meanwhile
        // (or reused by a file) makes the calls below fail, which skips it.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let Ok(socket) = fd.try_clone_to_owned().map(std::net::TcpStream::from) else {
            continue;
        };
        let Ok(local) = socket.local_addr() else { continue };
        if ports.contains(&local.port()) {
            let linger = SockRef::from(&socket).linger().expect("SO_LINGER");
            found.push((local.port(), linger));
        }
    }
    found
}
