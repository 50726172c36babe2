//! The command line without a server: usage errors exit 2 with one line and no backtrace, an
//! unreachable backend exits 3, and `--help` documents the exit codes.

mod common;

use common::{assert_clean_error, assert_code, run, token};

#[test]
fn bad_input_exits_2_with_one_line() {
    let cases: &[&[&str]] = &[
        &["try", ""],
        &["--url", "not a url", "try", "x"],
        &["--url", "consul://127.0.0.1:8500", "try", "x"],
        &["--url", "redis://127.0.0.1:16379?no_such_option=1", "try", "x"],
        &["--url", "etcd://h:99999", "try", "x"],
        &["--url", "mem://a/b", "inspect", "x"],
        &["--ttl", "5s", "inspect", "x"],
        &["inspect", "x", "--ttl", "5s"],
        &["--ttl", "0", "try", "x"],
        &["--ttl", "5d", "hold", "x"],
        &["--timeout", "soon", "run", "x", "--", "true"],
        // Durations no clock can hold (they panicked, exit 101, where they were added to it).
        &["--timeout", "10000000000000000000s", "try", "x"],
        &["--timeout", "3000000000000000h", "list"],
        &["run", "--grace", "10000000000000000000s", "x", "--", "true"],
        &[
            "--url",
            "file:///tmp/locksmith-cli-huge?request_timeout=10000000000000000000",
            "try",
            "x",
        ],
        &["hold", "x", "--for", "0"],
        &["run", "x"],
        &["run", "", "--", "true"],
        &["frobnicate", "x"],
        &["try"],
    ];
    for args in cases {
        let out = run(args);
        assert_clean_error(&out, 2);
        assert!(out.stdout.is_empty(), "{args:?} printed {:?}", out.stdout);
    }
    let too_long = "x".repeat(2000);
    assert_clean_error(&run(&["try", &too_long]), 2);
}

#[test]
fn help_documents_the_exit_codes() {
    let out = run(&["--help"]);
    assert_code(&out, 0);
    for needle in [
        "Exit codes",
        "not acquired",
        "backend unavailable",
        "lost",
        "LOCKSMITH_URL",
        "mem://",
    ] {
        assert!(
            out.stdout.contains(needle),
            "--help does not mention {needle:?}:\n{}",
            out.stdout
        );
    }
    assert_code(&run(&["run", "--help"]), 0);
}

#[cfg(feature = "redis")]
#[test]
fn unreachable_backend_exits_3() {
    let url = format!("redis://127.0.0.1:{}", common::closed_port());
    for args in [vec!["--url", &url, "try", "x"], vec!["--url", &url, "inspect", "x"]] {
        let out = run(&args);
        assert_clean_error(&out, 3);
    }
    // `hold` and `run` retry until --timeout (logging that they do), then exit 3 saying why.
    for args in [
        vec!["--url", &url, "--timeout", "1s", "hold", "x"],
        vec!["--url", &url, "--timeout", "1s", "run", "x", "--", "echo", "ran"],
    ] {
        let out = run(&args);
        assert_code(&out, 3);
        let last = out.stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with("locksmith: backend unavailable"), "{}", out.stderr);
        assert!(!out.stdout.contains("ran"));
    }
}

#[cfg(feature = "etcd")]
#[test]
fn unreachable_etcd_exits_3() {
    let url = format!("etcd://127.0.0.1:{}", common::closed_port());
    assert_clean_error(&run(&["--connect-timeout", "5s", "--url", &url, "try", "x"]), 3);
}

#[cfg(feature = "zk")]
#[test]
fn unreachable_zookeeper_exits_3() {
    let url = format!("zk://127.0.0.1:{}", common::closed_port());
    assert_clean_error(&run(&["--connect-timeout", "5s", "--url", &url, "try", "x"]), 3);
}

/// mem:// works within one process: `try` and `run` succeed, `hold` prints a token.
#[test]
fn mem_backend_works_in_process() {
    let out = run(&["try", "x"]);
    assert_code(&out, 0);
    token(&out.stdout);
    assert_code(&run(&["run", "x", "--", "sh", "-c", "exit 3"]), 3);
    let out = run(&["hold", "x", "--for", "100ms"]);
    assert_code(&out, 0);
    token(&out.stdout);
}

