//! Terminal sessions (docs/terminals.md) with real programs: a Python REPL,
//! prompts answered through `write`, Ctrl-C and Ctrl-Z, window sizes, a
//! full-screen program, job control; the kernel's input-waiting fact; and
//! that nothing of a session survives `terminate()` or dispose. Every wait
//! is on an event (output, a kernel fact), with generous bounds.

mod common;

use std::time::{Duration, Instant};

use common::{alive, executor, executor_with, map, n, pid_is_free};
use dsh_core::{DshError, Executor, Foreground, Terminal, TerminalRequest, TerminalSignal, TerminalSpec};

const LIMIT: Duration = Duration::from_secs(30);

/// A session and everything it printed so far.
struct Session {
    term: Terminal,
    seen: String,
    /// Where the next `expect` starts looking.
    mark: usize,
}

impl Session {
    fn new(exec: &Executor, request: TerminalRequest) -> Session {
        let spec = exec.resolve_terminal(request).unwrap();
        Session {
            term: exec.spawn_terminal(&spec).unwrap(),
            seen: String::new(),
            mark: 0,
        }
    }

    /// An interactive bash without startup files, history or a fancy
    /// prompt.
    fn bash(exec: &Executor) -> Session {
        let mut r = TerminalRequest::argv(["bash", "--norc", "--noprofile", "-i"]);
        r.env = Some(map(&[("PS1", "$ "), ("HISTFILE", "")]));
        let mut s = Session::new(exec, r);
        s.ready();
        s
    }

