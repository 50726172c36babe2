//! The command documents itself: `--version` names the version and the backends compiled in,
//! `completions SHELL` prints a completion script and `man` a manual page, both generated from the
//! clap definition, with no server and no lock directory.

mod common;

use common::{assert_clean_error, assert_code, run};

#[test]
fn version_names_the_version_and_the_backends() {
    let out = run(&["--version"]);
    assert_code(&out, 0);
    let line = out.stdout.trim_end();
    assert!(
        line.starts_with(&format!("locksmith {} (backends: mem", env!("CARGO_PKG_VERSION"))),
        "{line:?}"
    );
    for (enabled, name) in [
        (cfg!(feature = "etcd"), "etcd"),
        (cfg!(feature = "zk"), "zk"),
        (cfg!(feature = "redis"), "redis"),
        (cfg!(feature = "file"), "file"),
        (cfg!(feature = "postgres"), "postgres"),
    ] {
        assert_eq!(line.contains(&format!(", {name}")), enabled, "{name} in {line:?}");
    }
    assert_eq!(line.ends_with("; tls)"), cfg!(feature = "tls"), "{line:?}");
    assert_eq!(out.stdout.lines().count(), 1, "{:?}", out.stdout);
}

#[test]
fn completions_for_each_shell_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = run(&["completions", shell]);
        assert_code(&out, 0);
        assert!(out.stderr.is_empty(), "{shell}: {:?}", out.stderr);
        assert!(out.stdout.contains("locksmith"), "{shell}:\n{}", out.stdout);
        for subcommand in ["run", "inspect", "completions", "man"] {
            assert!(
                out.stdout.contains(subcommand),
                "the {shell} script does not name {subcommand:?}:\n{}",
                out.stdout
            );
        }
        // Options too, and not the hidden --ttl that `inspect` refuses.
        assert!(out.stdout.contains("timeout"), "{shell}:\n{}", out.stdout);
    }
    assert_clean_error(&run(&["completions", "tcsh"]), 2);
    assert_clean_error(&run(&["completions"]), 2);
}

#[test]
fn man_prints_a_roff_page() {
    let out = run(&["man"]);
    assert_code(&out, 0);
    assert!(out.stderr.is_empty(), "{:?}", out.stderr);
    // The header: `.TH` first, after nothing but comments and the string definition clap_mangen
    // opens with (`.ie`/`.el`).
    let th = out
        .stdout
        .lines()
        .find(|l| !l.starts_with(".\\\"") && !l.starts_with(".ie ") && !l.starts_with(".el "))
        .unwrap_or_default();
    assert!(th.starts_with(".TH locksmith 1 "), "header {th:?} of:\n{}", out.stdout);
    for needle in [
        ".SH NAME",
        ".SH SYNOPSIS",
        "inspect",
        "Exit codes",
        env!("CARGO_PKG_VERSION"),
    ] {
        assert!(
            out.stdout.contains(needle),
            "the page lacks {needle:?}:\n{}",
            out.stdout
        );
    }
}

#[test]
fn completions_and_man_need_no_backend() {
    // An unreachable URL (and a --url to a backend this build may lack) changes nothing.
    for args in [
        &["--url", "redis://127.0.0.1:1", "man"][..],
        &["--url", "etcd://127.0.0.1:1", "completions", "bash"],
    ] {
        assert_code(&run(args), 0);
    }
}
