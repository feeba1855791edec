//! A multi-byte character is never split: not by a tail cut, not by a
//! lossy read window, not by a read boundary. Output is written one byte at
//! a time so that every cut point is reachable.
mod common;
use common::*;

use std::time::Duration;

use dsh_core::*;

/// A bash loop that writes `reps` copies of `ch` one byte per `printf`.
fn bytewise(ch: char, reps: usize) -> String {
    let bytes: String = ch
        .to_string()
        .bytes()
        .map(|b| format!("printf '\\{b:03o}'; "))
        .collect();
    format!("for i in $(seq {reps}); do {bytes}done")
}

#[test]
fn tail_cuts_land_on_character_boundaries() {
    let exec = executor();
    for (ch, cap) in [
        ('é', 11u64),
        ('€', 10),
        ('€', 11),
        ('😀', 9),
        ('😀', 10),
        ('😀', 11),
    ] {
        let mut req = Request::new(bytewise(ch, 40));
        req.stdout_max_bytes = n(cap);
        let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
        assert!(r.stdout.truncated);
        assert!(
            !r.stdout.text.contains('\u{FFFD}'),
            "{ch} cap {cap}: {:?}",
            r.stdout.text
        );
        assert!(
            r.stdout.text.chars().all(|c| c == ch),
            "{ch} cap {cap}: {:?}",
            r.stdout.text
        );
        assert!(r.stdout.text.len() <= cap as usize && r.stdout.text.len() > cap as usize - ch.len_utf8());
        // The spill file is the stream itself, byte for byte.
        let spilled = std::fs::read_to_string(r.stdout.spill_path.unwrap()).unwrap();
        assert_eq!(spilled, ch.to_string().repeat(40));
    }
}

#[test]
fn lossy_read_windows_start_on_character_boundaries() {
    let exec = executor_with(|c| c.max_output_bytes = n(10));
    let p = exec.start(&spec(&exec, &bytewise('😀', 30))).unwrap();
    assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    let r = p.read_output();
    assert!(r.lossy);
    assert_eq!(r.delta, "😀😀");
}

#[test]
fn read_boundaries_never_split_a_character() {
    let exec = executor();
    // Slow, byte-at-a-time output read as fast as possible: reads land
    // between the bytes of a character many times.
    let cmd = "for i in $(seq 25); do for b in '\\360' '\\237' '\\230' '\\200' '\\303' '\\251' 'a'; \
               do printf \"$b\"; sleep 0.002; done; done";
    let p = exec.start(&spec(&exec, cmd)).unwrap();
    let mut deltas = Vec::new();
    while !p.is_settled() {
        let d = p.read_output().delta;
        if !d.is_empty() {
            deltas.push(d);
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    deltas.push(p.read_output().delta);
    for d in &deltas {
        assert!(!d.contains('\u{FFFD}'), "a read split a character: {d:?}");
    }
    assert_eq!(deltas.concat(), "😀éa".repeat(25));
    assert!(
        deltas.len() > 10,
        "reads interleaved with the output ({} reads)",
        deltas.len()
    );
}

#[test]
fn invalid_bytes_are_replaced_and_a_truncated_final_character_is_flushed() {
    let exec = executor();
    let r = run(&exec, "printf 'ok\\377\\376end'");
    assert_eq!(r.stdout.text, "ok\u{FFFD}\u{FFFD}end");
    let p = exec.start(&spec(&exec, "printf 'x\\342\\202'")).unwrap();
    assert!(p.wait_timeout(Some(Duration::from_secs(30))).unwrap());
    assert_eq!(
        p.read_output().delta,
        "x\u{FFFD}",
        "held-back bytes are flushed once the stream ends"
    );
}
