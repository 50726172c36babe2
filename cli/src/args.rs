//! The command line: global options and the subcommands, parsed with clap.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};
use locksmith::driver::url::parse_duration;
use locksmith::driver::LockName;
use locksmith::{LockKind, MAX_PERMITS, MAX_TTL, MIN_TTL};

use crate::exit::EXIT_CODES_HELP;

/// The URL without `--url` or `LOCKSMITH_URL`: the user's lock directory, or `mem://` in a build
/// without the `file` backend.
fn default_url() -> String {
    #[cfg(feature = "file")]
    return locksmith::default_file_url();
    #[cfg(not(feature = "file"))]
    return "mem://".to_owned();
}

/// `locksmith`: take a distributed lock from the shell.
#[derive(Debug, Parser)]
#[command(
    name = "locksmith",
    version,
    about = "flock(1) for etcd, ZooKeeper, Redis, PostgreSQL, MySQL/MariaDB, lock files on this machine and an in-process store: run a command under a distributed lock, a semaphore permit, a read-write lock, or while leading an election",
    after_help = EXIT_CODES_HELP
)]
pub struct Cli {
    /// Backend URL: etcd://h:2379, zk://h:2181, redis://h:6379 (or redis://h:6379?layout=plain),
    /// redis+sentinel://s1:26379,s2:26379/mymaster, redis-cluster://h1:7000,h2:7001,
    /// postgres://user@h:5432/db, mysql://user@h:3306/db (or mariadb://; a primary and its
    /// replicas: mysql://user@h1:3306,h2:3306/db), file:///dir (the processes of this machine, no server), mem://. The default is a
    /// directory that every locksmith process of this user shares, so two `locksmith run`
    /// commands on one machine exclude each other with no server. mem:// is in-process only:
    /// only good for trying the command out. An empty LOCKSMITH_URL means the default.
    #[arg(long, env = "LOCKSMITH_URL", default_value_t = default_url(), global = true)]
    pub url: String,

    /// Lease time (default 15s): how long the lock outlives a locksmith that crashed or was cut
    /// off (renewed in the background while held). With a unit: 500ms, 10s, 2m. On etcd and ZooKeeper it
    /// is the session TTL (the URL's ttl= option, if given, wins); backends may round it up.
    /// `inspect`, `list` and `leader` take no lock and reject it.
    #[arg(long, value_parser = parse_ttl, global = true)]
    pub ttl: Option<Duration>,

    /// How long the whole command may take to get its answer, connecting included (default:
    /// without limit), with a unit: 500ms, 10s, 2m. `run`/`hold`/`elect` wait this long for a held
    /// lock and for a backend that cannot be reached yet (retrying the connection); `try`,
    /// `inspect`, `list` and `leader` give up on a backend that does not answer (`try` after
    /// the clean-up of its cut attempt: half a second more at most). 0 makes one
    /// attempt (connecting gets --connect-timeout). When it runs out: exit 1 if the lock was held
    /// by another, exit 3 if the backend did not answer.
    #[arg(long, value_parser = parse_any_duration, global = true)]
    pub timeout: Option<Duration>,

