//! One script call, built straight into the command that is sent: `FCALL` of the script's
//! function where the server runs our function libraries, `EVALSHA` of the plain script where it
//! cannot (Redis 6, or an ACL without `FUNCTION LOAD` or `FCALL`).

use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, ServerErrorKind, ToRedisArgs};

use crate::protocol::library::{Library, LuaScript};

/// How one server is sent our scripts: as functions of our libraries (`FCALL`) or as plain
/// scripts (`EVALSHA`). Functions until the server refuses them (see [`ScriptMode::refused`]):
/// then plain scripts for the rest of the process.
#[derive(Debug)]
pub(crate) struct ScriptMode {
    functions: AtomicBool,
}

impl Default for ScriptMode {
    fn default() -> ScriptMode {
        ScriptMode::new(true)
    }
}

impl ScriptMode {
    /// A mode that starts with plain scripts (`functions: false`) or functions.
    pub(crate) fn new(functions: bool) -> ScriptMode {
        ScriptMode {
            functions: AtomicBool::new(functions),
        }
    }

    /// `true`: calls are `FCALL`s.
    pub(crate) fn functions(&self) -> bool {
        self.functions.load(Ordering::Relaxed)
    }

    /// From now on, plain scripts: the server refused a function (`error`).
    pub(crate) fn fall_back(&self, addr: &str, error: &RedisError) {
        if self.functions.swap(false, Ordering::Relaxed) {
            tracing::info!(addr, %error, "redis refuses function libraries; sending plain scripts (EVALSHA) instead");
        }
    }

    /// Whether `e` says the server will not run our functions at all: it has no `FUNCTION` or
    /// `FCALL` (Redis 6: unknown command), or the user's ACL does not allow them (`NOPERM` naming
    /// the command; a `NOPERM` about a key is not this).
    pub(crate) fn refused(e: &RedisError) -> bool {
        let text = e.to_string().to_ascii_lowercase();
        let about_functions = text.contains("fcall") || text.contains("function");
        let unknown = text.contains("unknown command") || text.contains("unknown subcommand");
        about_functions && ((e.code() == Some("NOPERM") && !text.contains("key")) || unknown)
    }
}

/// Loads `library` (`FUNCTION LOAD`). One that is already there counts as loaded: its name is the
/// hash of its code (see [`crate::protocol::library`]). On a cluster it goes to every master.
pub(crate) async fn load_library(library: &Library, conn: &mut impl ConnectionLike) -> RedisResult<()> {
    match redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&library.source)
        .query_async::<redis::Value>(conn)
        .await
    {
        Err(e) if already_loaded(&e) => Ok(()),
        other => other.map(drop),
    }
}

/// `FUNCTION LOAD`'s answer for a library of that name already loaded.
pub(crate) fn already_loaded(e: &RedisError) -> bool {
    e.to_string().contains("already exists")
}

/// `FCALL`'s answer for a function the server does not have (it restarted without persistence,
/// its functions were flushed, or a replica without them was promoted).
fn function_missing(e: &RedisError) -> bool {
    e.to_string().contains("Function not found")
}

/// A call of one of our scripts: `FCALL <function> <number of keys> <keys> <args>` (or `EVALSHA
/// <hash> …`), written into one command buffer as the arguments come. `redis::ScriptInvocation`
/// keeps a buffer per argument and copies them all into a command at every send; this runs on
/// every acquire and release. A server that does not have the function or script (it restarted,
/// or was flushed) is sent the library or script and then the call again.
pub(crate) struct ScriptCall<'a> {
    script: &'a LuaScript,
    mode: &'a ScriptMode,
    /// The address, for the log line when the server refuses functions.
    addr: &'a str,
    /// `true`: `cmd` is an `FCALL`.
    functions: bool,
    cmd: Cmd,
}

