//! The tree's pure parts: ordering, tag matching (see `tree.rs`).

use super::*;

#[test]
fn a_parent_is_signalled_before_its_descendants() {
    // (pid, parent): 30 under 20 under 10; 40 under 30; 50 alone.
    let targets = vec![
        (40, Some(30)),
        (30, Some(20)),
        (50, Some(1)),
        (20, Some(10)),
        (10, Some(1)),
    ];
    let order: Vec<i32> = ancestors_first(targets, |t| t.0, |t| t.1)
        .iter()
        .map(|t| t.0)
        .collect();
    let at = |p: i32| order.iter().position(|&x| x == p).unwrap();
    assert!(at(10) < at(20) && at(20) < at(30) && at(30) < at(40), "{order:?}");
    // A cycle (a recycled pid in a racy snapshot) still ends.
    let cycle = vec![(1, Some(2)), (2, Some(1))];
    assert_eq!(ancestors_first(cycle, |t| t.0, |t| t.1).len(), 2);
}

#[test]
fn tag_is_found_only_as_a_whole_variable() {
    assert_eq!(tag_in(b"A=1\0DSH_EXEC_TAG=ab.3\0B=2\0"), Some(&b"ab.3"[..]));
    assert_eq!(tag_in(b"XDSH_EXEC_TAG=ab\0"), None);
    assert_eq!(tag_in(b"DSH_EXEC_TAGS=ab\0"), None);
    assert_eq!(tag_in(b""), None);
    assert_eq!(tag_in(b"DSH_EXEC_TAG="), Some(&b""[..]));
}

#[test]
fn exact_and_prefix_matches() {
    let one = TagMatch::command("ab.3");
    assert!(one.matches(b"ab.3"));
    assert!(
        !one.matches(b"ab.30"),
        "a command's tag is not a prefix of another's"
    );
    let all = TagMatch::executor("ab.");
    assert!(all.matches(b"ab.3") && all.matches(b"ab.30"));
    assert!(!all.matches(b"abc.3"));
}

#[test]
fn parent_pid_survives_parentheses_in_the_name_and_zombies_have_none() {
    assert_eq!(parent_in_stat(b"42 (a) b) S 7 42 42 0"), Some(7));
    assert_eq!(parent_in_stat(b"42 (x) Z 7 42 42 0"), None);
    assert_eq!(parent_in_stat(b"garbage"), None);
}

#[test]
fn process_group_is_read_after_the_name_and_from_zombies_too() {
    assert_eq!(group_in_stat(b"42 (a) b) S 7 40 40 0"), Some(40));
    assert_eq!(group_in_stat(b"42 (x) Z 7 42 42 0"), Some(42));
    assert_eq!(group_in_stat(b"42 (x) S"), None);
}

#[test]
fn a_term_sweep_spares_only_groups_whose_signal_reaches_them() {
    let leaders = HashSet::from([100]);
    let plain = TagMatch::command("x.1");
    assert!(!plain.spares(Some(100), &leaders));
    let one = TagMatch::command("x.1").sparing(Spare::Group(100));
    assert!(one.spares(Some(100), &leaders));
    assert!(
        !one.spares(Some(200), &leaders),
        "a member that left the group is swept"
    );
    assert!(!one.spares(None, &leaders), "an unknown group is swept");
    let all = TagMatch::executor("x.").sparing(Spare::CommandGroups);
    assert!(all.spares(Some(100), &leaders));
    assert!(
        !all.spares(Some(300), &leaders),
        "a group whose leader is gone is swept"
    );
}

fn untagged(pairs: &[(libc::pid_t, libc::pid_t, libc::pid_t)]) -> HashMap<libc::pid_t, Untagged> {
    pairs
        .iter()
        .map(|&(pid, parent, session)| (pid, Untagged { parent, session }))
        .collect()
}

#[test]
fn descendants_are_selected_through_untagged_parents() {
    // 10 tagged → 11 (untagged child) → 12; 20 tagged with another
    // command's tag; 30 unrelated; 13 child of 12.
    let tags: HashMap<_, _> = [(10, b"x.1".to_vec()), (20, b"x.2".to_vec())].into();
    let others = untagged(&[(11, 10, 10), (12, 11, 10), (13, 12, 10), (30, 1, 1), (21, 20, 20)]);
    let one = TagMatch::command("x.1");
    let all = TagMatch::executor("x.");
    let other = TagMatch::command("y.1");
    let sel = select(&[&one, &all, &other], &tags, &others);
    assert_eq!(sel[0], HashSet::from([10, 11, 12, 13]));
    assert_eq!(sel[1], HashSet::from([10, 11, 12, 13, 20, 21]));
    assert!(sel[2].is_empty());
}

#[test]
fn an_orphan_without_the_tag_is_the_commands_while_in_its_session() {
    // Supervisor 5 leads nothing; command x.1's leader 10 (tagged),
    // x.2's leader 20. 11: `env -i` child of 10, orphaned (now the
    // supervisor's child) but still in session 10. 12: its child. 13:
    // `env -i` + setsid + orphaned: session 13, parent 5 — x.1 cannot
    // claim it, nobody else either. 99 is unrelated (parent 1).
    let tags: HashMap<_, _> = [(10, b"x.1".to_vec()), (20, b"x.2".to_vec())].into();
    let others = untagged(&[(11, 5, 10), (12, 11, 10), (13, 5, 13), (99, 1, 99)]);
    let one = TagMatch::command("x.1").in_session(10);
    let two = TagMatch::command("x.2").in_session(20);
    let sel = select(&[&one, &two], &tags, &others);
    assert_eq!(sel[0], HashSet::from([10, 11, 12]));
    assert_eq!(sel[1], HashSet::from([20]));
    // The executor's sweep takes the supervisor's whole subtree (not
    // the supervisor itself), 13 included, and nothing else.
    let all = TagMatch::executor("x.").under(Some(5));
    let sel = select(&[&all], &tags, &others);
    assert_eq!(sel[0], HashSet::from([10, 11, 12, 13, 20]));
    // A command's supervisor is not a root of its sweep.
    let one_under = TagMatch::command("x.1").in_session(10).under(Some(5));
    assert_eq!(
        select(&[&one_under], &tags, &others)[0],
        HashSet::from([10, 11, 12])
    );
}

