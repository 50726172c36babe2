//! One script call, built straight into the `EVALSHA` command that is sent.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};

/// A call of one of our scripts: `EVALSHA <hash> <number of keys> <keys> <args>`, written into
/// one command buffer as the arguments come. `redis::ScriptInvocation` keeps a buffer per argument
/// and copies them all into a command at every send; this runs on every acquire and release.
/// A server that does not know the script (`NOSCRIPT`: it restarted, or was flushed) is sent
/// `SCRIPT LOAD` and then the call again, as `redis::ScriptInvocation` does.
pub(crate) struct ScriptCall<'a> {
    script: &'a Script,
    cmd: Cmd,
}

impl<'a> ScriptCall<'a> {
    /// A call of `script` on `keys`; add its arguments with [`ScriptCall::arg`].
    pub(crate) fn new(script: &'a Script, keys: &[&str]) -> ScriptCall<'a> {
        let mut cmd = Cmd::with_capacity(3 + keys.len() + 8, 64 + keys.iter().map(|k| k.len()).sum::<usize>() * 2);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
        for key in keys {
            cmd.arg(*key);
        }
        ScriptCall { script, cmd }
    }

    /// Appends one argument (`ARGV[i]`).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut ScriptCall<'a> {
        self.cmd.arg(arg);
        self
    }

    /// Sends the call; on `NOSCRIPT`, loads the script and sends it once more.
    pub(crate) async fn invoke<T: FromRedisValue>(&self, conn: &mut impl ConnectionLike) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                self.cmd.query_async(conn).await
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_evalsha_with_the_key_count_then_keys_then_args() {
        let script = Script::new("return 1");
        let mut call = ScriptCall::new(&script, &["k1", "k2"]);
        call.arg("a").arg(7u64);
        let args: Vec<Vec<u8>> = call
            .cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => b"<cursor>".to_vec(),
            })
            .collect();
        let expected: Vec<&[u8]> = vec![b"EVALSHA", script.get_hash().as_bytes(), b"2", b"k1", b"k2", b"a", b"7"];
        assert_eq!(args, expected);
    }
}