impl<'a> ScriptCall<'a> {
    /// A call of `script` on `keys`, sent the way `mode` says; add its arguments with
    /// [`ScriptCall::arg`].
    pub(crate) fn new(script: &'a LuaScript, keys: &[&str], mode: &'a ScriptMode, addr: &'a str) -> ScriptCall<'a> {
        let functions = mode.functions();
        let mut cmd = Cmd::with_capacity(3 + keys.len() + 8, 64 + keys.iter().map(|k| k.len()).sum::<usize>() * 2);
        if functions {
            cmd.arg("FCALL").arg(&script.function);
        } else {
            cmd.arg("EVALSHA").arg(script.script.get_hash());
        }
        cmd.arg(keys.len());
        for key in keys {
            cmd.arg(*key);
        }
        ScriptCall {
            script,
            mode,
            addr,
            functions,
            cmd,
        }
    }

    /// The call's first key (`KEYS[1]`), which decides its cluster slot.
    pub(crate) fn first_key(&self) -> Option<&str> {
        match self.cmd.args_iter().nth(3)? {
            redis::Arg::Simple(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// Appends one argument (`ARGV[i]`).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut ScriptCall<'a> {
        self.cmd.arg(arg);
        self
    }

    /// Sends the call. A function the server does not have: loads its library and sends the call
    /// once more. A server that refuses functions: the same call as a plain script (and plain
    /// scripts from then on). A plain script the server does not have (`NOSCRIPT`): loads it and
    /// sends it once more. A call that met any of these did not run, so sending it again is safe.
    pub(crate) async fn invoke<T: FromRedisValue>(&self, conn: &mut impl ConnectionLike) -> RedisResult<T> {
        if !self.functions {
            return self.evalsha(&self.cmd, conn).await;
        }
        let refused = match self.cmd.query_async(conn).await {
            Err(e) if function_missing(&e) => match load_library(&self.script.library, conn).await {
                Ok(()) => return self.cmd.query_async(conn).await,
                Err(e) if ScriptMode::refused(&e) => e,
                Err(e) => return Err(e),
            },
            Err(e) if ScriptMode::refused(&e) => e,
            other => return other,
        };
        self.mode.fall_back(self.addr, &refused);
        self.evalsha(&self.as_evalsha(), conn).await
    }

    /// Sends `cmd`, an `EVALSHA`; on `NOSCRIPT`, loads the script and sends it once more.
    async fn evalsha<T: FromRedisValue>(&self, cmd: &Cmd, conn: &mut impl ConnectionLike) -> RedisResult<T> {
        match cmd.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.script.load_async(conn).await?;
                cmd.query_async(conn).await
            }
            other => other,
        }
    }

    /// This `FCALL` as an `EVALSHA` of the plain script (the same keys and arguments).
    fn as_evalsha(&self) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.script.get_hash());
        for arg in self.cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                cmd.arg(bytes);
            }
        }
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::library::{build, Function};

    fn args(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => b"<cursor>".to_vec(),
            })
            .collect()
    }

    #[test]
    fn writes_fcall_or_evalsha_with_the_key_count_then_keys_then_args() {
        let scripts = build(
            "",
            vec![Function {
                name: "t",
                body: "return 1".into(),
                allow_oom: false,
            }],
        );
        let script = &scripts[0];
        let functions = ScriptMode::new(true);
        let mut call = ScriptCall::new(script, &["k1", "k2"], &functions, "test");
        call.arg("a").arg(7u64);
        let fcall: Vec<&[u8]> = vec![b"FCALL", script.function.as_bytes(), b"2", b"k1", b"k2", b"a", b"7"];
        assert_eq!(args(&call.cmd), fcall);
        let evalsha: Vec<&[u8]> = vec![
            b"EVALSHA",
            script.script.get_hash().as_bytes(),
            b"2",
            b"k1",
            b"k2",
            b"a",
            b"7",
        ];
        assert_eq!(args(&call.as_evalsha()), evalsha);
        let plain = ScriptMode::new(false);
        let mut call = ScriptCall::new(script, &["k1", "k2"], &plain, "test");
        call.arg("a").arg(7u64);
        assert_eq!(args(&call.cmd), evalsha);
    }

    #[test]
    fn refusals_are_told_from_other_errors() {
        let err = |code: &str, detail: &str| redis::make_extension_error(code.into(), Some(detail.into()));
        // Redis 7 with an ACL that forbids functions; Redis 6.
        assert!(ScriptMode::refused(&err(
            "NOPERM",
            "this user has no permissions to run the 'fcall' command"
        )));
        assert!(ScriptMode::refused(&err(
            "NOPERM",
            "this user has no permissions to run the 'function|load' command"
        )));
        assert!(ScriptMode::refused(&err(
            "ERR",
            "unknown command 'FCALL', with args beginning with: 'x'"
        )));
        assert!(ScriptMode::refused(&err(
            "ERR",
            "unknown command 'FUNCTION', with args beginning with: 'LOAD'"
        )));
        // Not a refusal of functions: a key outside the ACL, a missing function, a script error.
        assert!(!ScriptMode::refused(&err("NOPERM", "No permissions to access a key")));
        assert!(!ScriptMode::refused(&err("ERR", "Function not found")));
        assert!(!ScriptMode::refused(&err(
            "ERR",
            "user_script:1: Script attempted to access nonexistent global variable"
        )));
        assert!(function_missing(&err("ERR", "Function not found")));
        assert!(already_loaded(&err("ERR", "Library 'locksmith_x' already exists")));
    }
}