/// Log lines carry no colour codes when stderr is not a terminal (here: a pipe), at any verbosity.
#[test]
fn no_colour_codes_off_a_terminal() {
    let out = run(&["-vv", "try", "x"]);
    assert_code(&out, 0);
    assert!(out.stderr.contains("released"), "no log lines at -vv: {:?}", out.stderr);
    assert!(
        !out.stderr.contains('\u{1b}'),
        "colour codes in piped stderr: {:?}",
        out.stderr
    );
}

/// No message ever shows a password: not for a bad URL, not for an unreachable server, not with
/// `-v` (which adds what the client library said). Nor options the command added to the URL
/// (`ttl=`, `connect_timeout=`): the URL is shown as it was typed.
#[test]
fn errors_never_show_the_password_or_added_options() {
    let port = common::closed_port();
    let mut urls = vec![format!("redis://user:hunter2@127.0.0.1:{port}?no_such_option=1")];
    if cfg!(feature = "redis") {
        urls.push(format!("redis://user:hunter2@127.0.0.1:{port}/0"));
    }
    if cfg!(feature = "etcd") {
        urls.push(format!("etcd://user:hunter2@127.0.0.1:{port}"));
    }
    if cfg!(feature = "zk") {
        urls.push(format!("zk://user:hunter2@127.0.0.1:{port}"));
    }
    for url in &urls {
        for verbose in ["-q", "-v", "-vv"] {
            let out = run(&[verbose, "--connect-timeout", "2s", "--url", url, "try", "x"]);
            assert!(matches!(out.code, Some(2 | 3)), "{url}: {out:?}");
            assert!(
                !out.stderr.contains("hunter2"),
                "{url} {verbose}: the password shows: {}",
                out.stderr
            );
            // The command adds them as `ttl=15000ms` and `connect_timeout=2000ms`.
            assert!(
                !out.stderr.contains("15000ms") && !out.stderr.contains("2000ms"),
                "{url} {verbose}: options the command added show: {}",
                out.stderr
            );
        }
    }
}

/// What failed fits on one short line; what the client library said underneath only with `-v`.
#[cfg(feature = "etcd")]
#[test]
fn etcd_errors_are_one_short_line_unless_verbose() {
    let url = format!("etcd://127.0.0.1:{}", common::closed_port());
    let out = run(&["--connect-timeout", "2s", "--url", &url, "try", "x"]);
    assert_clean_error(&out, 3);
    assert!(
        out.stderr.len() < 200,
        "{} characters: {}",
        out.stderr.len(),
        out.stderr
    );
}

/// A typo still gets clap's suggestion (it used to be cut from the one-line error).
#[test]
fn typos_get_a_suggestion() {
    let out = run(&["run", "--permit", "2", "x", "--", "true"]);
    assert_clean_error(&out, 2);
    assert!(out.stderr.contains("'--permits'"), "{}", out.stderr);
    assert!(!out.stderr.contains("as a value"), "{}", out.stderr);
    let out = run(&["tri", "x"]);
    assert_clean_error(&out, 2);
    assert!(out.stderr.contains("'try'"), "{}", out.stderr);
}

/// CMD without `--` before it: the error says that `--` is missing.
#[test]
fn cmd_without_double_dash_says_so() {
    for args in [
        &["run", "x", "true"][..],
        &["elect", "x", "true"],
        &["run", "x", "--grace", "1s", "echo", "hi"],
    ] {
        let out = run(args);
        assert_clean_error(&out, 2);
        assert!(
            out.stderr.contains("`--` is missing before CMD"),
            "{args:?}: {}",
            out.stderr
        );
    }
}