    /// How long one attempt to connect to the backend may take (with a unit: 500ms, 10s, 2m):
    /// `try`, `inspect`, `list` and `leader` then give up (exit 3); `run`, `hold` and `elect` try
    /// again, with backoff, until --timeout. It is also the backend's own connect timeout (the
    /// URL's connect_timeout= option, if given, wins).
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration, global = true)]
    pub connect_timeout: Duration,

    /// TLS: a PEM bundle of the CA certificates to trust instead of the system's (the URL's
    /// `ca=` wins). For etcds://, zks://, rediss:// (and rediss+sentinel://, rediss-cluster://) URLs,
    /// postgres:// ones with sslmode=require or verify-full, and mysql:// ones with ssl_mode=required,
    /// verify_ca or verify_identity. LOCKSMITH_CA, LOCKSMITH_CERT and
    /// LOCKSMITH_KEY apply to those URLs only (the others ignore them).
    #[arg(long, env = "LOCKSMITH_CA", global = true, value_name = "FILE")]
    pub ca: Option<String>,

    /// TLS: a client certificate (PEM), with --key, for servers that require one (mutual TLS).
    #[arg(long, env = "LOCKSMITH_CERT", global = true, value_name = "FILE", requires = "key")]
    pub cert: Option<String>,

    /// TLS: the client certificate's private key (PEM).
    #[arg(long, env = "LOCKSMITH_KEY", global = true, value_name = "FILE", requires = "cert")]
    pub key: Option<String>,

    /// A file holding the password of the URL's user (keeps it out of the URL, the shell history
    /// and `ps`). LOCKSMITH_PASSWORD is read when neither the URL nor this gives one. Passwords
    /// never appear in messages. LOCKSMITH_PASSWORD_FILE applies only to URLs that take a password
    /// (not file:// or mem://).
    #[arg(long, env = "LOCKSMITH_PASSWORD_FILE", global = true, value_name = "FILE")]
    pub password_file: Option<String>,

    /// Print results on stdout as one JSON object per line.
    #[arg(long, global = true)]
    pub json: bool,

    /// No status messages on stderr (errors are still printed).
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// More log output on stderr (-v: info, -vv: debug). RUST_LOG overrides.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands that take no lock, and so reject `--ttl`: their help does not show it.
const NO_TTL: [&str; 7] = ["inspect", "list", "leader", "init", "prune", "completions", "man"];

/// The command line as clap parses it: [`Cli`], where the subcommands that reject `--ttl`
/// ([`NO_TTL`]) have a hidden `--ttl` of their own that refuses any value, so that their help
/// does not offer the global one (`locksmith --ttl 5s inspect x` is refused as before).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Cli::command().version(version());
    for name in NO_TTL {
        let refuse = move |_: &str| -> Result<Duration, String> {
            Err(format!("`{name}` takes no lock, so --ttl means nothing to it"))
        };
        // A subcommand that has an argument of a global's id does not get the global one.
        // Outside the order of the help (`next_display_order(None)`): the subcommand's own
        // options, defined after it ([`Command`] defers them), still come first there.
        cmd = cmd.mut_subcommand(name, |sub| {
            sub.next_display_order(None)
                .arg(
                    clap::Arg::new("ttl")
                        .long("ttl")
                        .value_name("TTL")
                        .hide(true)
                        .value_parser(refuse),
                )
                .next_display_order(0)
        });
    }
    cmd
}

/// The options of the URL that environment variables may give (`LOCKSMITH_CA`, `LOCKSMITH_CERT`,
/// `LOCKSMITH_KEY`, `LOCKSMITH_PASSWORD_FILE`): clap's id of each, the same as the URL option's
/// name.
const ENV_URL_OPTIONS: [&str; 4] = ["ca", "cert", "key", "password_file"];

impl Cli {
    /// The command line of `matches`, with what the environment gave only where it fits: an empty
    /// `LOCKSMITH_URL` means the default URL, and an option of [`ENV_URL_OPTIONS`] that came from
    /// the environment is left out for a URL that takes no such option: a backend without it, or
    /// a URL without TLS for the TLS files (`LOCKSMITH_CA` is meant for the TLS URLs, not for
    /// `file://`, `mem://` or `redis://`). The same option given on the command line is kept, and
    /// refused by such a URL when connecting; an option the URL sets itself wins over both.
    pub fn from_matches(matches: &clap::ArgMatches) -> Result<Cli, clap::Error> {
        use clap::parser::ValueSource;
        use clap::FromArgMatches;
        let mut cli = Cli::from_arg_matches(matches)?;
        let from_env = |id: &str| matches.value_source(id) == Some(ValueSource::EnvVariable);
        if from_env("url") && cli.url.trim().is_empty() {
            cli.url = default_url();
        }
        let url = locksmith::driver::BackendUrl::parse(&cli.url).ok();
        let takes = |option: &str| {
            url.as_ref().is_some_and(|url| {
                let accepted = locksmith::backend_for(&url.scheme).is_some_and(|b| b.accepts(option));
                accepted && (option == "password_file" || uses_tls(url))
            })
        };
        let fields = [&mut cli.ca, &mut cli.cert, &mut cli.key, &mut cli.password_file];
        for (option, field) in ENV_URL_OPTIONS.into_iter().zip(fields) {
            if field.is_some() && from_env(option) && !takes(option) {
                *field = None;
            }
        }
        Ok(cli)
    }
}

