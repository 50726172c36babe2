//! Exact Redis request counts: a `MONITOR` connection for the measured window.
//!
//! Redis's own counters (`INFO commandstats`, `total_commands_processed`) also count every command
//! a Lua script runs inside the server, so one `EVALSHA` running `SET`+`INCR`+`PUBLISH` counts 4.
//! `MONITOR` prints one line per executed command, `[db lua]` for those run by a script and
//! `[db ip:port]` for those a client sent. A [`Monitor`] counts the lines of *this process's own*
//! connections to the server (their local addresses, from `/proc/self/fd` and `/proc/net/tcp*`),
//! so traffic of anyone else sharing the server is not counted. The window opens when the server
//! confirms `MONITOR` and closes at an `ECHO` marker sent on a connection of its own.
//!
//! What `MONITOR` does not show: administrative commands (`CONFIG`, `DEBUG`, ...) and `AUTH`;
//! locksmith sends none of them while measured. Off Linux (no `/proc`), every client line is
//! counted (server-wide, like the other backends' counters).

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// How long the reader may take to reach the end marker after it was sent.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// The requests counted in one window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Commands sent by this process's connections, by upper-case command name.
    pub by_command: BTreeMap<String, u64>,
    /// Commands run inside the server by scripts (not requests; for the record).
    pub script_internal: u64,
    /// Commands other clients sent during the window (not counted).
    pub others: u64,
}

impl Tally {
    /// Requests this process sent.
    pub fn requests(&self) -> u64 {
        self.by_command.values().sum()
    }

    /// `EVALSHA×52 PING×1`, most frequent first.
    pub fn summary(&self) -> String {
        Self::summary_of(&self.by_command)
    }

    /// `EVALSHA×52 PING×1` for any count by name, most frequent first.
    pub fn summary_of(counts: &BTreeMap<String, u64>) -> String {
        let mut v: Vec<(&String, &u64)> = counts.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = v.iter().map(|(c, n)| format!("{c}×{n}")).collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(" ")
        }
    }
}

/// A running `MONITOR` window.
pub struct Monitor {
    control: TcpStream,
    marker: String,
    reader: JoinHandle<Result<Tally>>,
}

impl Monitor {
    /// Opens the window on the Redis server at `addr` (returns once `MONITOR` is confirmed).
    pub async fn start(addr: &str) -> Result<Monitor> {
        let control = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        let server = control.peer_addr()?;
        let excluded = control.local_addr()?;
        let mut monitor = TcpStream::connect(server)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        monitor.write_all(b"MONITOR\r\n").await?;
        let mut lines = BufReader::with_capacity(256 * 1024, monitor);
        let mut first = Vec::new();
        lines.read_until(b'\n', &mut first).await?;
        if !first.starts_with(b"+OK") {
            bail!("MONITOR refused: {}", String::from_utf8_lossy(&first).trim());
        }
        let marker = format!("lockbench-monitor-end-{}-{}", std::process::id(), excluded.port());
        let owners = Owners::new(server, excluded);
        let reader = tokio::spawn(read_window(lines, owners, marker.clone()));
        Ok(Monitor {
            control,
            marker,
            reader,
        })
    }

    /// Closes the window and returns what was counted in it.
    pub async fn finish(mut self) -> Result<Tally> {
        let echo = format!("ECHO {}\r\n", self.marker);
        self.control.write_all(echo.as_bytes()).await?;
        match tokio::time::timeout(DRAIN_LIMIT, &mut self.reader).await {
            Ok(joined) => joined.context("the MONITOR reader failed")?,
            Err(_) => {
                self.reader.abort();
                bail!("the MONITOR reader did not reach the end of the window within {DRAIN_LIMIT:?}")
            }
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Reads `MONITOR` lines until the end marker.
async fn read_window(mut lines: BufReader<TcpStream>, mut owners: Owners, marker: String) -> Result<Tally> {
    let mut tally = Tally::default();
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        if lines.read_until(b'\n', &mut line).await? == 0 {
            bail!("the MONITOR connection closed before the end of the window");
        }
        let Some((client, command)) = parse_line(&line) else {
            continue;
        };
        if client == "lua" {
            tally.script_internal += 1;
            continue;
        }
        if command.eq_ignore_ascii_case("echo") && line.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            return Ok(tally);
        }
        if owners.is_ours(client) {
            *tally.by_command.entry(command.to_ascii_uppercase()).or_insert(0) += 1;
        } else {
            tally.others += 1;
        }
    }
}

/// `(client, command)` of a line `1700000000.123456 [0 127.0.0.1:5000] "evalsha" "…" …`.
fn parse_line(line: &[u8]) -> Option<(&str, &str)> {
    let open = line.iter().position(|&b| b == b'[')?;
    let close = open + line[open..].iter().position(|&b| b == b']')?;
    let inside = std::str::from_utf8(&line[open + 1..close]).ok()?;
    let client = inside.split_once(' ')?.1;
    let rest = &line[close + 1..];
    let q1 = rest.iter().position(|&b| b == b'"')?;
    let q2 = q1 + 1 + rest[q1 + 1..].iter().position(|&b| b == b'"')?;
    let command = std::str::from_utf8(&rest[q1 + 1..q2]).ok()?;
    Some((client, command))
}

/// `ip:port` or `[ip6]:port` as Redis prints a client address.
fn parse_client(client: &str) -> Option<SocketAddr> {
    let (ip, port) = client.rsplit_once(':')?;
    let ip: IpAddr = ip.trim_start_matches('[').trim_end_matches(']').parse().ok()?;
    Some(SocketAddr::new(canonical(ip), port.parse().ok()?))
}

/// IPv4-mapped IPv6 addresses as plain IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Which client addresses are this process's connections to the server.
struct Owners {
    server: SocketAddr,
    excluded: SocketAddr,
    ours: HashSet<SocketAddr>,
    not_ours: HashSet<String>,
    /// `/proc` is readable: without it every client is counted.
    proc_ok: bool,
}

impl Owners {
    fn new(server: SocketAddr, excluded: SocketAddr) -> Self {
        let mut o = Owners {
            server: SocketAddr::new(canonical(server.ip()), server.port()),
            excluded: SocketAddr::new(canonical(excluded.ip()), excluded.port()),
            ours: HashSet::new(),
            not_ours: HashSet::new(),
            proc_ok: true,
        };
        o.rescan();
        o
    }

