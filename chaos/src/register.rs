//! The fenced register: the storage every worker writes to with its fencing token, as users are
//! told to use the token. It is a key in a Redis server of its own (not one the faults touch),
//! changed only by one Lua script, so each write is atomic and the server orders them all:
//!
//! - **checked** (the real thing): a write is accepted only if its token is at least the
//!   highest one accepted so far (`UPDATE … WHERE fence <= ?`), and rejected otherwise;
//! - **unchecked** (`--unsafe-register`, to show that the suite catches a broken setup): every
//!   write is accepted.
//!
//! Every accepted write is appended to a log in acceptance order (`<token> <writer>`): the
//! checker reads it to find writes of a stale holder accepted after a newer holder's.

use anyhow::{Context, Result};
use redis::aio::MultiplexedConnection;

/// KEYS: the register, its log. ARGV: token, writer, checked (1/0). Returns 1 if accepted.
const WRITE: &str = r#"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local tok = tonumber(ARGV[1])
if ARGV[3] == '1' and tok < cur then return 0 end
if tok > cur then redis.call('SET', KEYS[1], ARGV[1]) end
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1
"#;

/// A connection to the register server.
#[derive(Clone)]
pub struct Register {
    conn: MultiplexedConnection,
    checked: bool,
}

/// One accepted write, in the order the register accepted them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The writer's fencing token.
    pub token: u64,
    /// The writer (worker id).
    pub writer: String,
}

impl Accepted {
    /// One log line, `<token> <writer>`; `None` for anything else.
    pub fn parse(line: &str) -> Option<Accepted> {
        let (token, writer) = line.split_once(' ')?;
        Some(Accepted {
            token: token.parse().ok()?,
            writer: writer.to_owned(),
        })
    }
}

impl Register {
    /// Connects to the register's Redis at `url` (`redis://host:port`).
    pub async fn connect(url: &str, checked: bool) -> Result<Register> {
        let client = redis::Client::open(url).with_context(|| format!("register URL {url}"))?;
        let conn = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            client.get_multiplexed_async_connection(),
        )
        .await
        .context("connecting to the register: timed out")?
        .with_context(|| format!("connecting to the register at {url}"))?;
        Ok(Register { conn, checked })
    }

    /// Whether the register checks tokens (false only in the self-check).
    pub fn checked(&self) -> bool {
        self.checked
    }

    /// Writes `token` for `lock` as `writer`; whether the register accepted it.
    pub async fn write(&self, lock: &str, token: u64, writer: &str) -> Result<bool> {
        let mut conn = self.conn.clone();
        let accepted: i64 = redis::Script::new(WRITE)
            .key(format!("register:{lock}"))
            .key(format!("register:{lock}:log"))
            .arg(token)
            .arg(writer)
            .arg(if self.checked { "1" } else { "0" })
            .invoke_async(&mut conn)
            .await
            .context("writing to the register")?;
        Ok(accepted == 1)
    }

    /// Every write the register accepted for `lock`, in order.
    pub async fn log(&self, lock: &str) -> Result<Vec<Accepted>> {
        let mut conn = self.conn.clone();
        let lines: Vec<String> = redis::cmd("LRANGE")
            .arg(format!("register:{lock}:log"))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .context("reading the register's log")?;
        Ok(lines.iter().filter_map(|line| Accepted::parse(line)).collect())
    }
}
