//! Writable stdin of background processes, and the timeout hand-over
//! (`on_expiry` background) of foreground runs (docs/running.md).
mod common;
use common::*;

use std::sync::mpsc;
use std::time::Duration;

use dsh_core::*;

const LONG: Duration = Duration::from_secs(30);

fn piped(exec: &Executor, command: &str) -> Process {
    let mut req = Request::new(command);
    req.stdin_pipe = true;
    exec.start(&exec.resolve(req).unwrap()).unwrap()
}

fn settled(p: &Process) {
    assert!(p.wait_timeout(Some(LONG)).unwrap(), "{} did not settle", p.id());
}

/// Reads until `needle` ends the accumulated deltas.
fn read_until(p: &Process, seen: &mut String, needle: &str) {
    assert!(
        eventually(LONG, || {
            seen.push_str(&p.read_output().delta);
            seen.ends_with(needle)
        }),
        "never saw {needle:?}; got {seen:?}"
    );
}

/// Reads everything until the process has settled.
fn read_all(p: &Process) -> String {
    settled(p);
    p.read_output().delta
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Writes all of `bytes` with the non-blocking call plus the wait, as a C
/// host does.
fn write_all_polling(p: &Process, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let n = p.try_write_stdin(bytes).unwrap();
        bytes = &bytes[n..];
        if n == 0 {
            assert!(
                p.wait_stdin_writable(Some(LONG)).unwrap(),
                "stdin never became writable"
            );
        }
    }
}

fn stdin_error(e: DshError) -> StdinEnd {
    match e {
        DshError::StdinClosed { why, .. } => why,
        other => panic!("expected StdinClosed, got {other:?}"),
    }
}

#[test]
fn interleaved_writes_and_reads_with_cat() {
    let exec = executor();
    let p = piped(&exec, "cat");
    let mut seen = String::new();
    for i in 0..20 {
        let line = format!("line {i}\n");
        assert_eq!(p.try_write_stdin(line.as_bytes()).unwrap(), line.len());
        read_until(&p, &mut seen, &line);
    }
    assert!(p.close_stdin().unwrap());
    assert!(!p.close_stdin().unwrap(), "a second close does nothing");
    settled(&p);
    assert_eq!(p.exit_code(), Some(0));
    let expected: String = (0..20).map(|i| format!("line {i}\n")).collect();
    seen.push_str(&p.read_output().delta);
    assert_eq!(seen, expected);
}

#[test]
fn close_stdin_gives_eof_with_an_exact_count() {
    let exec = executor();
    let p = piped(&exec, "wc -c");
    let data = vec![b'x'; 3 * 1024 * 1024 + 7];
    rt().block_on(async { p.write_stdin(&data).await.unwrap() });
    assert!(p.close_stdin().unwrap());
    assert_eq!(read_all(&p).trim(), (3 * 1024 * 1024 + 7).to_string());
}