    fn rescan(&mut self) {
        match own_connections(self.server) {
            Ok(set) => self.ours.extend(set),
            Err(e) => {
                if self.proc_ok {
                    tracing_note(&e);
                }
                self.proc_ok = false;
            }
        }
        self.ours.remove(&self.excluded);
    }

    fn is_ours(&mut self, client: &str) -> bool {
        let Some(addr) = parse_client(client) else {
            return false;
        };
        if addr == self.excluded {
            return false;
        }
        if !self.proc_ok || self.ours.contains(&addr) {
            return true;
        }
        if self.not_ours.contains(client) {
            return false;
        }
        // A connection opened since the last scan, or someone else's.
        self.rescan();
        if !self.proc_ok || self.ours.contains(&addr) {
            return true;
        }
        self.not_ours.insert(client.to_string());
        false
    }
}

fn tracing_note(e: &anyhow::Error) {
    eprintln!("note: cannot tell this process's Redis connections apart ({e:#}); counting every client");
}

/// Local addresses of this process's TCP connections to `server`.
fn own_connections(server: SocketAddr) -> Result<HashSet<SocketAddr>> {
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir("/proc/self/fd").context("reading /proc/self/fd")? {
        let Ok(entry) = entry else { continue };
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let target = target.to_string_lossy();
        if let Some(inode) = target.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
            if let Ok(inode) = inode.parse::<u64>() {
                inodes.insert(inode);
            }
        }
    }
    let mut ours = HashSet::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for (local, remote, inode) in text.lines().skip(1).filter_map(parse_tcp_row) {
            if remote == server && inodes.contains(&inode) {
                ours.insert(local);
            }
        }
    }
    if inodes.is_empty() {
        return Err(anyhow!("no sockets found in /proc/self/fd"));
    }
    Ok(ours)
}

/// `(local, remote, inode)` of one row of `/proc/net/tcp` or `/proc/net/tcp6`.
fn parse_tcp_row(row: &str) -> Option<(SocketAddr, SocketAddr, u64)> {
    let cols: Vec<&str> = row.split_whitespace().collect();
    let local = parse_hex_addr(cols.get(1)?)?;
    let remote = parse_hex_addr(cols.get(2)?)?;
    let inode = cols.get(9)?.parse().ok()?;
    Some((local, remote, inode))
}

/// `0100007F:1F90` (IPv4) or 32 hex digits `:port` (IPv6), each 32-bit word in host order.
fn parse_hex_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word =
        |i: usize| -> Option<[u8; 4]> { Some(u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?.to_ne_bytes()) };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(canonical(ip), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_monitor_lines() {
        let l = b"1795239405.504120 [0 127.0.0.1:54580] \"evalsha\" \"ab\" \"1\" \"k\"\r\n";
        assert_eq!(parse_line(l), Some(("127.0.0.1:54580", "evalsha")));
        assert_eq!(parse_line(b"1.2 [0 lua] \"set\" \"k\" \"x\"\n"), Some(("lua", "set")));
        assert_eq!(parse_line(b"+OK\r\n"), None);
        assert_eq!(
            parse_client("[::1]:6000"),
            Some(SocketAddr::new("::1".parse().unwrap(), 6000))
        );
        assert_eq!(parse_client("127.0.0.1:7"), Some("127.0.0.1:7".parse().unwrap()));
    }

    #[test]
    fn parses_proc_rows() {
        if cfg!(target_endian = "little") {
            let row =
                "  0: 0100007F:D431 0100007F:3FEB 01 00000000:00000000 00:00000000 00000000  1000        0 4242 1";
            let (local, remote, inode) = parse_tcp_row(row).unwrap();
            assert_eq!(local, "127.0.0.1:54321".parse().unwrap());
            assert_eq!(remote, "127.0.0.1:16363".parse().unwrap());
            assert_eq!(inode, 4242);
            let v6 = "0000000000000000FFFF00000100007F:0050";
            assert_eq!(parse_hex_addr(v6), Some("127.0.0.1:80".parse().unwrap()));
        }
    }

    #[test]
    fn summary_orders_by_count() {
        let mut t = Tally::default();
        t.by_command.insert("PING".into(), 1);
        t.by_command.insert("EVALSHA".into(), 5);
        assert_eq!(t.requests(), 6);
        assert_eq!(t.summary(), "EVALSHA×5 PING×1");
    }
}