/// Whether `url` connects with TLS, so that it takes the TLS files (`ca`, `cert`, `key`): the
/// TLS schemes (etcds://, zks://, rediss:// and its sentinel and cluster forms), postgres://
/// with `sslmode=require` or `verify-full`, and mysql:// (mariadb://) with an `ssl_mode=` other
/// than `disabled`.
fn uses_tls(url: &locksmith::driver::BackendUrl) -> bool {
    match url.scheme.as_str() {
        "etcds" | "zks" | "rediss" | "rediss+sentinel" | "rediss-cluster" => true,
        "postgres" | "postgresql" => {
            matches!(
                url.query.get("sslmode").map(String::as_str),
                Some("require" | "verify-full")
            )
        }
        "mysql" | "mariadb" => {
            matches!(
                url.query.get("ssl_mode").map(String::as_str),
                Some("required" | "verify_ca" | "verify_identity")
            )
        }
        _ => false,
    }
}

/// What `locksmith --version` prints after the name: the version and what this build can reach,
/// e.g. `0.1.0 (backends: mem, etcd, zk, redis, file, postgres; tls)`.
pub fn version() -> String {
    let backends: Vec<&str> = locksmith::backends().iter().map(|d| d.name).collect();
    let tls = if cfg!(feature = "tls") { "; tls" } else { "" };
    format!("{} (backends: {}{tls})", env!("CARGO_PKG_VERSION"), backends.join(", "))
}

