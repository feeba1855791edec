//! Hostile input: random requests, absurd numbers, unknown ids, double
//! kills, reads after dispose, and calls racing dispose from several
//! threads. Always a clear error or a defined result; never a panic or hang.
mod common;
use common::*;

use std::collections::BTreeMap;
use std::time::Duration;

use dsh_core::*;

/// xorshift64*: deterministic, dependency-free randomness for many cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn number(&mut self) -> Num {
        let choices = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1.0,
            0.0,
            -0.0,
            0.5,
            1.0,
            1e300,
            9_007_199_254_740_993.0,
            u64::MAX as f64,
            (1u64 << 31) as f64,
            self.below(1_000_000) as f64,
            self.below(1000) as f64 + 0.25,
        ];
        Num(choices[self.below(choices.len() as u64) as usize])
    }
    fn text(&mut self) -> String {
        let alphabet = [
            "a", "Z", "_", "=", "\0", " ", "é", "😀", "DSH_", "KEY", "/", "..", "\n", "$(", "'",
        ];
        let n = alphabet.len() as u64;
        match self.below(20) {
            0 => String::new(),
            // Huge: a repeated piece (fast to build), sometimes with a NUL.
            1 => {
                let (piece, tail) = (alphabet[self.below(n) as usize], alphabet[self.below(n) as usize]);
                piece.repeat(10_000 + self.below(100_000) as usize) + tail
            }
            _ => {
                let len = self.below(12) as usize;
                (0..len).map(|_| alphabet[self.below(n) as usize]).collect()
            }
        }
    }
    /// A path: text, sometimes with bytes that are not UTF-8.
    fn path(&mut self) -> std::path::PathBuf {
        use std::os::unix::ffi::OsStringExt;
        let mut bytes = self.text().into_bytes();
        if self.below(4) == 0 {
            bytes.extend_from_slice(b"-\xff\xfe");
        }
        std::ffi::OsString::from_vec(bytes).into()
    }
    fn map(&mut self) -> Option<BTreeMap<String, String>> {
        (self.below(3) != 0).then(|| (0..self.below(4)).map(|_| (self.text(), self.text())).collect())
    }
}

#[test]
fn random_requests_resolve_or_name_the_bad_field() {
    let exec = executor_with(|c| c.max_timeout_ms = n(60_000));
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let req = Request {
            command: rng.text(),
            workdir: (rng.below(2) == 0).then(|| rng.path()),
            timeout_ms: (rng.below(2) == 0).then(|| rng.number()),
            stdout_max_bytes: (rng.below(2) == 0).then(|| rng.number()),
            stdin: (rng.below(2) == 0).then(|| rng.text().into_bytes()),
            stdin_pipe: rng.below(4) == 0,
            on_expiry: [None, Some(OnExpiry::Kill), Some(OnExpiry::Background)][rng.below(3) as usize],
            env: rng.map(),
            dsh_env: rng.map(),
            owner: (rng.below(2) == 0).then(|| rng.text()),
            sandbox_policy: None,
            limits: (rng.below(4) == 0).then(|| LimitsInput {
                memory_bytes: (rng.below(2) == 0).then(|| rng.number()),
                processes: (rng.below(2) == 0).then(|| rng.number()),
                ..Default::default()
            }),
        };
        match exec.resolve(req) {
            Ok(spec) => {
                ok += 1;
                assert!(spec.timeout_ms >= 1 && spec.timeout_ms <= 60_000);
                assert!(spec.stdout_max_bytes >= 1);
                assert!(spec.workdir.is_absolute());
                assert!(!std::os::unix::ffi::OsStrExt::as_bytes(spec.workdir.as_os_str()).contains(&0));
                assert!(!spec.command.contains('\0'));
                spec.check(&exec.config())
                    .expect("a resolved spec passes its own check");
            }
            Err(DshError::InvalidArgument { field, problem }) => {
                refused += 1;
                assert_eq!(field.scope, Scope::Request);
                assert!(!problem.is_empty());
            }
            Err(other) => panic!("resolve failed with {other:?}"),
        }
    }
    assert!(
        ok > 1_000 && refused > 1_000,
        "both outcomes exercised: {ok} ok, {refused} refused"
    );
}

