//! The command line against the secured servers of `scripts/backends` (TLS + credentials): the
//! password from `--password-file` or `LOCKSMITH_PASSWORD` instead of the URL, the TLS files from
//! `--ca`/`--cert`/`--key` instead of URL options, a wrong password refused with exit 5, and no
//! password in any message, at any verbosity; TLS that cannot be established (a CA that does not
//! vouch for the server, a server without TLS) refused with exit 5 at once, never retried.
#![cfg(feature = "tls")]

mod common;

use common::{assert_code, env_url, run, token, unique_name};

const PASSWORD: &str = "lock-pass-123";

/// The secure URLs of the backends this build has.
fn secure_urls() -> Vec<String> {
    let mut urls = Vec::new();
    if cfg!(feature = "etcd") {
        urls.push(env_url("LOCKSMITH_TEST_ETCD_SECURE"));
    }
    if cfg!(feature = "zk") {
        urls.push(env_url("LOCKSMITH_TEST_ZK_SECURE"));
    }
    if cfg!(feature = "redis") {
        urls.push(env_url("LOCKSMITH_TEST_REDIS_SECURE"));
    }
    urls
}

/// `url` without its password and without its query (the TLS options).
fn bare(url: &str) -> String {
    url.replacen(&format!(":{PASSWORD}@"), "@", 1)
        .split('?')
        .next()
        .unwrap()
        .to_owned()
}

fn tls_args() -> Vec<String> {
    let dir = env_url("LOCKSMITH_TEST_TLS_DIR");
    vec![
        "--ca".into(),
        format!("{dir}/ca.pem"),
        "--cert".into(),
        format!("{dir}/client.pem"),
        "--key".into(),
        format!("{dir}/client.key"),
    ]
}

#[test]
fn secrets_from_a_file_or_the_environment_and_tls_from_flags() {
    let file = std::env::temp_dir().join(format!("locksmith-cli-pw-{}", std::process::id()));
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let file = file.display().to_string();
    for url in secure_urls() {
        let bare = bare(&url);
        let mut args: Vec<String> = vec!["--url".into(), bare.clone(), "--password-file".into(), file.clone()];
        args.extend(tls_args());
        args.extend(["try".into(), unique_name("secure")]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&refs);
        assert_code(&out, 0);
        token(&out.stdout);

        // LOCKSMITH_PASSWORD, with the TLS files in the URL.
        let without_password = url.replacen(&format!(":{PASSWORD}@"), "@", 1);
        let mut cmd = common::locksmith(&["--url", &without_password, "try", &unique_name("secure-env")]);
        cmd.env("LOCKSMITH_PASSWORD", PASSWORD);
        let out = common::Proc::spawn(cmd).finish();
        assert_code(&out, 0);
    }
    std::fs::remove_file(&file).ok();
}

#[test]
fn a_wrong_password_exits_5_and_no_message_shows_a_password() {
    for url in secure_urls() {
        let wrong = url.replacen(PASSWORD, "hunter2-wrong", 1);
        let is_zk = url.starts_with("zks://");
        for verbose in ["-q", "-v", "-vv"] {
            let out = run(&[
                verbose,
                "--connect-timeout",
                "5s",
                "--url",
                &wrong,
                "try",
                &unique_name("wrong"),
            ]);
            // ZooKeeper's digest scheme takes any password: a wrong one is another identity,
            // which the ACL of a lock node refuses only once such a node exists; a fresh lock is
            // free to it. etcd and Redis refuse the credentials themselves.
            if !is_zk {
                assert_code(&out, 5);
            }
            for secret in ["hunter2-wrong", PASSWORD] {
                assert!(
                    !out.stderr.contains(secret),
                    "{verbose}: {secret} shows: {}",
                    out.stderr
                );
                assert!(
                    !out.stdout.contains(secret),
                    "{verbose}: {secret} shows: {}",
                    out.stdout
                );
            }
        }
    }
}

