//! A host that sshd started (`ssh host dsh serve --stdio`, `ssh host
//! python agent.py`): its environment has SSH_CLIENT and, often, no
//! SHLVL. Debian's bash then takes every `bash -c` for the shell sshd
//! started and reads ~/.bashrc first: output and side effects of the
//! user's shell set-up in every command, and its cost on every run.
mod common;
use common::*;

use dsh_core::{Request, SpawnRequest, TerminalRequest};

const NAME: &str = "commands_of_a_host_sshd_started_do_not_read_bashrc";

#[test]
fn commands_of_a_host_sshd_started_do_not_read_bashrc() {
    if !in_own_host(NAME) {
        return;
    }
    let home = std::env::temp_dir().join(format!("dsh-ssh-host-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let marker = home.join("sourced");
    std::fs::write(
        home.join(".bashrc"),
        format!("echo from-bashrc; touch {}\n", marker.display()),
    )
    .unwrap();
    // SAFETY (edition 2021: safe fn): this process is this test's own host,
    // and no thread reads the environment yet.
    std::env::remove_var("SHLVL");
    std::env::set_var("SSH_CLIENT", "192.0.2.1 50000 22");
    std::env::set_var("HOME", &home);

    let exec = executor();
    let r = exec
        .run_blocking(&exec.resolve(Request::new("echo ran")).unwrap(), None)
        .unwrap();
    assert_eq!(r.stdout.text, "ran\n");
    assert!(!marker.exists(), "a command read ~/.bashrc");

    let spawned = exec
        .spawn(
            &exec
                .resolve_spawn(SpawnRequest {
                    argv: vec!["bash".into(), "-c".into(), "true".into()],
                    ..SpawnRequest::default()
                })
                .unwrap(),
        )
        .unwrap();
    assert!(spawned
        .process
        .wait_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap());
    assert!(!marker.exists(), "a spawned bash read ~/.bashrc");

    let term = exec
        .spawn_terminal(&exec.resolve_terminal(TerminalRequest::command("true")).unwrap())
        .unwrap();
    assert!(term
        .wait_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap());
    assert!(!marker.exists(), "a terminal's bash read ~/.bashrc");

    // A caller's own SHLVL is the caller's.
    let mut req = Request::new("echo $SHLVL");
    req.env = Some([("SHLVL".to_owned(), "4".to_owned())].into());
    let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
    assert_eq!(r.stdout.text, "5\n");
    exec.dispose_blocking().unwrap();
    let _ = std::fs::remove_dir_all(&home);
}