#[test]
fn random_configs_build_or_name_the_bad_field() {
    let mut rng = Rng(42);
    // A given spill_dir is made when missing: keep what the random ones make
    // inside one scratch directory, removed at the end.
    let scratch = std::env::temp_dir().join(format!("dsh-hostile-{}", std::process::id()));
    for _ in 0..5_000 {
        let input = ConfigInput {
            timeout_ms: (rng.below(2) == 0).then(|| rng.number()),
            max_timeout_ms: (rng.below(2) == 0).then(|| rng.number()),
            max_output_bytes: (rng.below(2) == 0).then(|| rng.number()),
            max_spill_bytes: (rng.below(2) == 0).then(|| rng.number()),
            grace_ms: (rng.below(2) == 0).then(|| rng.number()),
            cwd: (rng.below(4) == 0).then(|| rng.text()),
            spill_dir: (rng.below(4) == 0)
                .then(|| format!("{}/{}", scratch.display(), rng.text().replace('/', "_"))),
            retain_settled: (rng.below(2) == 0).then(|| rng.number()),
            sandbox_mode: None,
            limits: None,
        };
        match Config::new(input) {
            Ok(c) => {
                assert!(c.timeout_ms <= c.max_timeout_ms && c.grace_ms <= MAX_GRACE_MS);
                assert!(c.max_output_bytes >= 1 && c.max_spill_bytes >= 1);
            }
            Err(DshError::InvalidArgument { field, .. }) => assert_eq!(field.scope, Scope::Config),
            Err(other) => panic!("{other:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn unknown_ids_double_kills_and_reads_after_dispose_are_defined() {
    let exec = executor_with(|c| c.grace_ms = n(200));
    for id in [
        "",
        "bash-0",
        "bash-1",
        "bash-18446744073709551616",
        "../../etc",
        "bash-1\0",
    ] {
        assert_eq!(exec.kill(id).unwrap_err(), DshError::NotFound(id.into()));
        assert!(exec.get(id).is_none());
    }
    let p = exec
        .start(&spec(&exec, "echo last words; exec sleep 30"))
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || p.read_output().delta
        == "last words\n"));
    assert!(p.kill());
    assert!(!p.kill() && !exec.kill(p.id()).unwrap());
    exec.dispose_blocking().unwrap();
    assert!(!p.kill());
    assert_eq!(
        p.read_output().delta,
        "",
        "reads after dispose work and stay consuming"
    );
    assert_eq!(exec.read_output(p.id()).unwrap().delta, "");
    assert!(
        exec.list()
            .iter()
            .all(|p| p.wait_timeout(Some(Duration::ZERO)).unwrap()),
        "all settled after dispose"
    );
}

#[test]
fn calls_racing_dispose_from_several_threads_get_results_or_disposed() {
    for round in 0..5 {
        let exec = executor_with(|c| c.grace_ms = n(100));
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(7));
        let workers: Vec<_> = (0..6)
            .map(|w| {
                let exec = exec.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    for i in 0..40 {
                        let s = match exec.resolve(Request::new(if i % 2 == 0 {
                            "sleep 0.05"
                        } else {
                            "echo x"
                        })) {
                            Ok(s) => s,
                            Err(e) => panic!("resolve never depends on disposal: {e}"),
                        };
                        match (w + i) % 4 {
                            0 => match exec.run_blocking(&s, None) {
                                Ok(_) | Err(DshError::Disposed) => {}
                                Err(e) => panic!("round {round}: run: {e}"),
                            },
                            1 => match exec.start(&s) {
                                Ok(p) => assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap()),
                                Err(DshError::Disposed) => {}
                                Err(e) => panic!("round {round}: start: {e}"),
                            },
                            2 => {
                                for p in exec.list() {
                                    p.read_output();
                                    p.kill();
                                }
                            }
                            _ => exec.dispose_blocking().unwrap(),
                        }
                    }
                })
            })
            .collect();
        barrier.wait();
        // Not waiting for anything: staggers dispose against the workers'
        // progress (at once in round 0, later each round) to vary the race.
        std::thread::sleep(Duration::from_millis(20 * round));
        exec.dispose_blocking().unwrap();
        for w in workers {
            w.join().unwrap();
        }
        assert!(
            exec.list().iter().all(|p| p.is_settled()),
            "dispose returned with a process still running"
        );
    }
}

/// Descriptor exhaustion (RLIMIT_NOFILE 64, 100 runs at once, from as many
/// threads): every run that cannot start is the documented spawn error
/// with its errno (EMFILE), never an internal error, and nothing ran for
/// it. Run in a child host with a timeout: the limit is process-wide, and
/// a hang fails instead of hanging the suite.
#[test]
fn descriptor_exhaustion_is_a_spawn_error_with_its_errno() {
    if std::env::var_os("DSH_EMFILE_HOST").is_some() {
        let exec = executor_with(|c| c.grace_ms = n(200));
        run(&exec, "true");
        // SAFETY: plain rlimit calls on a zeroed, then filled, struct.
        unsafe {
            let mut lim: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            lim.rlim_cur = 64;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
        let outcomes: Vec<_> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..100)
                .map(|i| {
                    let exec = &exec;
                    s.spawn(move || {
                        let mut req = Request::new("echo ok");
                        if i % 2 == 0 {
                            req.stdin = Some(b"x".to_vec());
                        }
                        exec.run_blocking(&exec.resolve(req).unwrap(), None)
                    })
                })
                .collect();
            runs.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let (mut ran, mut refused) = (0, 0);
        for outcome in outcomes {
            match outcome {
                Ok(r) => {
                    ran += 1;
                    assert_eq!((r.exit_code, r.stdout.text.as_str()), (Some(0), "ok\n"));
                }
                Err(DshError::Spawn { errno, message, .. }) => {
                    refused += 1;
                    assert!(
                        errno == libc::EMFILE || errno == libc::ENFILE,
                        "{errno}: {message}"
                    );
                    assert!(
                        message.starts_with("EMFILE") || message.starts_with("ENFILE"),
                        "{message}"
                    );
                }
                Err(e) => panic!("not a spawn error: {e:?}"),
            }
        }
        println!("OUTCOMES ran {ran} refused {refused}");
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "descriptor_exhaustion_is_a_spawn_error_with_its_errno",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DSH_EMFILE_HOST", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ended = eventually(Duration::from_secs(120), || child.try_wait().unwrap().is_some());
    if !ended {
        child.kill().unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    println!("{out}");
    assert!(ended, "the host hung: {out}");
    assert!(output.status.success(), "{:?}: {out}", output.status);
    // The limit must have bitten, or the test proved nothing.
    let refused: usize = out
        .split("refused ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no outcome line: {out}"));
    assert!(refused >= 1, "no run met the descriptor limit: {out}");
}