#[test]
fn several_mebibytes_arrive_byte_exact() {
    let exec = executor();
    let dir = temp_dir("stdin-exact");
    let out = dir.join("out");
    let p = piped(&exec, &format!("cat > '{}'", out.display()));
    // Every byte value, in a pattern that a lost or repeated chunk breaks.
    let data: Vec<u8> = (0..6 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    // Half through the blocking-style calls, half through the async write.
    let (a, b) = data.split_at(data.len() / 2 + 12_345);
    write_all_polling(&p, a);
    rt().block_on(async { p.write_stdin(b).await.unwrap() });
    p.close_stdin().unwrap();
    settled(&p);
    assert_eq!(p.exit_code(), Some(0));
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the bytes differ");
}

#[test]
fn a_slow_reader_applies_back_pressure_with_bounded_memory() {
    let exec = executor();
    let dir = temp_dir("stdin-slow");
    let gate = dir.join("gate");
    let out = dir.join("out");
    // Reads nothing until the gate exists, then everything.
    let p = piped(
        &exec,
        &format!(
            "while [ ! -e '{}' ]; do sleep 0.01; done; cat > '{}'",
            gate.display(),
            out.display()
        ),
    );
    let data = vec![b'z'; 8 * 1024 * 1024];
    let (tx, rx) = mpsc::channel();
    p.write_stdin_with(data.clone(), move |r| tx.send(r).unwrap());
    // The pipe and then the buffer fill up; the write waits for the reader.
    assert!(
        eventually(LONG, || p.stdin_buffered() == STDIN_BUFFER_BYTES),
        "the buffer never filled: {}",
        p.stdin_buffered()
    );
    assert_eq!(
        p.try_write_stdin(b"more").unwrap(),
        0,
        "an ordered write is waiting"
    );
    assert!(rx.try_recv().is_err(), "the write completed although nobody read");
    assert!(!p.wait_stdin_writable(Some(Duration::ZERO)).unwrap());
    for _ in 0..20 {
        assert!(p.stdin_buffered() <= STDIN_BUFFER_BYTES);
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(&gate, "").unwrap();
    rx.recv_timeout(LONG).unwrap().unwrap();
    p.close_stdin().unwrap();
    settled(&p);
    assert_eq!(std::fs::metadata(&out).unwrap().len(), data.len() as u64);
}

#[test]
fn writes_are_ordered_and_never_interleaved() {
    let exec = executor();
    let dir = temp_dir("stdin-order");
    let out = dir.join("out");
    let p = piped(&exec, &format!("cat > '{}'", out.display()));
    let (tx, rx) = mpsc::channel();
    let chunks: Vec<Vec<u8>> = (0..8u8).map(|i| vec![b'a' + i; 300_000]).collect();
    for c in &chunks {
        let tx = tx.clone();
        p.write_stdin_with(c.clone(), move |r| tx.send(r).unwrap());
    }
    for _ in &chunks {
        rx.recv_timeout(LONG).unwrap().unwrap();
    }
    p.close_stdin().unwrap();
    settled(&p);
    assert!(
        std::fs::read(&out).unwrap() == chunks.concat(),
        "chunks interleaved or reordered"
    );
}

#[test]
fn writing_after_exit_after_close_or_without_a_pipe_is_a_clear_error() {
    let exec = executor();
    let p = piped(&exec, "true");
    settled(&p);
    let e = p.try_write_stdin(b"late").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("cannot write to the stdin of {}: it has exited", p.id())
    );
    assert_eq!(stdin_error(e), StdinEnd::Exited);
    assert_eq!(
        stdin_error(rt().block_on(p.write_stdin(b"late")).unwrap_err()),
        StdinEnd::Exited
    );
    assert!(!p.close_stdin().unwrap());

    let p = piped(&exec, "cat >/dev/null; sleep 30");
    p.try_write_stdin(b"x").unwrap();
    assert!(p.close_stdin().unwrap());
    assert_eq!(
        stdin_error(p.try_write_stdin(b"y").unwrap_err()),
        StdinEnd::Closed
    );
    assert!(
        p.wait_stdin_writable(Some(Duration::ZERO)).unwrap(),
        "a closed stdin answers at once"
    );
    assert!(p.kill());

    let p = exec.start(&spec(&exec, "sleep 30")).unwrap();
    assert!(!p.has_stdin_pipe());
    assert_eq!(
        stdin_error(p.try_write_stdin(b"x").unwrap_err()),
        StdinEnd::NotPiped
    );
    assert_eq!(stdin_error(p.close_stdin().unwrap_err()), StdinEnd::NotPiped);
    assert!(p.kill());
    exec.dispose_blocking().unwrap();
}

#[test]
fn a_command_that_closes_its_stdin_gives_an_error_not_a_signal() {
    let exec = executor();
    // Closes fd 0 at once, then keeps running: only EPIPE can end the writes.
    let p = piped(&exec, "exec 0<&-; echo closed; sleep 30");
    let mut seen = String::new();
    read_until(&p, &mut seen, "closed\n");
    let big = vec![b'q'; 4 * 1024 * 1024];
    let e = rt().block_on(p.write_stdin(&big)).unwrap_err();
    assert_eq!(stdin_error(e), StdinEnd::Broken);
    assert_eq!(p.status(), Status::Running, "the command is not harmed");
    assert!(p.kill());
    settled(&p);
}

#[test]
fn the_pipe_and_bytes_exclude_each_other_and_run_needs_a_hand_over() {
    let exec = executor();
    let mut req = Request::new("cat");
    req.stdin_pipe = true;
    req.stdin = Some(b"x".to_vec());
    assert_eq!(
        exec.resolve(req).unwrap_err().to_string(),
        "request.stdin is either bytes or a pipe, not both"
    );
    let mut req = Request::new("cat");
    req.stdin_pipe = true;
    let s = exec.resolve(req).unwrap();
    let e = exec.run_blocking(&s, None).unwrap_err();
    assert!(
        matches!(&e, DshError::InvalidArgument { field, .. } if field.name == FieldName::Stdin),
        "{e}"
    );
}

#[test]
fn the_child_sees_a_pipe_and_default_sigpipe() {
    let exec = executor();
    let p = piped(
        &exec,
        "[ -p /dev/stdin ] && echo fifo; grep SigIgn /proc/self/status; grep SigBlk /proc/self/status",
    );
    let out = read_all(&p);
    assert!(out.starts_with("fifo\n"), "{out}");
    // SIGPIPE is signal 13: bit 12 of the masks.
    for line in out.lines().skip(1) {
        let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
        assert_eq!(mask & (1 << 12), 0, "{line}");
    }
}

fn handing_over(exec: &Executor, command: &str, timeout_ms: u32) -> Spec {
    let mut req = Request::new(command);
    req.timeout_ms = n(timeout_ms);
    req.on_expiry = Some(OnExpiry::Background);
    exec.resolve(req).unwrap()
}

/// `1\n2\n…count\n`.
fn counting(count: u32) -> String {
    (1..=count).map(|i| format!("{i}\n")).collect()
}

/// Prints 1..=count, pausing regularly so it runs well past a short timeout.
fn counter(count: u32) -> String {
    format!("for ((i=1;i<={count};i++)); do echo $i; if ((i%500==0)); then sleep 0.05; fi; done")
}

#[test]
fn a_handed_over_run_continues_without_loss_or_duplication() {
    // Windows big enough that no read is lossy, however late it comes.
    let exec = executor_with(|c| c.max_output_bytes = n(1 << 20));
    let count = 20_000;
    let r = exec
        .run_blocking(&handing_over(&exec, &counter(count), 200), None)
        .unwrap();
    assert!(r.timed_out && !r.aborted, "{r:?}");
    assert_eq!((r.exit_code, r.signal.as_deref()), (None, None));
    let id = r.background_id.clone().expect("handed over");
    assert!(
        !r.stdout.text.is_empty(),
        "output before the timeout is in the result"
    );
    let p = exec.get(&id).expect("registered");
    assert_eq!(p.command(), counter(count));
    let mut all = r.stdout.text.clone();
    settled(&p);
    let rest = p.read_output();
    assert!(!rest.lossy);
    all.push_str(&rest.delta);
    assert_eq!(p.status(), Status::Completed);
    assert_eq!(p.exit_code(), Some(0));
    assert!(
        all == counting(count),
        "lost or repeated output across the hand-over"
    );
}

#[test]
fn a_truncated_result_hands_over_with_reads_continuing_after_it() {
    let exec = executor_with(|c| c.max_output_bytes = n(1 << 20));
    let count = 20_000;
    let mut req = Request::new(counter(count));
    req.timeout_ms = n(200);
    req.stdout_max_bytes = n(64);
    req.on_expiry = Some(OnExpiry::Background);
    let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
    let id = r.background_id.clone().expect("handed over");
    assert!(r.stdout.truncated);
    let p = exec.get(&id).unwrap();
    settled(&p);
    let rest = p.read_output();
    // The result's tail and the reads meet exactly: tail + rest ends the
    // sequence and the complete stream is in the spill file.
    let joined = format!("{}{}", r.stdout.text, rest.delta);
    assert!(counting(count).ends_with(&joined), "tail and reads do not meet");
    let spill = r.stdout.spill_path.clone().expect("spilled");
    assert_eq!(rest.stdout_spill_path.as_deref(), Some(spill.as_str()));
    assert!(std::fs::read_to_string(&spill).unwrap() == counting(count));
}

#[test]
fn a_character_cut_by_the_hand_over_is_delivered_whole_by_the_next_read() {
    let exec = executor();
    let r = exec
        .run_blocking(
            &handing_over(&exec, r"printf 'a\xc3'; sleep 1; printf '\xa9b'", 200),
            None,
        )
        .unwrap();
    assert_eq!(r.stdout.text, "a");
    let p = exec.get(r.background_id.as_deref().unwrap()).unwrap();
    assert_eq!(read_all(&p), "éb");
}

#[test]
fn the_default_still_kills_and_a_quick_command_is_not_handed_over() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    let mut req = Request::new("sleep 30");
    req.timeout_ms = n(100);
    let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
    assert!(r.timed_out);
    assert_eq!(r.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(r.background_id, None);
    assert!(exec.list().is_empty());

    let r = exec
        .run_blocking(&handing_over(&exec, "echo quick; exit 3", 30_000), None)
        .unwrap();
    assert_eq!(
        (r.exit_code, r.timed_out, r.background_id.as_deref()),
        (Some(3), false, None)
    );
    assert_eq!(r.stdout.text, "quick\n");
    assert!(exec.list().is_empty());
}

#[test]
fn a_run_waiting_for_input_is_handed_over_with_its_stdin() {
    let exec = executor();
    let mut req = Request::new("echo question; read -r answer; echo \"got $answer\"");
    req.timeout_ms = n(200);
    req.on_expiry = Some(OnExpiry::Background);
    req.stdin_pipe = true;
    let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
    assert_eq!(r.stdout.text, "question\n");
    let p = exec.get(r.background_id.as_deref().unwrap()).unwrap();
    assert!(p.has_stdin_pipe());
    assert_eq!(p.try_write_stdin(b"yes\n").unwrap(), 4);
    assert_eq!(read_all(&p), "got yes\n");
    assert_eq!(p.exit_code(), Some(0));
}

/// The pid a handed-over `echo $$` printed: in the result, or (on a slow
/// machine, where the timeout came first) in the process's output after.
fn first_line_pid(r: &RunResult, p: &Process) -> i32 {
    let mut seen = r.stdout.text.clone();
    if !seen.contains('\n') {
        read_until(p, &mut seen, "\n");
    }
    seen.trim().parse().unwrap()
}

#[test]
fn listeners_hear_a_handed_over_process_and_dispose_ends_it() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    let (tx, rx) = mpsc::channel();
    exec.on_task_done(std::sync::Arc::new(move |p: &Process| {
        tx.send(p.id().to_owned()).unwrap()
    }));
    let r = exec
        .run_blocking(&handing_over(&exec, "echo $$; exec sleep 60", 100), None)
        .unwrap();
    let id = r.background_id.clone().unwrap();
    let p = exec.get(&id).unwrap();
    let pid = first_line_pid(&r, &p);
    assert_eq!(p.status(), Status::Running);
    assert!(alive(pid));
    assert!(p.kill());
    settled(&p);
    assert_eq!(rx.recv_timeout(LONG).unwrap(), id);
    assert!(!alive(pid));

    let r = exec
        .run_blocking(&handing_over(&exec, "echo $$; sleep 60 & wait", 100), None)
        .unwrap();
    let p = exec.get(r.background_id.as_deref().unwrap()).unwrap();
    let pid = first_line_pid(&r, &p);
    exec.dispose_blocking().unwrap();
    assert!(p.is_settled());
    assert_eq!(p.status(), Status::Killed);
    assert!(!alive(pid));
}