/// A CA that does not vouch for the server's certificate: the one error line says so without
/// `-v` (it read "backend unavailable: connecting on redis at …", the why only with `-v`), and
/// it is exit 5, refused for good, as a wrong password is: no retry changes it (it was exit 3,
/// which `run` retried for ever). ZooKeeper's client keeps the why to itself; locksmith's own
/// handshake names it.
#[test]
fn a_server_certificate_the_ca_does_not_vouch_for_is_named() {
    let dir = env_url("LOCKSMITH_TEST_TLS_DIR");
    let mut urls: Vec<String> = secure_urls();
    if cfg!(feature = "postgres") {
        urls.push(env_url("LOCKSMITH_TEST_POSTGRES_SECURE"));
    }
    for url in urls {
        // The client's own certificate as the only CA: it vouches for nobody.
        let wrong = url.replace(&format!("ca={dir}/ca.pem"), &format!("ca={dir}/client.pem"));
        assert_ne!(wrong, url, "no ca= in {url}");
        let out = run(&["--connect-timeout", "5s", "--url", &wrong, "try", &unique_name("ca")]);
        assert_code(&out, 5);
        assert!(out.stderr.contains("UnknownIssuer"), "{}", out.stderr);
        assert!(out.stderr.contains("is not trusted by ca="), "{}", out.stderr);
    }
}

/// A TLS URL at a server without TLS (`rediss://` at a plain Redis, `etcds://` at a plain etcd,
/// `zks://` at a plain ZooKeeper, `sslmode=require` at a plain PostgreSQL), also with several
/// servers in the URL: `run --timeout 30s` exits 5 within 10 s, with one line that names the cause and the fix. It was exit 3 after the
/// whole timeout: `run` took it for an outage and retried ("retrying without time limit" without
/// `--timeout`: a cron job hung for ever).
#[test]
fn a_tls_url_at_a_plain_server_exits_5_at_once() {
    let dir = env_url("LOCKSMITH_TEST_TLS_DIR");
    let ca = format!("ca={dir}/ca.pem");
    let mut urls = Vec::new();
    if cfg!(feature = "etcd") {
        urls.push(format!(
            "{}?{ca}",
            env_url("LOCKSMITH_TEST_ETCD").replacen("etcd://", "etcds://", 1)
        ));
    }
    if cfg!(feature = "zk") {
        urls.push(format!(
            "{}?{ca}",
            env_url("LOCKSMITH_TEST_ZK").replacen("zk://", "zks://", 1)
        ));
    }
    if cfg!(feature = "redis") {
        urls.push(format!(
            "{}?{ca}",
            env_url("LOCKSMITH_TEST_REDIS").replacen("redis://", "rediss://", 1)
        ));
    }
    if cfg!(feature = "postgres") {
        urls.push(format!("{}?sslmode=require", env_url("LOCKSMITH_TEST_POSTGRES")));
    }
    // The same with several servers in the URL (each refuses TLS alike: none is tried for ever),
    // where `scripts/backends up all` started them.
    let several = |var: &str| std::env::var(var).ok().filter(|u| u.contains(','));
    let tls_of_several = [
        ("etcd", "LOCKSMITH_TEST_ETCD_CLUSTER", "etcd://", "etcds://"),
        ("zk", "LOCKSMITH_TEST_ZK_ENSEMBLE", "zk://", "zks://"),
        ("redis", "LOCKSMITH_TEST_REDIS_QUORUM", "redis://", "rediss://"),
    ];
    for (feature, var, plain, tls) in tls_of_several {
        let compiled = match feature {
            "etcd" => cfg!(feature = "etcd"),
            "zk" => cfg!(feature = "zk"),
            _ => cfg!(feature = "redis"),
        };
        if let Some(url) = several(var).filter(|_| compiled) {
            urls.push(format!("{}?{ca}", url.replacen(plain, tls, 1)));
        }
    }
    if let Some(url) = several("LOCKSMITH_TEST_POSTGRES_HA").filter(|_| cfg!(feature = "postgres")) {
        urls.push(format!("{url}?sslmode=require"));
    }
    for url in urls {
        let start = std::time::Instant::now();
        let out = run(&[
            "--url",
            &url,
            "run",
            "--timeout",
            "30s",
            &unique_name("notls"),
            "--",
            "true",
        ]);
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{url}: took {:?}",
            start.elapsed()
        );
        assert_code(&out, 5);
        assert!(out.stderr.contains("does not speak TLS"), "{url}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{url}: {}", out.stderr);
    }
}