    /// Reads until `pattern` appears after the mark; moves the mark past it.
    fn expect(&mut self, pattern: &str) -> String {
        let end = Instant::now() + LIMIT;
        loop {
            if let Some(at) = self.seen[self.mark..].find(pattern) {
                let from = self.mark;
                self.mark += at + pattern.len();
                return self.seen[from..self.mark].to_owned();
            }
            let left = end.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{pattern:?} did not appear within {LIMIT:?}; output so far: {:?}",
                &self.seen
            );
            let read = self
                .term
                .read_output_timeout(Some(left.min(Duration::from_millis(500))))
                .unwrap();
            self.seen.push_str(&read.text);
            if read.ended && !self.seen[self.mark..].contains(pattern) {
                panic!("output ended without {pattern:?}: {:?}", &self.seen);
            }
        }
    }

    /// Types `line` into the shell, then a marker command, and reads until
    /// the marker's output (`@@42`, which the echoed input never shows);
    /// returns what came meanwhile.
    fn run(&mut self, line: &str) -> String {
        self.write(&format!("{line}\necho @@$((40+2))\n"));
        self.expect("@@42")
    }

    fn write(&self, text: &str) {
        self.term.write_blocking(text.as_bytes()).unwrap();
    }

    fn foreground(&self) -> Foreground {
        self.term.inspect_foreground().expect("a foreground group")
    }

    /// Waits until the kernel shows the foreground group waiting for input,
    /// and returns it.
    fn waiting(&self) -> Foreground {
        let end = Instant::now() + LIMIT;
        loop {
            let fg = self.term.inspect_foreground();
            if let Some(fg) = fg.filter(|f| f.input_waiting) {
                return fg;
            }
            assert!(Instant::now() < end, "never waiting for input; last: {fg:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The shell is back at its prompt: its own group is in the
    /// foreground, waiting for input.
    fn ready(&mut self) {
        let end = Instant::now() + LIMIT;
        loop {
            let fg = self.waiting();
            if fg.process_group_id == self.term.pid() {
                return;
            }
            assert!(
                Instant::now() < end,
                "the shell never got the terminal back: {fg:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until a group other than the shell's is in the foreground.
    fn job_in_foreground(&self) -> i32 {
        let end = Instant::now() + LIMIT;
        loop {
            if let Some(fg) = self.term.inspect_foreground() {
                if fg.process_group_id != self.term.pid() {
                    return fg.process_group_id;
                }
            }
            assert!(Instant::now() < end, "no job took the foreground");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn exit_code(&self) -> Option<i32> {
        assert!(
            self.term.wait_timeout(Some(LIMIT)).unwrap(),
            "the program did not exit"
        );
        self.term.exit_code()
    }

    /// Reads until the output ends; returns all of it.
    fn drain(&mut self) -> String {
        let end = Instant::now() + LIMIT;
        loop {
            let read = self
                .term
                .read_output_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            self.seen.push_str(&read.text);
            if read.ended {
                return self.seen.clone();
            }
            assert!(Instant::now() < end, "the output never ended: {:?}", self.seen);
        }
    }
}

/// Pids printed as `pid=N` lines.
fn pids_in(text: &str) -> Vec<i32> {
    text.split("pid=")
        .skip(1)
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn the_program_leads_a_new_session_with_the_terminal_as_its_controlling_terminal() {
    let exec = executor();
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv([
            "python3",
            "-c",
            "import os; print('leader', os.getsid(0) == os.getpid(), 'fg', os.tcgetpgrp(0) == os.getpgrp(), \
             'tty', os.isatty(0) and os.isatty(1) and os.isatty(2), os.ttyname(0) == os.ttyname(1), 'end')",
        ]),
    );
    s.expect("leader True fg True tty True True end");
    assert_eq!(s.exit_code(), Some(0));
    s.drain();
    assert!(
        s.term.inspect_foreground().is_none(),
        "no foreground once the program exited"
    );
}

#[test]
fn a_python_repl_answers_several_expressions() {
    let exec = executor();
    let mut s = Session::new(&exec, TerminalRequest::argv(["python3", "-i", "-q"]));
    s.expect(">>> ");
    let fg = s.waiting();
    assert_eq!(fg.process_group_id, s.term.pid(), "python leads its own group");
    s.write("6 * 7\n");
    s.expect("42");
    s.expect(">>> ");
    s.write("'-'.join(['a', 'b', 'c'])\n");
    s.expect("'a-b-c'");
    s.expect(">>> ");
    s.write("import sys; sys.stdin.isatty()\n");
    s.expect("True");
    s.expect(">>> ");
    s.waiting();
    s.write("exit(3)\n");
    assert_eq!(s.exit_code(), Some(3));
}

#[test]
fn a_confirmation_prompt_is_answered_through_write() {
    let exec = executor();
    let mut s = Session::new(
        &exec,
        TerminalRequest::command(
            "read -r -p 'Delete everything? [y/N] ' a; [ \"$a\" = y ] && echo confirmed || echo refused",
        ),
    );
    s.expect("Delete everything? [y/N] ");
    s.waiting();
    s.write("y\n");
    s.expect("confirmed");
    assert_eq!(s.exit_code(), Some(0));
}

#[test]
fn ctrl_c_through_signal_foreground_interrupts_a_foreground_sleep_and_the_shell_survives() {
    let exec = executor();
    let mut s = Session::bash(&exec);
    s.write("sleep 100\n");
    let job = s.job_in_foreground();
    assert!(common::eventually(LIMIT, || common::name_of(job) == "sleep"));
    assert!(
        !s.foreground().input_waiting,
        "a sleeping job is not waiting for input"
    );
    let signalled = s.term.signal_foreground(TerminalSignal::Int).unwrap();
    assert_eq!(signalled, job, "the exact group in the foreground was signalled");
    s.ready();
    assert!(!s.term.has_exited(), "the shell survived Ctrl-C");
    s.write("echo status=$?\n");
    s.expect("status=130");
    // Ctrl-C typed as a byte does the same through the line discipline.
    s.ready();
    s.write("sleep 100\n");
    let job = s.job_in_foreground();
    // Until the job has exec'd, bash's own SIGINT handler would take the
    // byte's signal in the forked child and `sleep` would still run.
    assert!(common::eventually(LIMIT, || common::name_of(job) == "sleep"));
    s.write("\x03");
    s.ready();
    s.write("echo again=$?\n");
    s.expect("again=130");
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

#[test]
fn sigkill_is_refused_for_the_program_itself_and_delivered_to_a_job() {
    let exec = executor();
    let mut s = Session::bash(&exec);
    s.ready();
    let refused = s.term.signal_foreground(TerminalSignal::Kill).unwrap_err();
    assert!(
        matches!(&refused, dsh_core::DshError::InvalidArgument { problem, .. } if problem.contains("terminate()")),
        "{refused:?}"
    );
    assert!(!s.term.has_exited(), "the shell survived the refused SIGKILL");
    s.write("sleep 100\n");
    let job = s.job_in_foreground();
    assert!(common::eventually(LIMIT, || common::name_of(job) == "sleep"));
    assert_eq!(s.term.signal_foreground(TerminalSignal::Kill).unwrap(), job);
    s.ready();
    s.write("echo status=$?\n");
    s.expect("status=137");
}

#[test]
fn a_window_size_change_is_seen_by_stty_and_tput() {
    let exec = executor();
    let mut r = TerminalRequest::argv(["bash", "--norc", "--noprofile", "-i"]);
    r.env = Some(map(&[("PS1", "$ "), ("HISTFILE", "")]));
    r.rows = n(30);
    r.cols = n(100);
    let mut s = Session::new(&exec, r);
    s.ready();
    s.write("echo size=$(stty size) cols=$(tput cols) lines=$(tput lines)\n");
    s.expect("size=30 100 cols=100 lines=30");
    s.ready();
    s.term.resize(n(40).unwrap(), n(132).unwrap()).unwrap();
    s.write("echo size=$(stty size) cols=$(tput cols)\n");
    s.expect("size=40 132 cols=132");
    // A program in the foreground is told (SIGWINCH) while it runs.
    s.ready();
    s.write(
        "python3 -c \"import os, signal, sys; signal.signal(signal.SIGWINCH, lambda *a: \
         print('winch', os.get_terminal_size().columns, flush=True)); print('ar' + 'med', flush=True); \
         sys.stdin.readline()\"\n",
    );
    s.expect("armed");
    s.waiting();
    s.term.resize(n(24).unwrap(), n(90).unwrap()).unwrap();
    s.expect("winch 90");
    let e = s.term.resize(n(0).unwrap(), n(80).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "terminal.rows must be a positive finite number, got 0"
    );
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

#[test]
fn full_screen_programs_start_and_quit() {
    let exec = executor();
    let dir = common::temp_dir("terminal-fullscreen");
    let file = dir.join("lines.txt");
    std::fs::write(
        &file,
        (1..=500).map(|i| format!("line {i}\n")).collect::<String>(),
    )
    .unwrap();
    // less: the alternate screen, the first page, a key to scroll, q to quit.
    let mut s = Session::new(&exec, TerminalRequest::argv(["less", file.to_str().unwrap()]));
    s.expect("\x1b[?1049h");
    s.expect("line 1");
    s.waiting();
    s.write(">");
    s.expect("line 500");
    s.waiting();
    s.write("q");
    assert_eq!(s.exit_code(), Some(0));
    // vim without any configuration: insert text, write, quit.
    let out = dir.join("written.txt");
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv(["vim", "-u", "NONE", "-N", out.to_str().unwrap()]),
    );
    s.expect("\x1b[?1049h");
    s.waiting();
    s.write("ihello from vim\x1b");
    s.waiting();
    s.write(":wq\r");
    assert_eq!(s.exit_code(), Some(0));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hello from vim\n");
    // top: a program that redraws by itself, quit with q.
    let mut s = Session::new(&exec, TerminalRequest::argv(["top", "-d", "0.5"]));
    s.expect("PID");
    s.write("q");
    assert_eq!(s.exit_code(), Some(0));
}

#[test]
fn job_control_background_then_fg_and_ctrl_z() {
    let exec = executor();
    let mut s = Session::bash(&exec);
    s.write("sleep 100 &\n");
    s.expect("[1]");
    s.ready();
    s.write("fg\n");
    let job = s.job_in_foreground();
    assert!(common::eventually(LIMIT, || common::name_of(job) == "sleep"));
    assert_eq!(s.term.signal_foreground(TerminalSignal::Tstp).unwrap(), job);
    s.expect("Stopped");
    s.ready();
    s.write("jobs -l\n");
    s.expect("Stopped");
    // Back in the foreground, then Ctrl-Z typed as a byte.
    s.ready();
    s.write("fg %1\n");
    assert_eq!(s.job_in_foreground(), job);
    s.write("\x1a");
    s.expect("Stopped");
    s.ready();
    s.run("kill -9 %1; wait");
    assert!(common::eventually(LIMIT, || !alive(job)));
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

#[test]
fn input_waiting_for_read_p_cat_and_a_program_that_sleeps_before_prompting() {
    let exec = executor();
    // read -p
    let mut s = Session::new(
        &exec,
        TerminalRequest::command("read -r -p 'name? ' x; echo hi $x"),
    );
    s.expect("name? ");
    s.waiting();
    s.write("ann\n");
    s.expect("hi ann");
    assert_eq!(s.exit_code(), Some(0));
    // cat
    let mut s = Session::new(&exec, TerminalRequest::argv(["cat"]));
    s.waiting();
    s.write("echoed\n");
    s.expect("echoed\r\necho");
    s.waiting();
    s.write("\x04");
    assert_eq!(s.exit_code(), Some(0));
    // Not waiting while it sleeps, waiting once it prompts.
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv([
            "python3",
            "-c",
            "import time; time.sleep(1.5); print(input('now> '))",
        ]),
    );
    let mut samples = 0;
    loop {
        let read = s
            .term
            .read_output_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        s.seen.push_str(&read.text);
        if s.seen.contains("now> ") {
            break;
        }
        if let Some(fg) = s.term.inspect_foreground() {
            if fg.input_waiting {
                // Only right after the prompt, which may have been written
                // after the read above: it must be there at once, where a
                // false report during the 1.5 s sleep would wait for it.
                let read = s
                    .term
                    .read_output_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                s.seen.push_str(&read.text);
                assert!(
                    s.seen.contains("now> "),
                    "waiting reported while the program sleeps ({samples} samples)"
                );
                break;
            }
            samples += 1;
        }
        assert!(samples < 10_000, "the prompt never came");
    }
    assert!(samples >= 5, "too few samples while it slept: {samples}");
    s.waiting();
    s.write("late\n");
    s.expect("late\r\nlate");
    assert_eq!(s.exit_code(), Some(0));
}

#[test]
fn input_waiting_for_a_pipeline_in_the_foreground() {
    let exec = executor();
    let mut s = Session::bash(&exec);
    // Every member blocked: cat on the terminal, tr on the pipe.
    s.write("cat | tr a-z A-Z\n");
    let job = s.job_in_foreground();
    let fg = s.waiting();
    assert_eq!(fg.process_group_id, job);
    s.write("shout\n");
    s.expect("SHOUT");
    s.write("\x04");
    s.ready();
    // A member that sleeps makes progress without input: not waiting,
    // though cat reads the pipe and nobody writes.
    s.write("sleep 100 | cat\n");
    let job = s.job_in_foreground();
    let end = Instant::now() + LIMIT;
    while dsh_members(s.term.pid(), job) < 2 {
        assert!(Instant::now() < end);
        std::thread::sleep(Duration::from_millis(10));
    }
    for _ in 0..20 {
        assert!(
            !s.foreground().input_waiting,
            "a pipeline with a sleeping member is not waiting"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s.term.signal_foreground(TerminalSignal::Int).unwrap(), job);
    s.ready();
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

/// Live members of group `pgid` in session `sid`.
fn dsh_members(sid: i32, pgid: i32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let rest: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
            rest.len() > 4 && rest[0] != "Z" && rest[2] == pgid.to_string() && rest[3] == sid.to_string()
        })
        .count()
}

#[test]
fn input_waiting_for_a_raw_mode_program_and_not_for_a_busy_one() {
    let exec = executor();
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv([
            "python3",
            "-c",
            "import os, tty; tty.setraw(0); os.write(1, b'ready'); c = os.read(0, 1); os.write(1, b' got ' + c + b'.')",
        ]),
    );
    s.expect("ready");
    s.waiting();
    // One key, no newline: raw mode delivers it at once.
    s.write("x");
    s.expect(" got x.");
    assert_eq!(s.exit_code(), Some(0));
    // A program that computes is never waiting.
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv(["python3", "-c", "print('spin', flush=True)\nwhile True: pass"]),
    );
    s.expect("spin");
    for _ in 0..20 {
        assert!(!s.foreground().input_waiting);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

#[test]
fn input_waiting_for_a_program_that_waits_in_epoll_the_node_repl() {
    let exec = executor();
    let mut s = Session::new(&exec, TerminalRequest::argv(["node", "-i"]));
    s.expect("> ");
    // libuv waits in epoll_wait on the terminal; its other threads in
    // futexes.
    s.waiting();
    s.write("6 * 7\r");
    s.expect("42");
    s.waiting();
    s.write(".exit\r");
    assert_eq!(s.exit_code(), Some(0));
}

#[test]
fn nothing_of_the_session_survives_terminate() {
    let exec = executor();
    let mut s = Session::bash(&exec);
    // A background job, a nohup one that ignores the hangup, one that left
    // the session, and one that ignores SIGTERM too.
    let mut text = s.run(
        "sleep 1000 & echo pid=$!; nohup sleep 1000 >/dev/null 2>&1 & echo pid=$!; \
         setsid sh -c 'echo pid=$$; exec sleep 1000' & (trap '' TERM HUP; exec sleep 1000) & echo pid=$!",
    );
    while pids_in(&text).len() < 4 {
        text += &s.expect("pid=");
        text += &s.expect("\n");
    }
    let pids = pids_in(&text);
    assert_eq!(pids.len(), 4, "{text:?}");
    assert!(pids.iter().all(|&p| alive(p)));
    let leader = s.term.pid();
    assert_eq!(s.term.terminate_blocking().unwrap(), 0, "no survivors");
    for p in pids.iter().chain([&leader]) {
        assert!(!alive(*p), "{p} survived terminate()");
    }
    assert!(s.term.has_exited());
    assert_eq!(
        s.term.signal().as_deref(),
        Some("SIGHUP"),
        "bash ends on the hangup"
    );
    // Idempotent, and the handle refuses what needs a live program.
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
    assert!(matches!(
        s.term.write_blocking(b"x"),
        Err(DshError::TerminalClosed(_))
    ));
    assert!(matches!(
        s.term.signal_foreground(TerminalSignal::Int),
        Err(DshError::TerminalClosed(_))
    ));
    assert!(s.term.inspect_foreground().is_none());
    assert!(s.drain().len() >= text.len());
}

#[test]
fn terminate_after_the_program_ended_still_ends_what_it_left() {
    let exec = executor();
    // The child says its pid once it ignores the hangup that the leader's
    // exit sends; then the leader is let go.
    let mut s = Session::new(
        &exec,
        TerminalRequest::command(
            "python3 -c \"import os, signal, time; signal.signal(signal.SIGHUP, signal.SIG_IGN); \
             print('pid=%d' % os.getpid(), flush=True); time.sleep(1000)\" & read -r x; exit 0",
        ),
    );
    let text = s.expect("\n");
    let pid = pids_in(&text)[0];
    s.waiting();
    s.write("\n");
    assert_eq!(s.exit_code(), Some(0));
    assert!(alive(pid), "the left-behind process runs until terminate()");
    // Refused once the program has exited, as a write is, whether or not
    // the session has wound down yet (it has not: the process it left
    // holds the terminal).
    assert!(matches!(
        s.term.resize(n(30).unwrap(), n(90).unwrap()),
        Err(DshError::TerminalClosed(_))
    ));
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
    assert!(!alive(pid));
}

#[test]
fn the_terminal_hangs_up_when_the_session_ends_even_while_a_handle_is_held() {
    let exec = executor();
    let dir = common::temp_dir("terminal-hangup");
    let marker = dir.join("hung-up");
    // A reader the program leaves behind (it ignores the hangup signal;
    // its input is the terminal, not bash's /dev/null for background jobs)
    // sees the end of its input once the session ends, although the test
    // still holds the handle.
    let reader = format!(
        "import os, signal\n\
         signal.signal(signal.SIGHUP, signal.SIG_IGN)\n\
         print('reading', flush=True)\n\
         try:\n    while os.read(0, 1024): pass\n\
         except OSError: pass\n\
         open('{}', 'w').write('end')",
        marker.display()
    );
    let mut r = TerminalRequest::command("python3 -c \"$READER\" </dev/tty & read -r go; exit 0");
    r.env = Some(map(&[("READER", reader.as_str())]));
    r.grace_ms = n(200);
    let mut s = Session::new(&exec, r);
    s.expect("reading");
    s.waiting();
    s.write("go\n");
    assert_eq!(s.exit_code(), Some(0));
    s.drain();
    assert!(
        common::eventually(LIMIT, || marker.exists()),
        "the left-behind reader never saw the hangup"
    );
    assert!(matches!(
        s.term.resize(n(30).unwrap(), n(90).unwrap()),
        Err(DshError::TerminalClosed(_))
    ));
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

#[test]
fn nothing_of_a_session_survives_dispose() {
    let exec = executor();
    let mut s = Session::bash(&exec);
    s.write("sleep 1000 & echo pid=$!; setsid sleep 1000 & echo pid=$!; sleep 1000\n");
    let text = s.expect("pid=");
    let text = text + &s.expect("pid=") + &s.expect("\n");
    let mut pids = pids_in(&text);
    pids.push(s.term.pid());
    s.job_in_foreground();
    exec.dispose_blocking().unwrap();
    for p in &pids {
        assert!(!alive(*p), "{p} survived dispose");
    }
    assert!(s.term.has_exited());
    let spec = exec.resolve_terminal(TerminalRequest::argv(["true"])).unwrap();
    assert!(matches!(exec.spawn_terminal(&spec), Err(DshError::Disposed)));
}

#[test]
fn output_is_bounded_and_the_program_waits_for_the_reader() {
    let cap = 64 * 1024;
    let exec = executor_with(|c| c.max_output_bytes = n(cap));
    let total = 3_000_000;
    let mut s = Session::new(
        &exec,
        TerminalRequest::command(format!("head -c {total} /dev/zero | tr '\\0' a; echo; echo END")),
    );
    // Nobody reads: the program is held (the buffer is full, so the session
    // stops reading the terminal), and nothing is lost.
    let end = Instant::now() + LIMIT;
    while s.term.inspect_foreground().is_some() && Instant::now() < end {
        let held = s.term.read_output_timeout(Some(Duration::ZERO)).unwrap();
        s.seen.push_str(&held.text);
        assert!(
            held.text.len() <= cap as usize,
            "a read never holds more than the cap"
        );
        if s.seen.len() > cap as usize * 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !s.term.has_exited(),
        "the program waits for its output to be read"
    );
    assert!(
        !s.foreground().input_waiting,
        "a program blocked writing is not waiting for input"
    );
    let all = s.drain();
    assert_eq!(all.matches('a').count(), total, "nothing lost");
    assert!(all.ends_with("END\r\n"));
}

#[test]
fn terminate_of_a_session_whose_output_nobody_read_does_not_wait_out_the_grace() {
    // docs/terminals.md: output left in the terminal is kept unless the
    // session is terminated. `yes` fills the unread output and blocks; the
    // hang-up ends it at once, and the session reads (and drops) what the
    // terminal still holds to see it hang up, without waiting for a reader.
    let exec = executor_with(|c| {
        c.grace_ms = n(20_000);
        c.max_output_bytes = n(64 * 1024);
    });
    let s = Session::new(&exec, TerminalRequest::argv(["yes"]));
    // Blocked in write(2): the output is full and the terminal's buffer too.
    let blocked = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", s.term.pid())).unwrap_or_default();
        let syscall = std::fs::read_to_string(format!("/proc/{}/syscall", s.term.pid())).unwrap_or_default();
        stat.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('S'))
            && syscall.starts_with("1 ")
    };
    let end = Instant::now() + LIMIT;
    while !blocked() {
        assert!(Instant::now() < end, "yes never blocked on its unread output");
        std::thread::sleep(Duration::from_millis(20));
    }
    let start = Instant::now();
    s.term.terminate_blocking().unwrap();
    let took = start.elapsed();
    assert!(s.term.has_exited());
    assert!(
        took < Duration::from_secs(10),
        "terminate took {took:?}: it waited out the 20 s grace for a reader"
    );
    exec.dispose_blocking().unwrap();
}

#[test]
fn writes_the_program_does_not_read_wait_in_order_without_blocking_the_caller() {
    let exec = executor();
    // Raw mode (no line limit); nothing is read until SIGUSR1.
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv([
            "python3",
            "-c",
            "import os, signal, sys, tty\n\
             tty.setraw(0)\n\
             signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n\
             os.write(1, b'paused pid=%d\\r\\n' % os.getpid())\n\
             signal.sigwait({signal.SIGUSR1})\n\
             got = b''\n\
             while not got.endswith(b'END'):\n    got += os.read(0, 65536)\n\
             os.write(1, b'len=%d ok=%d\\r\\n' % (len(got), got == b'x' * 1000000 + b'tail END'))",
        ]),
    );
    let text = s.expect("\r\n");
    let pid = pids_in(&text)[0];
    let first = s.term.write_now(vec![b'x'; 1_000_000]).unwrap();
    let first = first.expect("a program that does not read cannot take a megabyte at once");
    // A later write queues behind the first, however small.
    let second = s
        .term
        .write_now(b"tail END")
        .unwrap()
        .expect("queued behind the first");
    // SAFETY: kill(2) with integers; `pid` is the session's live program.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
    first.wait_blocking().unwrap();
    second.wait_blocking().unwrap();
    s.expect("len=1000008 ok=1");
    assert_eq!(s.exit_code(), Some(0));
}

#[test]
fn utf8_is_never_split_at_a_read_boundary() {
    let exec = executor_with(|c| c.max_output_bytes = n(7));
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv(["python3", "-c", "import sys; sys.stdout.write('é€😀' * 3000)"]),
    );
    let mut reads = 0;
    let end = Instant::now() + LIMIT;
    loop {
        let read = s
            .term
            .read_output_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        assert!(
            !read.text.contains('\u{FFFD}'),
            "a character was split: {:?}",
            read.text
        );
        assert!(read.text.len() <= 7);
        s.seen.push_str(&read.text);
        reads += 1;
        if read.ended {
            break;
        }
        assert!(Instant::now() < end);
    }
    assert_eq!(s.seen, "é€😀".repeat(3000));
    assert!(reads > 1000, "the small cap made many reads: {reads}");
}

#[test]
fn environment_follows_the_command_rules_with_a_real_term() {
    let exec = executor();
    let mut r = TerminalRequest::command("echo term=$TERM tag=${DSH_EXEC_TAG:+set} pager=$PAGER x=$X");
    r.env = Some(map(&[("X", "given")]));
    let mut s = Session::new(&exec, r);
    s.expect("term=xterm-256color tag=set pager=cat x=given");
    let mut r = TerminalRequest::command("echo term=$TERM; pwd");
    r.env = Some(map(&[("TERM", "vt100")]));
    r.cwd = Some("/tmp".into());
    let mut s = Session::new(&exec, r);
    s.expect("term=vt100\r\n/tmp");
}

#[test]
fn a_confined_session_keeps_its_terminal_and_loses_the_filesystem() {
    if common::skip_without_landlock() {
        return;
    }
    let exec = executor();
    let dir = common::temp_dir("terminal-sandbox");
    let mut r = TerminalRequest::command(
        "if echo x > \"$OUT/escaped\" 2>/dev/null; then echo wrote; else echo refused; fi; \
         tty >/dev/null && echo has-tty; read -r -p 'ok? ' a; echo got-$a",
    );
    r.env = Some(map(&[("OUT", dir.to_str().unwrap())]));
    r.cwd = Some("/".into());
    r.sandbox_policy = Some(dsh_core::SandboxPolicyInput {
        mode: dsh_core::SandboxMode::ReadOnly,
        workspace_root: None,
        session_id: None,
        network: None,
    });
    let mut s = Session::new(&exec, r);
    s.expect("refused");
    s.expect("has-tty");
    s.expect("ok? ");
    s.waiting();
    s.write("yes\n");
    s.expect("got-yes");
    assert_eq!(s.exit_code(), Some(0));
    assert!(!dir.join("escaped").exists());
}

#[test]
fn requests_are_checked_and_failures_name_the_field() {
    let exec = executor();
    let err = |r: TerminalRequest| exec.resolve_terminal(r).unwrap_err().to_string();
    let mut r = TerminalRequest::argv(["bash"]);
    r.rows = n(0);
    assert_eq!(err(r), "request.rows must be a positive finite number, got 0");
    let mut r = TerminalRequest::argv(["bash"]);
    r.cols = n(70000);
    assert_eq!(err(r), "request.cols must be no greater than 65535, got 70000");
    let mut r = TerminalRequest::argv(["bash"]);
    r.grace_ms = n(1.5);
    assert_eq!(err(r), "request.grace_ms must be a whole number, got 1.5");
    assert_eq!(
        err(TerminalRequest::argv(Vec::<String>::new())),
        "request.argv must name a program, got an empty list"
    );
    let spec: TerminalSpec = exec.resolve_terminal(TerminalRequest::argv(["bash"])).unwrap();
    assert_eq!((spec.rows, spec.cols), (24, 80));
    assert_eq!(spec.grace_ms, exec.config().grace_ms);
    let spec = exec
        .resolve_terminal(TerminalRequest::argv(["no-such-program-dsh"]))
        .unwrap();
    match exec.spawn_terminal(&spec) {
        Err(DshError::Spawn { errno, message, .. }) => {
            assert_eq!(errno, libc::ENOENT);
            assert!(message.contains("no-such-program-dsh"), "{message}");
        }
        other => panic!("expected a spawn failure, got {other:?}"),
    }
    let mut r = TerminalRequest::argv(["true"]);
    r.cwd = Some("/no/such/dir".into());
    let spec = exec.resolve_terminal(r).unwrap();
    match exec.spawn_terminal(&spec) {
        Err(DshError::Spawn { errno, message, .. }) => {
            assert_eq!(errno, libc::ENOENT);
            assert!(message.contains("/no/such/dir"), "{message}");
        }
        other => panic!("expected a spawn failure, got {other:?}"),
    }
}

#[test]
fn a_session_under_network_deny_cannot_open_an_inet_socket_and_loopback_is_refused() {
    // The session's program gets the same seccomp network filter as a
    // command; `loopback` needs a cgroup of its own, which sessions do not
    // make, so it is refused rather than silently weaker.
    let exec = executor();
    let policy = |network| dsh_core::SandboxPolicyInput {
        mode: dsh_core::SandboxMode::DangerFullAccess,
        workspace_root: None,
        session_id: None,
        network: Some(network),
    };
    let mut r = TerminalRequest::command(
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_STREAM)' 2>/dev/null \
         && echo inet-opened || echo inet-refused; \
         python3 -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)' && echo unix-opened",
    );
    r.sandbox_policy = Some(policy(dsh_core::NetworkPolicy::Deny));
    let mut s = Session::new(&exec, r);
    s.expect("inet-refused");
    s.expect("unix-opened");
    assert_eq!(s.exit_code(), Some(0));

    let mut r = TerminalRequest::argv(["true"]);
    r.sandbox_policy = Some(policy(dsh_core::NetworkPolicy::Loopback));
    let spec = exec.resolve_terminal(r).unwrap();
    match exec.spawn_terminal(&spec) {
        Err(DshError::SandboxUnavailable(why)) => assert!(why.contains("loopback"), "{why}"),
        other => panic!("loopback in a terminal session must be refused, got {other:?}"),
    }
}

#[test]
fn output_left_in_the_terminal_when_the_program_exits_unread_is_not_lost() {
    // The program writes a little more than the cap and exits while nobody
    // reads: the cap is held by the session, the rest waits in the kernel's
    // terminal buffer. Reading later, even long after the grace period,
    // returns every byte.
    let cap = 16 * 1024;
    let exec = executor_with(|c| c.max_output_bytes = n(cap));
    let total = cap as usize + 2000;
    let mut r = TerminalRequest::command(format!("head -c {total} /dev/zero | tr '\\0' a; echo END"));
    r.grace_ms = n(100);
    let mut s = Session::new(&exec, r);
    assert_eq!(s.exit_code(), Some(0));
    // Nobody reads for a while after the exit: longer than the grace.
    std::thread::sleep(Duration::from_millis(1000));
    let all = s.drain();
    assert_eq!(all.matches('a').count(), total, "nothing lost");
    assert!(
        all.ends_with("END\r\n"),
        "{:?}",
        &all[all.len().saturating_sub(20)..]
    );
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

#[test]
fn input_waiting_for_a_password_prompt_that_reads_dev_tty() {
    // Password prompts (getpass, sudo, ssh) read /dev/tty, whose descriptor
    // is the controlling terminal under another device number (5, 0).
    let exec = executor();
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv([
            "python3",
            "-c",
            "import getpass; print('got=' + getpass.getpass('pw: '))",
        ]),
    );
    s.expect("pw: ");
    let fg = s.waiting();
    assert_eq!(fg.process_group_id, s.term.pid());
    s.write("secret\n");
    s.expect("got=secret");
    assert_eq!(s.exit_code(), Some(0));
    let mut r = TerminalRequest::command("printf 'name? '; read -r x </dev/tty; echo got=$x");
    r.grace_ms = n(100);
    let mut s = Session::new(&exec, r);
    s.expect("name? ");
    s.waiting();
    s.write("bob\n");
    s.expect("got=bob");
    assert_eq!(s.exit_code(), Some(0));
}

#[test]
fn terminate_settles_while_a_write_the_program_never_reads_is_pending() {
    // The program is in raw mode and never reads: the write stays pending,
    // and terminate() must still end the session and fail the write.
    let exec = executor();
    for round in 0..12 {
        let mut s = Session::new(
            &exec,
            TerminalRequest::argv(["bash", "-c", "stty raw -echo; echo ready; exec sleep 60"]),
        );
        s.expect("ready");
        let pending = s.term.write_now(vec![b'x'; 8 << 20]).unwrap();
        assert!(pending.is_some(), "round {round}: the write should wait");
        let (tx, rx) = std::sync::mpsc::channel();
        pending.unwrap().then(move |r| {
            let _ = tx.send(r.is_ok());
        });
        std::thread::sleep(Duration::from_millis(300));
        let term = s.term.clone();
        let (dtx, drx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = dtx.send(term.terminate_blocking());
        });
        let done = drx.recv_timeout(Duration::from_secs(10));
        assert!(done.is_ok(), "round {round}: terminate hung with a write pending");
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(false));
    }
}

/// A session has reaped its leader when it has ended: once `terminate()`
/// returns, the leader's pid is free (`kill(pid, 0)` is ESRCH), whether the
/// program was stopped or had ended by itself.
#[test]
fn an_ended_session_has_reaped_its_leader() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    for round in 0..3 {
        let s = Session::bash(&exec);
        let leader = s.term.pid();
        assert_eq!(s.term.terminate_blocking().unwrap(), 0);
        assert!(
            pid_is_free(leader),
            "round {round}: terminate() returned with the leader unreaped"
        );

        let mut s = Session::new(&exec, TerminalRequest::command("echo ready; exit 4"));
        s.expect("ready");
        let leader = s.term.pid();
        assert_eq!(s.exit_code(), Some(4));
        assert_eq!(s.term.terminate_blocking().unwrap(), 0);
        assert!(
            pid_is_free(leader),
            "round {round}: an ended session left its leader unreaped"
        );
    }
}

/// Samples the foreground for a while and fails on any report of waiting:
/// the program is known not to read the terminal now.
fn never_waiting(s: &Session, what: &str) {
    for _ in 0..30 {
        let fg = s.foreground();
        assert!(!fg.input_waiting, "{what}: reported waiting: {fg:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn input_waiting_follows_a_pty_relay_to_the_terminal_it_serves() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        common::skip("no util-linux script here");
        return;
    }
    let exec = executor();
    // script relays this terminal to a pseudo-terminal of its own, where
    // bash runs: waiting only when bash, there, reads.
    let mut s = Session::new(
        &exec,
        TerminalRequest::command("script -qc 'echo in; sleep 1000' /dev/null"),
    );
    s.expect("in");
    never_waiting(&s, "a relay whose program sleeps");
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
    let mut s = Session::new(
        &exec,
        TerminalRequest::command("script -qc 'read -r -p \"name? \" x; echo got=$x; sleep 1000' /dev/null"),
    );
    s.expect("name? ");
    s.waiting();
    s.write("ann\n");
    s.expect("got=ann");
    never_waiting(&s, "the relayed program sleeps after its read");
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

#[test]
fn epoll_targets_are_the_files_registered_not_the_numbers_now() {
    let exec = executor();
    // A pipe registered as fd N, then the terminal put on N: the epoll
    // still watches the pipe.
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv([
            "python3",
            "-c",
            "import os, select\nr, w = os.pipe(); keep = os.dup(r)\nep = select.epoll(); ep.register(r, select.EPOLLIN)\nos.dup2(0, r)\nprint('ready', flush=True); ep.poll()",
        ]),
    );
    s.expect("ready");
    never_waiting(
        &s,
        "an epoll that watches a pipe whose number is now the terminal",
    );
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
    // The reverse: the terminal registered as fd N, then a pipe put on N.
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv([
            "python3",
            "-c",
            "import os, select\nt = os.dup(0); ep = select.epoll(); ep.register(t, select.EPOLLIN)\nr, w = os.pipe(); os.dup2(r, t)\nprint('ready', flush=True); ep.poll(); print('woke', flush=True); input()",
        ]),
    );
    s.expect("ready");
    s.waiting();
    s.write("x\n");
    s.expect("woke");
    assert_eq!(s.exit_code(), Some(0));
}

#[test]
fn an_epoll_that_watches_an_epoll_that_watches_the_terminal_waits_for_input() {
    let exec = executor();
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv([
            "python3",
            "-c",
            "import select\ninner = select.epoll(); inner.register(0, select.EPOLLIN)\nouter = select.epoll(); outer.register(inner.fileno(), select.EPOLLIN)\nprint('ready', flush=True); outer.poll(); print('woke', flush=True); input()",
        ]),
    );
    s.expect("ready");
    s.waiting();
    s.write("x\n");
    s.expect("woke");
    assert_eq!(s.exit_code(), Some(0));
    // Nested, but the inner one watches a pipe: not waiting.
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv([
            "python3",
            "-c",
            "import os, select\nr, w = os.pipe()\ninner = select.epoll(); inner.register(r, select.EPOLLIN)\nouter = select.epoll(); outer.register(inner.fileno(), select.EPOLLIN)\nprint('ready', flush=True); outer.poll()",
        ]),
    );
    s.expect("ready");
    never_waiting(&s, "an epoll that watches an epoll that watches a pipe");
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