#[test]
fn cancelling_before_the_hand_over_aborts_after_it_kills() {
    let exec = executor_with(|c| c.grace_ms = n(300));
    let token = CancelToken::new();
    let s = handing_over(&exec, "sleep 60", 60_000);
    let t = token.clone();
    let waiter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        t.cancel();
    });
    let r = exec.run_blocking(&s, Some(&token)).unwrap();
    waiter.join().unwrap();
    assert!(r.aborted && !r.timed_out && r.background_id.is_none(), "{r:?}");

    let token = CancelToken::new();
    let r = exec
        .run_blocking(&handing_over(&exec, "echo up; sleep 60", 100), Some(&token))
        .unwrap();
    let p = exec.get(r.background_id.as_deref().unwrap()).unwrap();
    assert_eq!(p.status(), Status::Running);
    token.cancel();
    settled(&p);
    assert_eq!(p.status(), Status::Killed);
}

#[test]
fn async_run_hands_over_too() {
    let exec = executor();
    let s = handing_over(&exec, "echo before; sleep 0.5; echo after", 100);
    let r = rt().block_on(exec.run(&s, None)).unwrap();
    assert_eq!(r.stdout.text, "before\n");
    let p = exec.get(r.background_id.as_deref().unwrap()).unwrap();
    assert_eq!(read_all(&p), "after\n");
}

