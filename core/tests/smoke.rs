mod common;
use common::*;

#[test]
fn echo_and_exit_code() {
    let exec = executor();
    let r = run(&exec, "echo hello; echo oops >&2; exit 3");
    assert_eq!(r.exit_code, Some(3));
    assert_eq!(r.stdout.text, "hello\n");
    assert_eq!(r.stderr.text, "oops\n");
    assert_eq!(r.signal, None);
    assert!(!r.timed_out && !r.aborted);
}
