//! The environment a command gets (docs/environment.md). One test binary, one test: it
//! changes the process environment, which no other test may race with.
mod common;
use common::*;

use dsh_core::Request;

#[test]
fn scrub_forced_env_and_dsh_env_precedence() {
    // SAFETY (edition 2021: safe fn): this binary runs only this test.
    std::env::set_var("MY_API_KEY", "leak1");
    std::env::set_var("db_password", "leak2");
    std::env::set_var("GITHUB_TOKEN", "leak3");
    std::env::set_var("aws_secret_access", "leak4");
    std::env::set_var("DSH_STALE", "leak5");
    std::env::set_var("dsh_lower", "leak6");
    std::env::set_var("PLAIN_SETTING", "kept");
    std::env::set_var("TERM", "xterm-256color");

    let exec = executor();
    let mut req = Request::new("env");
    req.env = Some(map(&[
        ("GITHUB_TOKEN", "explicit"),
        ("PAGER", "less"),
        ("DSH_MANAGED", "from-env"),
        ("EXTRA", "1"),
    ]));
    req.dsh_env = Some(map(&[("DSH_MANAGED", "from-dsh-env"), ("DSH_SESSION", "s1")]));
    let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
    let env: std::collections::BTreeMap<&str, &str> =
        r.stdout.text.lines().filter_map(|l| l.split_once('=')).collect();

    for leaked in ["leak1", "leak2", "leak4", "leak5", "leak6"] {
        assert!(!r.stdout.text.contains(leaked), "{leaked} reached the command");
    }
    assert_eq!(env.get("PLAIN_SETTING"), Some(&"kept"));
    assert_eq!(env.get("NO_COLOR"), Some(&"1"));
    assert_eq!(env.get("TERM"), Some(&"dumb"), "forced over the parent's TERM");
    assert_eq!(env.get("GIT_PAGER"), Some(&"cat"));
    assert_eq!(
        env.get("PAGER"),
        Some(&"less"),
        "spec env wins over forced settings"
    );
    assert_eq!(
        env.get("GITHUB_TOKEN"),
        Some(&"explicit"),
        "an explicit entry survives the scrub"
    );
    assert_eq!(env.get("EXTRA"), Some(&"1"));
    assert_eq!(
        env.get("DSH_MANAGED"),
        Some(&"from-dsh-env"),
        "dsh_env wins over env"
    );
    assert_eq!(env.get("DSH_SESSION"), Some(&"s1"));

    // Without a spec env, the forced PAGER stands and nothing leaks.
    let r = run(&exec, "echo \"$PAGER|${MY_API_KEY-unset}|${DSH_STALE-unset}\"");
    assert_eq!(r.stdout.text, "cat|unset|unset\n");

    // A blocking run takes the environment when it is asked for, not when
    // it is waited for: a host (Python) lets other threads rewrite it in
    // between.
    let asked = exec
        .ask_blocking(&exec.resolve(Request::new("echo $PLAIN_SETTING")).unwrap(), None)
        .unwrap();
    std::env::set_var("PLAIN_SETTING", "changed while waiting");
    assert_eq!(asked.wait().unwrap().stdout.text, "kept\n");
}