// ---- review: hostile cases -------------------------------------------------

#[test]
fn close_while_a_write_waits_lets_that_write_finish_whole_then_closes() {
    // "Writes are written whole" and "close once everything written so far
    // is delivered": before, the close failed the waiting write with
    // `closed` while a prefix of it had been delivered already.
    let exec = executor();
    let dir = temp_dir("stdin-close-pending");
    let gate = dir.join("gate");
    let p = piped(
        &exec,
        &format!("while [ ! -e '{}' ]; do sleep 0.01; done; wc -c", gate.display()),
    );
    let (tx, rx) = mpsc::channel();
    p.write_stdin_with(vec![b'w'; 4 << 20], move |r| tx.send(r).unwrap());
    assert!(eventually(LONG, || p.stdin_buffered() == STDIN_BUFFER_BYTES));
    assert!(p.close_stdin().unwrap());
    assert!(!p.close_stdin().unwrap(), "the close was asked for already");
    // Later writes are refused at once; the waiting one still waits.
    assert_eq!(
        stdin_error(p.try_write_stdin(b"late").unwrap_err()),
        StdinEnd::Closed
    );
    assert!(
        rx.try_recv().is_err(),
        "the waiting write settled before the command read"
    );
    std::fs::write(&gate, "").unwrap();
    rx.recv_timeout(LONG)
        .expect("the pending write never settled")
        .unwrap();
    // All of it arrives, then EOF.
    assert_eq!(read_all(&p).trim(), (4 << 20).to_string());
    assert_eq!(p.exit_code(), Some(0));
}

