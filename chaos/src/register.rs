//! The fenced register: the storage every worker writes to with its fencing token, as users are
//! told to use the token. It is a key in a Redis server of its own (not one the faults touch),
//! changed only by one Lua script, so each write is atomic and the server orders them all:
//!
//! - **checked** (the real thing): a write is accepted only if its token passes its part's rule
//!   ([`Role::class`]), and rejected otherwise. A mutex holder, a writer, a leader (`x`): at least
//!   the highest token accepted so far (`UPDATE … WHERE fence <= ?`). A reader (`r`): at least
//!   the highest token of an exclusive write accepted so far, so no reader admitted before a
//!   writer writes after it. A permit of N (`pN`): among the N highest tokens of the holders that
//!   have written and not left ([`Register::leave`], sent before the permit is given back): a
//!   holder whose permit went to someone else is refused once N newer holders wrote. The tokens
//!   of a semaphore do not say which permit a holder has, so the register cannot tell a stale
//!   permit from a live one older than it; what it holds is the semaphore's promise for writes:
//!   never more than N holders whose writes are accepted, the newest ones;
//! - **unchecked** (`--unsafe-register`, to show that the suite catches a broken setup): every
//!   write is accepted.
//!
//! Every accepted write is appended to a log in acceptance order (`<token> <writer>`): the
//! checker reads it to find writes of a stale holder accepted after a newer holder's.

use anyhow::{Context, Result};
use redis::aio::MultiplexedConnection;

use crate::primitive::Role;

/// KEYS: the register (highest token accepted), its log, the highest exclusive token accepted,
/// the permits' holders (a sorted set of tokens). ARGV: token, writer, checked (1/0), class
/// ([`Role::class`]). Returns 1 if accepted.
const WRITE: &str = r#"
local tok = tonumber(ARGV[1])
local class = ARGV[4]
if ARGV[3] == '1' then
  if class == 'x' then
    if tok < tonumber(redis.call('GET', KEYS[1]) or '0') then return 0 end
  elseif class == 'r' then
    if tok < tonumber(redis.call('GET', KEYS[3]) or '0') then return 0 end
  elseif not redis.call('ZSCORE', KEYS[4], ARGV[1]) then
    local n = tonumber(string.sub(class, 2))
    if redis.call('ZCOUNT', KEYS[4], '(' .. ARGV[1], '+inf') >= n then return 0 end
    redis.call('ZADD', KEYS[4], tok, ARGV[1])
    local extra = redis.call('ZCARD', KEYS[4]) - n
    if extra > 0 then redis.call('ZREMRANGEBYRANK', KEYS[4], 0, extra - 1) end
  end
end
if tok > tonumber(redis.call('GET', KEYS[1]) or '0') then redis.call('SET', KEYS[1], ARGV[1]) end
if class == 'x' and tok > tonumber(redis.call('GET', KEYS[3]) or '0') then
  redis.call('SET', KEYS[3], ARGV[1])
end
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1
"#;

/// KEYS: the permits' holders, the log. ARGV: token, writer. A permit holder leaves: its token
/// no longer counts among the N, and the log says so (`<token> <writer> left`).
const LEAVE: &str = r#"
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' left')
return 1
"#;

/// A connection to the register server.
#[derive(Clone)]
pub struct Register {
    conn: MultiplexedConnection,
    checked: bool,
}

/// One entry of a log, in the order the storage accepted them: an accepted write, or a permit
/// holder leaving (`left`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The writer's fencing token.
    pub token: u64,
    /// The writer (worker id).
    pub writer: String,
    /// A permit holder left (no write): its writes no longer count among the N.
    pub left: bool,
}

impl Accepted {
    /// An accepted write of `writer` with `token`.
    pub fn write(token: u64, writer: &str) -> Accepted {
        Accepted {
            token,
            writer: writer.to_owned(),
            left: false,
        }
    }