#[test]
fn input_waiting_is_false_right_after_a_write_until_the_program_reads_again() {
    let dir = common::temp_dir("terminal-written");
    let fifo = dir.join("go");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let exec = executor();
    // After each line it reads, it waits on the fifo (not the terminal)
    // until the test lets it read again.
    let s = Session::new(
        &exec,
        TerminalRequest::command(format!(
            "while read -r x; do read -r y < '{}'; done",
            fifo.display()
        )),
    );
    for i in 0..20 {
        s.waiting();
        s.write(&format!("line{i}\n"));
        // The line is unread or being read, then the program waits on the
        // fifo: never waiting for input here, however soon the look.
        let fg = s.foreground();
        assert!(
            !fg.input_waiting,
            "round {i}: waiting reported right after a write"
        );
        assert!(
            !s.term
                .wait_input_waiting(Some(Duration::from_millis(200)))
                .unwrap(),
            "round {i}: the program waits on the fifo, not the terminal"
        );
        std::fs::write(&fifo, "go\n").unwrap();
        assert!(s.term.wait_input_waiting(Some(LIMIT)).unwrap(), "round {i}");
    }
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

/// A 128 MiB write to a program that never reads holds nothing beyond the
/// caller's bytes but a few pieces (docs/terminals.md): `write_blocking`
/// of borrowed bytes copies at most three `WRITE_PIECE`s at a time, and
/// `write_now` of an owned buffer holds that buffer itself. In a child
/// host (memory measured alone; a hang fails instead of hanging the
/// suite), peak RSS through VmHWM, reset once the caller's bytes exist.
#[test]
fn a_big_write_to_a_program_that_never_reads_copies_at_most_a_few_pieces() {
    if let Ok(mode) = std::env::var("DSH_WRITE_MEMORY_HOST") {
        let status = |key: &str| -> u64 {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            let kb: u64 = s
                .lines()
                .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(':')))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap();
            kb * 1024
        };
        let exec = executor();
        let mut s = Session::new(
            &exec,
            TerminalRequest::argv([
                "bash",
                "--norc",
                "--noprofile",
                "-c",
                // Raw input: canonical mode takes (and drops) what overflows
                // a line, so the write would never wait.
                "stty -icanon -echo; echo READY; read -r line; echo GOT; exec sleep 1000",
            ]),
        );
        s.expect("READY");
        let mut data = vec![b'x'; 128 << 20];
        data[..6].copy_from_slice(b"hello\n");
        std::fs::write("/proc/self/clear_refs", "5").unwrap(); // VmHWM := VmRSS
        let base = status("VmRSS");
        let term = s.term.clone();
        let writer = std::thread::spawn(move || match mode.as_str() {
            "borrowed" => term.write_blocking(&data),
            _ => match term.write_now(data) {
                Ok(Some(rest)) => rest.wait_blocking(),
                other => other.map(|_| ()),
            },
        });
        // The write has begun once the program read its first line.
        s.expect("GOT");
        let mut held = 0;
        let end = Instant::now() + Duration::from_secs(2);
        while Instant::now() < end {
            held = held.max(status("VmRSS").saturating_sub(base));
            std::thread::sleep(Duration::from_millis(50));
        }
        s.term.terminate_blocking().unwrap();
        let outcome = writer.join().unwrap();
        assert!(matches!(outcome, Err(DshError::TerminalClosed(_))), "{outcome:?}");
        println!("HELD {held} PEAK {}", status("VmHWM").saturating_sub(base));
        return;
    }
    for mode in ["borrowed", "owned"] {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_big_write_to_a_program_that_never_reads_copies_at_most_a_few_pieces",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("DSH_WRITE_MEMORY_HOST", mode)
            // Under AddressSanitizer (the ASan stage) its quarantine keeps
            // freed pieces resident: measure what the code holds, not that.
            .env(
                "ASAN_OPTIONS",
                format!(
                    "{}:quarantine_size_mb=0",
                    std::env::var("ASAN_OPTIONS").unwrap_or_default()
                ),
            )
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(120);
        while child.try_wait().unwrap().is_none() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        let hung = child.try_wait().unwrap().is_none();
        if hung {
            child.kill().unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        assert!(!hung, "{mode}: the host hung: {out}");
        let line = out
            .lines()
            .find(|l| l.contains("HELD "))
            .unwrap_or_else(|| panic!("{mode}: {out}"));
        println!("{mode}: {line}");
        let words: Vec<&str> = line[line.find("HELD ").unwrap()..].split_whitespace().collect();
        let (held, peak): (u64, u64) = (words[1].parse().unwrap(), words[3].parse().unwrap());
        // Generous: allocator and test-harness noise, far below one copy.
        assert!(
            held < 32 << 20 && peak < 32 << 20,
            "{mode}: held {held}, peak {peak}"
        );
    }
}