#[test]
fn zero_byte_writes_take_nothing_and_still_say_when_stdin_ended() {
    let exec = executor();
    let p = piped(&exec, "cat");
    assert_eq!(p.try_write_stdin(&[]).unwrap(), 0);
    rt().block_on(p.write_stdin(&[])).unwrap();
    let (tx, rx) = mpsc::channel();
    p.write_stdin_with(Vec::new(), move |r| tx.send(r).unwrap());
    rx.recv_timeout(LONG).unwrap().unwrap();
    assert!(p.close_stdin().unwrap());
    assert_eq!(stdin_error(p.try_write_stdin(&[]).unwrap_err()), StdinEnd::Closed);
    assert_eq!(
        stdin_error(rt().block_on(p.write_stdin(&[])).unwrap_err()),
        StdinEnd::Closed
    );
    assert_eq!(read_all(&p), "");
}

#[test]
fn a_command_that_exits_with_input_still_buffered_has_exited_not_closed_its_stdin() {
    // docs/running.md: `exited` when the command has exited, `broken` when
    // it closed its end of the pipe. `sleep` never reads nor closes its
    // stdin: the bytes still waiting when it exits (or is killed) end the
    // pipe because it exited.
    let exec = executor();
    for (command, kill) in [("sleep 0.3", false), ("sleep 30", true)] {
        let p = piped(&exec, command);
        let big = vec![b'b'; 1 << 20];
        let (tx, rx) = mpsc::channel();
        p.write_stdin_with(big, move |r| tx.send(r).unwrap());
        if kill {
            assert!(p.kill());
        }
        let r = rx.recv_timeout(LONG).expect("the write settles");
        assert_eq!(stdin_error(r.unwrap_err()), StdinEnd::Exited, "{command}");
        settled(&p);
        assert_eq!(
            stdin_error(p.try_write_stdin(b"x").unwrap_err()),
            StdinEnd::Exited,
            "{command}"
        );
    }
    exec.dispose_blocking().unwrap();
}