/// The subcommands.
///
/// Each subcommand's arguments are defined only when it is the one given (or for help, completions
/// and the manual page): defining all of them cost 5% of the instructions of a whole
/// `locksmith run`. So the argument structs below carry plain comments, not doc comments: clap
/// takes a struct's doc comment for the subcommand's description, which, defined later, would
/// replace the variant's (`run --help` said "Arguments of `run`").
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Acquire NAME, run CMD while holding it, release when CMD exits. CMD gets
    /// LOCKSMITH_FENCING_TOKEN and LOCKSMITH_LOCK_NAME in its environment and runs in a process
    /// group of its own; if the lock is lost, that group gets SIGTERM (SIGKILL after --grace) and
    /// locksmith exits 4. If locksmith itself dies (even by SIGKILL), the group gets the same. SIGINT,
    /// SIGTERM and SIGHUP sent to locksmith are forwarded to CMD's group; if CMD or anything left in
    /// its group still runs --grace after a SIGINT/SIGTERM, or a second SIGINT/SIGTERM arrives, the
    /// group gets SIGKILL (the lock is released only then). On a terminal, CMD's group is the
    /// foreground group while CMD runs (it can read the terminal, and gets Ctrl-C itself; CMD
    /// killed by SIGINT ends locksmith by SIGINT once the lock is released). Ctrl-Z stops CMD's
    /// group but not locksmith, which holds on: continue CMD with `kill -CONT -PGID`.
    Run(RunArgs),
    /// One attempt, no waiting: print the fencing token and release (exit 0), or exit 1 if held.
    Try(TryArgs),
    /// Acquire NAME, print the fencing token, and hold it until --for passes, stdin (a pipe, a
    /// socket or a terminal) closes, or SIGINT/SIGTERM arrives; then release. A stdin that is
    /// /dev/null, a file or closed (cron, `&` in a script, nohup) is not watched; a terminal is
    /// watched only while hold runs in its foreground (`&` in an interactive shell holds on).
    Hold(HoldArgs),
    /// Show who holds NAME and how many wait, for every kind of lock of that name in use: the
    /// mutex (holder id, fencing token, remaining TTL), the semaphore, the read-write lock, the
    /// election (leader and term). For a semaphore or a read-write lock with more than one entry,
    /// the count of holders and waiters together (which of them hold, only the queue's own
    /// rule can tell).
    Inspect(NameArg),
    /// Campaign in the election NAME and run CMD while leading: CMD starts once this process
    /// leads, gets LOCKSMITH_TERM (the fencing token) in its environment, and is stopped as by
    /// `run` if the leadership is lost (exit 4); when CMD exits, locksmith resigns. Candidates
    /// lead one after another, in the order they started. Signals and the terminal are handled as
    /// by `run` (a second SIGINT/SIGTERM sends CMD's group SIGKILL).
    Elect(ElectArgs),
    /// List the locks in use (held or waited for) whose names start with PREFIX, in the URL's
    /// namespace: one line per lock with its kind and number of holders and waiters (for a
    /// semaphore or a read-write lock with more than one entry, the ranges they can be in: `1-4
    /// 0-3`); a name with a control character, such as a line break, is printed quoted, with
    /// escapes.
    List(ListArgs),
    /// Print who leads the election NAME (its value and term): exit 0, or 1 if nobody leads.
    /// With --follow, print every change of leader as the server reports it, until a signal (or
    /// until stdout's reader goes away: exit 141).
    Leader(LeaderArgs),
    /// Prepare the backend for lockers and check it: connect as a locker does, creating what the
    /// backend needs on first use (on PostgreSQL, the schema and its tables; nothing on the other
    /// backends), then print what was found. With --sql (postgres:// only), print that SQL
    /// instead, for a database owner to run, with the grants a locker's user needs (--grant).
    Init(InitArgs),
    /// Remove what the backend keeps of locks that nobody holds or waits for and that have been
    /// idle for --idle, and what dead lockers left behind; print how many (with --dry-run: how
    /// many it would remove, removing nothing). A lock that is held or waited for is never
    /// touched, and a name used again goes on with fencing tokens above its earlier ones.
    /// PostgreSQL: rows of the schema's `locks` table (no token handed out and no lease running
    /// for --idle; the largest token removed is kept in the row `~pruned`) and rows of its
    /// `owners` table (lockers whose heartbeat ended --idle ago); the locker's user needs DELETE on
    /// both (`init --sql --grant`). file://: a lock's `<name>.lock` and `<name>.state` files
    /// (untouched for --idle; the largest token removed is kept in `.pruned`), and the liveness
    /// files of dead lockers in `.owners/`. etcd, ZooKeeper and Redis keep nothing of a lock once
    /// it is free (keys and nodes go with their holders, or expire), nor does mem://: 0. Lockers
    /// of PostgreSQL and file:// also prune by themselves (idle 1h) about every 10 minutes: a
    /// command that connects when the schema or directory was last pruned 10 minutes ago or more
    /// prunes it (at most 100 locks), in the background while it runs.
    Prune(PruneArgs),
    /// Print the completion script of SHELL on stdout, e.g. `locksmith completions bash >
    /// ~/.local/share/bash-completion/completions/locksmith`, `locksmith completions zsh >
    /// "${fpath[1]}/_locksmith"`, `locksmith completions fish >
    /// ~/.config/fish/completions/locksmith.fish`.
    Completions(CompletionsArgs),
    /// Print this command's manual page (roff) on stdout, e.g. `locksmith man | man -l -`, or
    /// `locksmith man > /usr/local/share/man/man1/locksmith.1`.
    Man,
}

// Arguments of `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

// Arguments of `init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Print the SQL that creates the tables (postgres:// URLs), without connecting.
    #[arg(long)]
    pub sql: bool,

    /// With --sql: also print the grants that this database role needs to run lockers (and no
    /// more: no CREATE, no ownership).
    #[arg(long, value_name = "ROLE", requires = "sql")]
    pub grant: Option<String>,
}

// Arguments of `prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// How long a lock must have been idle (no grant, no lease running) to be removed, with a
    /// unit: 30m, 1h, 24h. 0s: every lock that nobody holds or waits for now.
    #[arg(long, default_value = "1h", value_parser = parse_any_duration)]
    pub idle: Duration,

    /// Remove nothing: print how many would be removed.
    #[arg(long)]
    pub dry_run: bool,
}