/// Durations need a unit (is `--ttl 10` ten seconds or ten milliseconds?); `0` needs none.
#[test]
fn durations_need_a_unit() {
    for args in [
        &["--ttl", "10", "try", "x"][..],
        &["--timeout", "5", "try", "x"],
        &["--connect-timeout", "5", "try", "x"],
        &["run", "x", "--grace", "3", "--", "true"],
        &["hold", "x", "--for", "2"],
    ] {
        let out = run(args);
        assert_clean_error(&out, 2);
        assert!(
            out.stderr.contains("add a unit: 10s, 500ms, 2m"),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert_code(&run(&["--timeout", "0", "try", "x"]), 0);
    assert_code(
        &run(&[
            "--timeout",
            "500ms",
            "--ttl",
            "10s",
            "run",
            "x",
            "--grace",
            "0",
            "--",
            "true",
        ]),
        0,
    );
}

/// `inspect`, `list` and `leader` reject --ttl, and their help does not offer it; the help of
/// `run` and `elect` says what a second SIGINT/SIGTERM does.
#[test]
fn help_offers_what_each_command_takes() {
    for command in ["inspect", "list", "leader"] {
        let out = run(&[command, "--help"]);
        assert_code(&out, 0);
        assert!(
            !out.stdout.contains("--ttl"),
            "`{command} --help` offers --ttl:\n{}",
            out.stdout
        );
    }
    let out = run(&["try", "--help"]);
    assert!(out.stdout.contains("--ttl"), "{}", out.stdout);
    for command in ["run", "elect"] {
        let out = run(&[command, "--help"]);
        let words = out.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(words.contains("a second SIGINT/SIGTERM"), "{}", out.stdout);
    }
}

/// `prune` takes no lock (no --ttl in its help), says per backend what it removes, and on a
/// backend that keeps nothing of a free lock (mem://) removes nothing.
#[test]
fn prune_says_what_it_removes_and_mem_keeps_nothing() {
    let help = run(&["prune", "--help"]);
    assert_code(&help, 0);
    let words = help.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for needle in [
        "--idle",
        "--dry-run",
        "PostgreSQL:",
        "file://:",
        "etcd, ZooKeeper and Redis",
    ] {
        assert!(words.contains(needle), "no {needle:?} in:\n{}", help.stdout);
    }
    assert!(!help.stdout.contains("--ttl"), "{}", help.stdout);
    let out = run(&["--url", "mem://", "prune", "--idle", "0s"]);
    assert_code(&out, 0);
    assert_eq!(out.stdout.trim(), "removed 0 locks, 0 owners");
    let dry = run(&["--url", "mem://", "--json", "prune", "--dry-run"]);
    assert_code(&dry, 0);
    assert_eq!(dry.stdout.trim(), r#"{"dry_run":true,"locks":0,"owners":0}"#);
    assert_clean_error(&run(&["prune", "--idle", "10"]), 2);
}

/// A refused connection says "connection refused", whichever backend.
#[test]
fn a_refused_connection_says_so() {
    let port = common::closed_port();
    let mut urls = Vec::new();
    if cfg!(feature = "redis") {
        urls.push(format!("redis://127.0.0.1:{port}"));
    }
    if cfg!(feature = "etcd") {
        urls.push(format!("etcd://127.0.0.1:{port}"));
    }
    for url in &urls {
        let out = run(&["--connect-timeout", "5s", "--url", url, "try", "x"]);
        assert_clean_error(&out, 3);
        assert!(out.stderr.contains("connection refused"), "{url}: {}", out.stderr);
    }
}

/// `init` reads the scheme as URLs are read, in any case: `MEM://` is the memory backend, and
/// `POSTGRES://…` gets its SQL. (Before, `init` compared the raw text: `init --sql` said that
/// `POSTGRES://` needs no set-up, and plain `init` printed `ready\tMEM`.)
#[test]
fn init_reads_the_scheme_in_any_case() {
    let ready = run(&["--url", "MEM://", "init"]);
    assert_code(&ready, 0);
    assert!(ready.stdout.starts_with("ready\tmem"), "{}", ready.stdout);
    let sql = run(&["--url", "POSTGRES://owner@db/app", "init", "--sql"]);
    assert_code(&sql, 0);
    assert!(sql.stdout.contains("CREATE TABLE IF NOT EXISTS"), "{}", sql.stdout);
}

/// A URL mistyped so that it is no URL (`redis:/` for `redis://`) never shows its password.
#[test]
fn a_mistyped_url_never_shows_its_password() {
    for url in ["redis:/admin:topsecret@h", "host=db user=app password=topsecret"] {
        let out = run(&["--url", url, "try", "x"]);
        assert_clean_error(&out, 2);
        assert!(!out.stderr.contains("topsecret"), "{}", out.stderr);
    }
}