#[test]
fn writes_racing_the_exit_end_with_a_reason_and_never_hang() {
    let exec = executor();
    let big = vec![b'r'; 1 << 20];
    for i in 0..40 {
        // Reads a little (or nothing), then exits while writes are pending.
        let command = if i % 2 == 0 {
            "head -c 1000 >/dev/null"
        } else {
            "exit 0"
        };
        let p = piped(&exec, command);
        let (tx, rx) = mpsc::channel();
        for _ in 0..3 {
            let tx = tx.clone();
            p.write_stdin_with(big.clone(), move |r| tx.send(r).unwrap());
        }
        let direct = rt().block_on(async {
            tokio::time::timeout(LONG, p.write_stdin(&big))
                .await
                .expect("write hung")
        });
        // The command's exit is what ended its stdin.
        assert_eq!(stdin_error(direct.unwrap_err()), StdinEnd::Exited, "{command}");
        for _ in 0..3 {
            let r = rx.recv_timeout(LONG).expect("a queued write never settled");
            assert_eq!(stdin_error(r.unwrap_err()), StdinEnd::Exited, "{command}");
        }
        settled(&p);
        assert_eq!(p.stdin_buffered(), 0, "dropped bytes are freed");
    }
}

#[test]
fn many_concurrent_writers_lose_nothing_and_ordered_writes_stay_whole() {
    let exec = executor();
    let dir = temp_dir("stdin-many");
    let out = dir.join("out");
    let p = piped(&exec, &format!("cat > '{}'", out.display()));
    const CHUNK: usize = 50_000;
    let mut threads = Vec::new();
    for t in 0..12u8 {
        let p = p.clone();
        threads.push(std::thread::spawn(move || {
            let byte = b'A' + t;
            for _ in 0..4 {
                let chunk = vec![byte; CHUNK];
                match t % 3 {
                    0 => rt().block_on(p.write_stdin(&chunk)).unwrap(),
                    1 => {
                        let (tx, rx) = mpsc::channel();
                        p.write_stdin_with(chunk, move |r| tx.send(r).unwrap());
                        rx.recv_timeout(LONG).unwrap().unwrap();
                    }
                    _ => write_all_polling(&p, &chunk),
                }
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    p.close_stdin().unwrap();
    settled(&p);
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), 12 * 4 * CHUNK);
    for t in 0..12u8 {
        let byte = b'A' + t;
        assert_eq!(
            got.iter().filter(|&&b| b == byte).count(),
            4 * CHUNK,
            "{}",
            byte as char
        );
        if t % 3 != 2 {
            // Ordered writes: each in runs that are whole multiples of a chunk.
            let mut i = 0;
            while i < got.len() {
                let run = got[i..].iter().take_while(|&&b| b == got[i]).count();
                if got[i] == byte {
                    assert_eq!(run % CHUNK, 0, "an ordered write of {} was split", byte as char);
                }
                i += run;
            }
        }
    }
}

/// `é1\né2\n…` on stdout (each `é` written as two separate writes, so a
/// read can end between its bytes) and `e1\ne2\n…` on stderr.
fn two_stream_counter(count: u32) -> String {
    format!(
        r"for ((i=1;i<={count};i++)); do printf '\xc3'; printf '\xa9%d\n' $i; printf 'e%d\n' $i >&2; if ((i%300==0)); then sleep 0.05; fi; done"
    )
}

#[test]
fn a_hand_over_amid_heavy_output_on_both_streams_loses_and_repeats_nothing() {
    let exec = executor_with(|c| c.max_output_bytes = n(4 << 20));
    let count = 6000;
    let expected_out: String = (1..=count).map(|i| format!("é{i}\n")).collect();
    let expected_err: String = (1..=count).map(|i| format!("e{i}\n")).collect();
    for stdout_max in [256u32, 4 << 20] {
        let mut req = Request::new(two_stream_counter(count));
        req.timeout_ms = n(200);
        req.stdout_max_bytes = n(stdout_max);
        req.on_expiry = Some(OnExpiry::Background);
        let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
        let id = r.background_id.clone().expect("handed over");
        assert!(!r.stdout.text.contains('\u{fffd}'), "{:?}", r.stdout.text);
        let p = exec.get(&id).unwrap();
        settled(&p);
        assert_eq!(p.exit_code(), Some(0));
        let rest = p.read_output();
        assert!(!rest.lossy);
        let (rest_out, rest_err) = rest.delta.split_once("[stderr]\n").unwrap_or((&rest.delta, ""));
        let out = format!("{}{}", r.stdout.text, rest_out);
        let err = format!("{}{}", r.stderr.text, rest_err);
        assert!(!out.contains('\u{fffd}'));
        if stdout_max == 256 {
            assert!(r.stdout.truncated);
            assert!(expected_out.ends_with(&out), "tail and reads do not meet");
            let spill = r.stdout.spill_path.clone().expect("spilled");
            assert!(std::fs::read_to_string(&spill).unwrap() == expected_out);
        } else {
            assert!(out == expected_out, "stdout lost or repeated bytes");
        }
        assert!(err == expected_err, "stderr lost or repeated bytes");
    }
}

#[test]
fn cancellation_racing_the_hand_over_leaves_nothing_running() {
    let exec = executor_with(|c| c.grace_ms = n(200));
    for i in 0..30u64 {
        let token = CancelToken::new();
        let t = token.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(40 + i % 20));
            t.cancel();
        });
        let r = exec
            .run_blocking(&handing_over(&exec, "echo $$; exec sleep 60", 50), Some(&token))
            .unwrap();
        canceller.join().unwrap();
        let pid: i32 = r.stdout.text.trim().parse().unwrap_or(0);
        match &r.background_id {
            Some(id) => {
                assert!(r.timed_out && !r.aborted);
                let p = exec.get(id).unwrap();
                settled(&p);
                assert_eq!(p.status(), Status::Killed);
            }
            None => assert!(r.aborted && !r.timed_out, "{r:?}"),
        }
        if pid > 0 {
            assert!(eventually(LONG, || !alive(pid)), "{pid} survived");
        }
    }
    assert!(exec.list().iter().all(|p| p.is_settled()));
}