// What kind of lock `run`, `try` and `hold` take (default: the mutex NAME).
#[derive(Debug, Args, Clone, Copy, Default)]
#[group(multiple = false)]
pub struct KindArgs {
    /// Take one permit of the semaphore NAME, which has N permits: up to N holders at once.
    /// Every holder of NAME must give the same N (a different one is refused, exit 2).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_PERMITS)))]
    pub permits: Option<u32>,

    /// Take the read side of the read-write lock NAME: shared with other readers.
    #[arg(long)]
    pub read: bool,

    /// Take the write side of the read-write lock NAME: alone (waiting writers go before later
    /// readers).
    #[arg(long)]
    pub write: bool,
}

impl KindArgs {
    /// The lock kind these flags ask for.
    pub fn kind(&self) -> LockKind {
        match (self.permits, self.read, self.write) {
            (Some(permits), _, _) => LockKind::Permit { permits },
            (None, true, _) => LockKind::Read,
            (None, false, true) => LockKind::Write,
            (None, false, false) => LockKind::Mutex,
        }
    }
}

// Arguments of `try`.
#[derive(Debug, Args)]
pub struct TryArgs {
    /// The lock name (1 to 1024 bytes of UTF-8, no NUL).
    // A negative number is a name (an advisory lock's key on PostgreSQL: `run -7 -- CMD`).
    #[arg(value_parser = NameParser, allow_negative_numbers = true)]
    pub name: String,

    #[command(flatten)]
    pub kind: KindArgs,
}

// Arguments of `elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election's name (1 to 1024 bytes of UTF-8, no NUL).
    // A negative number is a name (an advisory lock's key on PostgreSQL: `run -7 -- CMD`).
    #[arg(value_parser = NameParser, allow_negative_numbers = true)]
    pub name: String,

    /// What the other candidates and `locksmith leader` see of this one (default:
    /// `<hostname>:<pid>`).
    #[arg(long)]
    pub value: Option<String>,

    /// How long CMD's process group (CMD and what it started there, whether CMD exited or not)
    /// has to exit before it gets SIGKILL: after the SIGTERM sent when leadership was lost, or
    /// after a SIGINT/SIGTERM forwarded to it (a second one kills at once).
    #[arg(long, default_value = "10s", value_parser = parse_any_duration)]
    pub grace: Duration,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    pub command: Vec<OsString>,
}

// Arguments of `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only locks whose names start with this (default: every lock).
    #[arg(default_value = "", allow_negative_numbers = true)]
    pub prefix: String,
}

// Arguments of `leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The election's name (1 to 1024 bytes of UTF-8, no NUL).
    // A negative number is a name (an advisory lock's key on PostgreSQL: `run -7 -- CMD`).
    #[arg(value_parser = NameParser, allow_negative_numbers = true)]
    pub name: String,

    /// Keep printing: one line per change of leader, pushed by the server, until SIGINT/SIGTERM
    /// (or until stdout is closed: `locksmith leader NAME --follow | head -3` ends).
    #[arg(long)]
    pub follow: bool,
}

// A lock name.
#[derive(Debug, Args)]
pub struct NameArg {
    /// The lock name (1 to 1024 bytes of UTF-8, no NUL).
    // A negative number is a name (an advisory lock's key on PostgreSQL: `run -7 -- CMD`).
    #[arg(value_parser = NameParser, allow_negative_numbers = true)]
    pub name: String,
}

// Arguments of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock name (1 to 1024 bytes of UTF-8, no NUL).
    // A negative number is a name (an advisory lock's key on PostgreSQL: `run -7 -- CMD`).
    #[arg(value_parser = NameParser, allow_negative_numbers = true)]
    pub name: String,

    /// How long CMD's process group (CMD and what it started there, whether CMD exited or not)
    /// has to exit before it gets SIGKILL: after the SIGTERM sent when the lock was lost, or
    /// after a SIGINT/SIGTERM forwarded to it (a second one kills at once).
    #[arg(long, default_value = "10s", value_parser = parse_any_duration)]
    pub grace: Duration,

    #[command(flatten)]
    pub kind: KindArgs,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    pub command: Vec<OsString>,
}

