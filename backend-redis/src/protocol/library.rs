//! The scripts as a Redis 7 function library (`FUNCTION LOAD`, called with `FCALL`), with each
//! one also kept as a plain script (`EVALSHA`) for servers that have no functions (Redis 6) or
//! users whose ACL does not allow them.
//!
//! Why a library: a script sent by `EVALSHA` runs its whole source on every call, so every helper
//! it defines (`local function`, see [`crate::protocol::scripts`]) is a closure the server builds
//! again on every acquire and release. In a library the helpers and the settings are defined once,
//! when the library is loaded; a call runs only its function's body. `FCALL` also names its
//! function (a few bytes) where `EVALSHA` sends a 40-character hash.
//!
//! A library's name is `locksmith_` and the hash of what it contains, and every function's name
//! starts with it: two versions of locksmith, or two sets of settings, never replace each other's
//! functions, and loading a library that is already there changes nothing (the server answers
//! "already exists", which counts as loaded).

use std::sync::Arc;

use redis::Script;

use crate::protocol::lua::helpers_of;

/// One function library: its name and the source `FUNCTION LOAD` is sent.
#[derive(Debug)]
pub(crate) struct Library {
    /// `locksmith_<hash of the content>`.
    pub(crate) name: String,
    /// The source, starting with `#!lua name=<name>`.
    pub(crate) source: String,
}

/// One of our scripts, callable both ways: as a function of its library (`FCALL`) and as a plain
/// script (`EVALSHA`, loaded with `SCRIPT LOAD`).
#[derive(Debug)]
pub(crate) struct LuaScript {
    /// The plain script: the settings, the helpers it calls and its body.
    pub(crate) script: Script,
    /// Its source, for `SCRIPT LOAD`.
    pub(crate) source: String,
    /// Its name in `library`.
    pub(crate) function: String,
    /// The library that defines it.
    pub(crate) library: Arc<Library>,
}

/// One function of a library being assembled.
pub(crate) struct Function<'a> {
    /// Its short name (the library's name and `_` go before it).
    pub(crate) name: &'a str,
    /// Its code: what the plain script runs after the settings and helpers (it reads `KEYS` and
    /// `ARGV`, and ends with its `return`).
    pub(crate) body: String,
    /// `true`: the function runs even when the server is out of memory (`allow-oom`). A
    /// function without it is refused before it runs when Redis is over `maxmemory`, where a plain
    /// script (no flags) runs and fails only at a write that needs memory; the scripts that give a
    /// lock up (`DEL`, `ZREM`, `PUBLISH`) must keep working then, or a full server would keep
    /// every lock until its TTL. The plain script is unchanged (no flags).
    pub(crate) allow_oom: bool,
}

/// Builds the library of `functions`, which share `settings` (Lua that defines the settings'
/// constants; may be empty), and each function as a [`LuaScript`], in the order given.
///
/// The library defines the settings once, then every helper any of its functions calls (in the
/// order of [`crate::protocol::lua::HELPERS`]), then registers each function as a closure over
/// them whose parameters are named `KEYS` and `ARGV`, so a body reads exactly as in its plain
/// script.
pub(crate) fn build(settings: &str, functions: Vec<Function<'_>>) -> Vec<LuaScript> {
    let all_bodies: String = functions.iter().map(|f| f.body.as_str()).collect();
    let content = {
        let mut s = format!("{settings}{}", helpers_of(&all_bodies));
        for f in &functions {
            let flags = if f.allow_oom { ", flags={'allow-oom'}" } else { "" };
            s.push_str(&format!(
                "redis.register_function{{function_name=PREFIX .. '{}', callback=function(KEYS, ARGV)\n{}\nend{flags}}}\n",
                f.name, f.body
            ));
        }
        s
    };
    // The name is the hash of the content: the same code always loads under the same name.
    let hash = Script::new(&content).get_hash().to_owned();
    let name = format!("locksmith_{}", &hash[..20]);
    let source = format!("#!lua name={name}\nlocal PREFIX = '{name}_'\n{content}");
    let library = Arc::new(Library { name, source });
    functions
        .into_iter()
        .map(|f| {
            let plain = format!("{settings}{}{}", helpers_of(&f.body), f.body);
            LuaScript {
                script: Script::new(&plain),
                source: plain,
                function: format!("{}_{}", library.name, f.name),
                library: library.clone(),
            }
        })
        .collect()
}