#[test]
fn a_handed_over_process_is_listed_with_its_command_and_owner_and_retention_applies() {
    let exec = executor_with(|c| c.retain_settled = n(1));
    let mut req = Request::new("seq 1 100; read -r x; seq 1 3000");
    req.timeout_ms = n(100);
    req.stdout_max_bytes = n(16);
    req.owner = Some("agent-7".into());
    req.stdin_pipe = true;
    req.on_expiry = Some(OnExpiry::Background);
    let s = exec.resolve(req).unwrap();
    let r = exec.run_blocking(&s, None).unwrap();
    let id = r.background_id.clone().unwrap();
    let listed = exec.list();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id(), id);
    assert_eq!(listed[0].command(), s.command);
    assert_eq!(exec.owner_of(&id).unwrap().as_deref(), Some("agent-7"));
    let p = exec.get(&id).unwrap();
    p.close_stdin().unwrap();
    settled(&p);
    let spill = r.stdout.spill_path.clone().expect("the result spilled");
    let expected: String = (1..=100).chain(1..=3000).map(|i| format!("{i}\n")).collect();
    assert!(std::fs::read_to_string(&spill).unwrap() == expected);
    // Forgotten by retention: like any background process, its spill files
    // go, the result's included (docs/running.md, on_expiry).
    let q = exec.start(&spec(&exec, "true")).unwrap();
    settled(&q);
    assert!(exec.get(&id).is_none());
    assert!(!std::path::Path::new(&spill).exists());
}