// Arguments of `hold`.
#[derive(Debug, Args)]
pub struct HoldArgs {
    /// The lock name (1 to 1024 bytes of UTF-8, no NUL).
    // A negative number is a name (an advisory lock's key on PostgreSQL: `run -7 -- CMD`).
    #[arg(value_parser = NameParser, allow_negative_numbers = true)]
    pub name: String,

    /// Release after this long (default: hold until stdin closes or a signal arrives; with no
    /// stdin to watch, until a signal arrives).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_positive_duration)]
    pub hold_for: Option<Duration>,

    /// Do not watch stdin (for running in the background with stdin at /dev/null).
    #[arg(long)]
    pub ignore_stdin: bool,

    #[command(flatten)]
    pub kind: KindArgs,
}

/// The longest duration a flag takes (ten years): a deadline or a grace period is added to the
/// clock, and one beyond what it can hold would panic there.
const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 86_400);

/// A duration with its unit (`500ms`, `10s`, `2m`, `1h`), at most [`MAX_DURATION`]; a bare number
/// is refused (is `10` ten seconds or ten milliseconds?), except `0`, which is zero in any unit.
fn parse_any_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) && t.bytes().any(|b| b != b'0') {
        return Err(format!("{s:?} has no unit: add a unit: 10s, 500ms, 2m"));
    }
    let d = parse_duration(s).ok_or_else(|| format!("{s:?} is not a duration like 500ms, 10s, 2m or 1h"))?;
    if d > MAX_DURATION {
        return Err(format!("{s:?} is longer than ten years"));
    }
    Ok(d)
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_any_duration(s)? {
        d if d.is_zero() => Err("must be greater than zero".into()),
        d => Ok(d),
    }
}

fn parse_ttl(s: &str) -> Result<Duration, String> {
    let ttl = parse_any_duration(s)?;
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(format!("the TTL must be between {MIN_TTL:?} and {MAX_TTL:?}"));
    }
    Ok(ttl)
}

/// Parses a lock name. A refused name is shown cut to its first [`NAME_SHOWN`] characters: a
/// name of many kilobytes would otherwise fill the terminal with one error line.
#[derive(Clone)]
struct NameParser;

/// How many characters of a refused lock name its error shows.
const NAME_SHOWN: usize = 60;