#[test]
fn the_session_is_read_after_the_name() {
    assert_eq!(session_in_stat(b"42 (a) b) S 7 40 39 0"), Some(39));
    assert_eq!(session_in_stat(b"42 (x) S 7 40"), None);
}

#[test]
fn an_empty_environment_is_read_again_only_while_it_is_coming() {
    // A live process whose environment is empty for good (as the
    // supervisor's is, and `env -i`'s children): not taken for one in
    // execve, or every scan would wait for it, 10 ms each time.
    let mut child = std::process::Command::new("/bin/sleep")
        .arg("30")
        .env_clear()
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut environ = Vec::new();
    // Up when its environment is readable (empty) and its exec is done.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !(read_file(&format!("{pid}/cmdline"), &mut environ) && environ.starts_with(b"/bin/sleep")) {
        assert!(std::time::Instant::now() < deadline, "sleep never ran");
        std::thread::yield_now();
    }
    assert!(read_file(&format!("{pid}/environ"), &mut environ));
    assert!(environ.is_empty());
    // Asleep (sleep(1) waits in the kernel), so not in an execve.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while crate::sys::process_state(pid) != Some(b'S') {
        assert!(std::time::Instant::now() < deadline, "sleep never slept");
        std::thread::yield_now();
    }
    assert_eq!(
        environment_now(pid),
        Environment::Empty,
        "a live process with an empty environment"
    );
    // Nor a kernel thread (where one can be seen: not in a pid namespace
    // of our own), nor a zombie.
    let kernel_thread = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .find(|&p| environment_bounds(p).is_some_and(|b| b.kernel_thread));
    match kernel_thread {
        Some(k) => assert_eq!(environment_now(k), Environment::NoProcess),
        None => {
            eprintln!("no kernel thread visible here (a pid namespace of our own): that case is not checked")
        }
    }
    child.kill().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while crate::sys::process_state(pid) != Some(b'Z') {
        assert!(std::time::Instant::now() < deadline, "never a zombie");
        std::thread::yield_now();
    }
    assert_eq!(environment_now(pid), Environment::NoProcess, "a zombie");
    child.wait().unwrap();
    // A process with an environment: read again at once. The bounds are
    // the environment's own: as long as what /proc/<pid>/environ reads.
    let me = crate::host::forked::current_pid();
    assert_eq!(environment_now(me), Environment::There);
    let b = environment_bounds(me).unwrap();
    assert!(read_file(&format!("{me}/environ"), &mut environ));
    assert_eq!(
        (b.end - b.start) as usize,
        environ.len(),
        "env_start and env_end are not the environment's"
    );
}

#[test]
fn a_zombie_says_whether_sigkill_ended_it() {
    // An end by SIGKILL hides no child (the kernel ends a fork under way);
    // any other end may, and calls for another scan.
    let zombie_of = |mut child: std::process::Child, kill: bool| {
        let pid = child.id() as libc::pid_t;
        if kill {
            child.kill().unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while crate::sys::process_state(pid) != Some(b'Z') {
            assert!(std::time::Instant::now() < deadline, "never a zombie");
            std::thread::yield_now();
        }
        let end = end_in_stat(&crate::sys::proc::read(&format!("{pid}/stat")).unwrap());
        // A scan's reading of it says the same, with the parent that has to
        // reap it (us) and its session (ours), so it can be tied to a request.
        let me = crate::host::forked::current_pid();
        let session = session_in_stat(&crate::sys::proc::read(&format!("{me}/stat")).unwrap()).unwrap();
        match (untagged_of(pid, &mut Vec::new()), end) {
            (StatSays::Killed, Some(End::Killed)) => {}
            (StatSays::Ended(Some(u)), Some(End::Other)) => {
                assert_eq!(
                    u,
                    Untagged { parent: me, session },
                    "a zombie's parent and session"
                )
            }
            (_, end) => panic!("a scan reads the zombie otherwise than {end:?}"),
        }
        child.wait().unwrap();
        end
    };
    let sleeper = || std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let running = sleeper();
    let stat = crate::sys::proc::read(&format!("{}/stat", running.id())).unwrap();
    assert_eq!(end_in_stat(&stat), None, "a live process has not ended");
    assert!(matches!(
        untagged_of(running.id() as libc::pid_t, &mut Vec::new()),
        StatSays::Live(_)
    ));
    assert_eq!(zombie_of(running, true), Some(End::Killed));
    let exits = std::process::Command::new("true").spawn().unwrap();
    assert_eq!(zombie_of(exits, false), Some(End::Other));
    let terminated = std::process::Command::new("sh")
        .args(["-c", "kill -TERM $$"])
        .spawn()
        .unwrap();
    assert_eq!(zombie_of(terminated, false), Some(End::Other));
}