    /// One log line, `<token> <writer>` or `<token> <writer> left`; `None` for anything else.
    pub fn parse(line: &str) -> Option<Accepted> {
        let (token, rest) = line.split_once(' ')?;
        let (writer, left) = match rest.split_once(' ') {
            Some((writer, "left")) => (writer, true),
            Some(_) => return None,
            None => (rest, false),
        };
        Some(Accepted {
            left,
            ..Accepted::write(token.parse().ok()?, writer)
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

    /// Writes `token` for `lock` as `writer` in part `role`; whether the register accepted it.
    pub async fn write(&self, lock: &str, role: Role, token: u64, writer: &str) -> Result<bool> {
        let mut conn = self.conn.clone();
        let accepted: i64 = redis::Script::new(WRITE)
            .key(format!("register:{lock}"))
            .key(format!("register:{lock}:log"))
            .key(format!("register:{lock}:x"))
            .key(format!("register:{lock}:permits"))
            .arg(token)
            .arg(writer)
            .arg(if self.checked { "1" } else { "0" })
            .arg(role.class())
            .invoke_async(&mut conn)
            .await
            .context("writing to the register")?;
        Ok(accepted == 1)
    }

    /// A permit holder (`token`, `writer`) of `lock` leaves, before it gives the permit back.
    pub async fn leave(&self, lock: &str, token: u64, writer: &str) -> Result<()> {
        let mut conn = self.conn.clone();
        let _: i64 = redis::Script::new(LEAVE)
            .key(format!("register:{lock}:permits"))
            .key(format!("register:{lock}:log"))
            .arg(token)
            .arg(writer)
            .invoke_async(&mut conn)
            .await
            .context("leaving the register")?;
        Ok(())
    }

    /// Every write the register accepted for `lock`, and every permit holder's leaving, in order.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each part's rule, on the test servers' register (`LOCKSMITH_TEST_REGISTER`).
    #[tokio::test]
    async fn each_part_has_its_rule() {
        let url = crate::targets::env_url("LOCKSMITH_TEST_REGISTER").expect("the register");
        let register = Register::connect(&url, true).await.expect("connect");
        let fresh = || format!("register-test/{:08x}", rand::random::<u32>());
        let write = |lock: String, role: Role, token: u64, writer: &'static str| {
            let register = register.clone();
            async move { register.write(&lock, role, token, writer).await.expect("write") }
        };

        // Exclusive: at least every token accepted.
        let lock = fresh();
        assert!(write(lock.clone(), Role::Mutex, 5, "a").await);
        assert!(!write(lock.clone(), Role::Mutex, 4, "b").await);
        assert!(write(lock.clone(), Role::Mutex, 5, "a").await);

        // Readers in either order, then a writer: the readers admitted before it are refused.
        let lock = fresh();
        assert!(write(lock.clone(), Role::Read, 2, "r1").await);
        assert!(write(lock.clone(), Role::Read, 1, "r2").await);
        assert!(write(lock.clone(), Role::Write, 3, "w").await);
        assert!(!write(lock.clone(), Role::Read, 2, "r1").await);
        assert!(!write(lock.clone(), Role::Write, 2, "v").await);
        assert!(write(lock.clone(), Role::Read, 4, "r3").await);

        // Two permits: a third holder's write displaces the oldest; one that left makes room.
        let (lock, two) = (fresh(), Role::Permit(2));
        assert!(write(lock.clone(), two, 1, "a").await);
        assert!(write(lock.clone(), two, 2, "b").await);
        assert!(write(lock.clone(), two, 3, "c").await);
        assert!(!write(lock.clone(), two, 1, "a").await);
        assert!(write(lock.clone(), two, 2, "b").await);
        register.leave(&lock, 3, "c").await.expect("leave");
        assert!(write(lock.clone(), two, 4, "d").await);
        let log = register.log(&lock).await.expect("log");
        let left: Vec<&Accepted> = log.iter().filter(|a| a.left).collect();
        assert_eq!(
            left,
            [&Accepted {
                left: true,
                ..Accepted::write(3, "c")
            }]
        );
        assert_eq!(log.len(), 6, "{log:?}"); // five writes accepted, one leave
    }
}