#[test]
fn a_write_made_before_close_stdin_is_delivered_whatever_the_timing() {
    // The callback form hands the write to the core's threads; a close made
    // right after it, on this thread, must still come after it.
    let exec = executor();
    for round in 0..200 {
        let p = piped(&exec, "cat");
        let (tx, rx) = mpsc::channel();
        p.write_stdin_with(format!("round {round}").into_bytes(), move |r| {
            let _ = tx.send(r.is_ok());
        });
        assert!(p.close_stdin().unwrap());
        assert!(
            rx.recv_timeout(Duration::from_secs(30)).unwrap(),
            "round {round}: the write failed"
        );
        settled(&p);
        assert_eq!(read_all(&p), format!("round {round}"));
    }
}

#[test]
fn queued_writes_made_before_close_stdin_are_all_delivered_whole() {
    // Writes too big to be taken at once wait in the queue; a close made
    // right after them must wait for them too. Before, the close cut the
    // queue: a write answered "closed" had still delivered a prefix.
    let exec = executor();
    for round in 0..5 {
        let p = piped(&exec, "sleep 0.2; wc -c");
        let (tx, rx) = mpsc::channel();
        for byte in [b'a', b'b', b'c'] {
            let tx = tx.clone();
            p.write_stdin_with(vec![byte; 100_000], move |r| {
                let _ = tx.send(r.map_err(|e| e.to_string()));
            });
        }
        assert!(p.close_stdin().unwrap());
        assert!(
            matches!(p.try_write_stdin(b"late"), Err(DshError::StdinClosed { .. })),
            "round {round}: a write after the close was taken"
        );
        for _ in 0..3 {
            let outcome = rx.recv_timeout(Duration::from_secs(30)).unwrap();
            assert_eq!(
                outcome,
                Ok(()),
                "round {round}: a write made before the close failed"
            );
        }
        settled(&p);
        assert_eq!(read_all(&p).trim(), "300000", "round {round}");
    }
}

#[test]
fn a_blocking_write_loop_is_one_write_that_a_close_from_another_thread_waits_for() {
    // A host's own blocking loop (Python's write_stdin) takes what fits and
    // waits for room, many times; a close_stdin from another thread in
    // between must not cut it.
    let exec = executor();
    let p = piped(&exec, "sleep 0.3; wc -c");
    let data = vec![b'q'; 2 << 20];
    let writer_side = p.clone();
    let (began_tx, began) = mpsc::channel();
    let writing = std::thread::spawn(move || {
        let writer = writer_side.stdin_writer().unwrap();
        let mut rest = &data[..];
        let mut told = false;
        while !rest.is_empty() {
            let n = writer.try_write(rest).unwrap();
            rest = &rest[n..];
            if !told {
                began_tx.send(()).unwrap();
                told = true;
            }
            if n == 0 {
                writer.wait_writable(Some(Duration::from_millis(50))).unwrap();
            }
        }
    });
    began.recv_timeout(LONG).unwrap();
    assert!(p.close_stdin().unwrap());
    assert_eq!(
        stdin_error(p.try_write_stdin(b"late").unwrap_err()),
        StdinEnd::Closed
    );
    writing.join().expect("the blocking write was cut by the close");
    assert_eq!(read_all(&p).trim(), (2 << 20).to_string());
}