/// A `write` future dropped before it fed its whole buffer still writes the
/// rest, in order, before the next write: the line is never left half
/// typed for the next write to complete (the old copy's semantics, kept
/// without copying on the normal path).
#[test]
fn a_dropped_write_still_writes_its_rest_in_order() {
    let exec = executor();
    let mut s = Session::new(
        &exec,
        TerminalRequest::argv([
            "bash",
            "--norc",
            "--noprofile",
            "-c",
            "stty raw -echo; echo READY; sleep 0.5; head -c 300000 >/dev/null; head -c 4; echo; exec sleep 100",
        ]),
    );
    s.expect("READY");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let big = vec![b'a'; 300_000];
    // Dropped while the program sleeps: the terminal holds a few KiB.
    let outcome =
        rt.block_on(async { tokio::time::timeout(Duration::from_millis(5), s.term.write(&big)).await });
    assert!(outcome.is_err(), "the write was expected to be still going");
    drop(big);
    s.term.write_blocking(b"next").unwrap();
    s.expect("next");
    assert_eq!(s.term.terminate_blocking().unwrap(), 0);
}

#[test]
fn a_wait_for_input_longer_than_any_clock_is_no_limit() {
    let exec = executor();
    let t = exec
        .spawn_terminal(
            &exec
                .resolve_terminal(TerminalRequest::argv(["bash", "--norc", "--noprofile", "-i"]))
                .unwrap(),
        )
        .unwrap();
    // Past what an Instant can hold: it once panicked on the core's thread
    // and the answer never came.
    assert!(t.wait_input_waiting(Some(Duration::from_secs(u64::MAX))).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    t.wait_input_waiting_with(Some(Duration::MAX), move |w| tx.send(w).unwrap());
    assert!(rx.recv_timeout(Duration::from_secs(60)).unwrap());
    t.terminate_blocking().unwrap();
}

/// `when_output_ready` wakes when output waits or the output ended, and
/// takes nothing: what woke it is still there for the reader.
#[test]
fn a_readiness_wake_up_takes_nothing() {
    let exec = executor();
    let mut request = TerminalRequest::argv([
        "bash",
        "--norc",
        "--noprofile",
        "-c",
        "stty -echo; read -r a; echo got-$a",
    ]);
    request.env = Some(map(&[("HISTFILE", "")]));
    let spec = exec.resolve_terminal(request).unwrap();
    let term = exec.spawn_terminal(&spec).unwrap();
    let woken = || {
        let (tx, rx) = std::sync::mpsc::channel();
        term.when_output_ready(move || {
            let _ = tx.send(());
        })
        .unwrap();
        rx
    };
    assert!(
        term.wait_input_waiting(Some(LIMIT)).unwrap(),
        "the program never waited for input"
    );
    let first = woken();
    // Nothing to read yet: no wake-up.
    assert!(
        first.recv_timeout(Duration::from_millis(200)).is_err(),
        "woken with nothing to read"
    );
    term.write_blocking(b"one\n").unwrap();
    first.recv_timeout(LIMIT).expect("no wake-up once output came");
    // Still there: a second waiter is woken at once, and the reader gets it all.
    woken()
        .recv_timeout(LIMIT)
        .expect("no wake-up while output waits");
    let mut seen = String::new();
    while !seen.contains("got-one") {
        seen += &term.read_output_timeout(Some(LIMIT)).unwrap().text;
    }
    assert_eq!(seen, "got-one\r\n");
    // The end wakes a waiter too.
    let end = woken();
    end.recv_timeout(LIMIT)
        .expect("no wake-up at the end of the output");
    assert!(term.read_output().ended);
}

/// Dispose ends a session as `terminate()` does, with the hangup first,
/// also when it comes before the session's task has run: the executor's
/// sweep must leave the session's group to the task, not send its leader a
/// bare SIGTERM (a remote close right after a spawn raced so in CI).
#[test]
fn dispose_before_a_sessions_task_runs_still_hangs_it_up() {
    let exec = executor();
    let dir = common::temp_dir("dispose-hangup");
    let spec = exec.resolve_terminal(TerminalRequest::argv(["cat"])).unwrap();
    let (term, task) = exec.spawn_terminal_task(&spec).unwrap();
    let disposed = common::dispose_past_its_sweep(&exec, &dir);
    task.start();
    assert!(term.wait_timeout(Some(LIMIT)).unwrap(), "the session did not end");
    assert_eq!(term.signal().as_deref(), Some("SIGHUP"));
    disposed.recv_timeout(LIMIT).expect("dispose completes");
}