impl clap::builder::TypedValueParser for NameParser {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let refuse = |kind, message: String| clap::Error::raw(kind, format!("{message}\n")).with_cmd(cmd);
        let s = value.to_str().ok_or_else(|| {
            refuse(
                clap::error::ErrorKind::InvalidUtf8,
                "the lock name is not valid UTF-8".into(),
            )
        })?;
        LockName::new(s).map(|n| n.as_str().to_owned()).map_err(|e| {
            let shown: String = s.chars().take(NAME_SHOWN).collect();
            let cut = if shown.len() < s.len() { "..." } else { "" };
            refuse(
                clap::error::ErrorKind::ValueValidation,
                format!("{e} (the name: {shown:?}{cut})"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    #[test]
    fn a_refused_lock_name_is_shown_cut_short() {
        let long = "a".repeat(5000);
        let e = Cli::try_parse_from(["locksmith", "try", &long])
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid lock name") && e.contains("5000 bytes"), "{e}");
        assert!(e.len() < 300, "{} bytes of error", e.len());
        let e = Cli::try_parse_from(["locksmith", "try", ""]).unwrap_err().to_string();
        assert!(
            e.contains("invalid lock name: the name is empty (the name: \"\")"),
            "{e}"
        );
    }

    #[test]
    fn which_urls_take_the_tls_files() {
        let tls = |url: &str| uses_tls(&locksmith::driver::BackendUrl::parse(url).unwrap());
        assert!(tls("postgres://u@h/db?sslmode=verify-full"));
        assert!(!tls("postgres://u@h/db"));
        for mode in ["required", "verify_ca", "verify_identity"] {
            assert!(tls(&format!("mysql://u@h/db?ssl_mode={mode}")), "{mode}");
            assert!(tls(&format!("mariadb://u@h/db?ssl_mode={mode}")), "{mode}");
        }
        assert!(!tls("mysql://u@h/db"));
        assert!(!tls("mysql://u@h/db?ssl_mode=disabled"));
        assert!(tls("rediss://h") && !tls("redis://h") && !tls("file:///tmp/x"));
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }

    #[test]
    fn commands_that_take_no_lock_refuse_ttl() {
        let parse = |args: &[&str]| command().try_get_matches_from(args).map(|m| Cli::from_arg_matches(&m));
        let e = parse(&["locksmith", "inspect", "x", "--ttl", "5s"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`inspect` takes no lock"), "{e}");
        let cli = parse(&["locksmith", "--ttl", "5s", "inspect", "x"]).unwrap().unwrap();
        assert_eq!(cli.ttl, Some(Duration::from_secs(5)), "refused later, by the command");
        let cli = parse(&["locksmith", "try", "x", "--ttl", "5s"]).unwrap().unwrap();
        assert_eq!(cli.ttl, Some(Duration::from_secs(5)));
    }

    #[test]
    fn durations_and_names_are_validated() {
        assert_eq!(parse_ttl("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_ttl("0").is_err());
        assert!(parse_ttl("10ms").is_err());
        assert!(parse_ttl("2d").is_err());
        assert!(parse_positive_duration("0s").is_err());
        assert_eq!(parse_any_duration("0"), Ok(Duration::ZERO));
        let name = |s: &str| {
            let cmd = Cli::command();
            clap::builder::TypedValueParser::parse_ref(&NameParser, &cmd, None, std::ffi::OsStr::new(s))
        };
        assert!(name("").is_err());
        assert!(name("a\0b").is_err());
        assert_eq!(name("orders/42").ok(), Some("orders/42".into()));
    }

    #[test]
    fn run_takes_the_command_after_the_double_dash() {
        let cli = Cli::try_parse_from([
            "locksmith",
            "--ttl",
            "2s",
            "run",
            "job",
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.command, ["sh", "-c", "exit 3"]);
        assert_eq!(run.grace, Duration::from_secs(1));
        assert_eq!(cli.ttl, Some(Duration::from_secs(2)));
        assert!(Cli::try_parse_from(["locksmith", "run", "job"]).is_err());
    }

    /// A negative number is a name (PostgreSQL's `layout=advisory` takes `-7` as a key, as
    /// docs/interop.md says), not an unknown option: `run -7 -- CMD` was refused.
    #[test]
    fn a_negative_number_is_a_name() {
        let name_of = |args: &[&str]| match Cli::try_parse_from(args).map(|cli| cli.command) {
            Ok(Command::Run(a)) => a.name,
            Ok(Command::Elect(a)) => a.name,
            Ok(Command::Try(a)) => a.name,
            Ok(Command::Hold(a)) => a.name,
            Ok(Command::Inspect(a)) => a.name,
            Ok(Command::Leader(a)) => a.name,
            other => panic!("{args:?}: {other:?}"),
        };
        assert_eq!(name_of(&["locksmith", "run", "-7", "--", "true"]), "-7");
        assert_eq!(name_of(&["locksmith", "elect", "-42", "--", "true"]), "-42");
        assert_eq!(name_of(&["locksmith", "try", "-7"]), "-7");
        assert_eq!(name_of(&["locksmith", "hold", "-7", "--for", "1s"]), "-7");
        assert_eq!(name_of(&["locksmith", "inspect", "-7"]), "-7");
        assert_eq!(name_of(&["locksmith", "leader", "-7"]), "-7");
        let Ok(Command::List(list)) = Cli::try_parse_from(["locksmith", "list", "-7"]).map(|cli| cli.command) else {
            panic!("list -7")
        };
        assert_eq!(list.prefix, "-7");
        // Options still are options.
        assert!(Cli::try_parse_from(["locksmith", "run", "-x", "--", "true"]).is_err());
    }
}
