//! Helpers for the CLI tests: running the built binary, and a minimal JSON
//! parser so `--json` output is checked as JSON rather than by substrings,
//! keys in the order written (serde_json's `Value` would sort them).

#![allow(dead_code)]

pub mod rpc;
pub mod sshd;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a test waits for a tool it started before it calls it hung.
pub const LIMIT: Duration = Duration::from_secs(60);

/// Waits for `child` at most [`LIMIT`]; past that it is killed and the
/// test fails naming `what`.
pub fn wait_bounded(child: &mut Child, what: &str) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > LIMIT {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("{what} did not end within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True while `pid` names a live (non-zombie) process.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !matches!(
            s.rsplit(')').next().unwrap_or("").trim_start().chars().next(),
            Some('Z' | 'X')
        )
    })
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn dsh() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dsh-cli"))
}

pub fn finish(out: Output) -> Run {
    Run {
        code: out
            .status
            .code()
            .unwrap_or_else(|| panic!("dsh-cli died: {:?}", out.status)),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

pub fn run(args: &[&str]) -> Run {
    run_with_stdin(args, b"")
}

pub fn run_with_stdin(args: &[&str], input: &[u8]) -> Run {
    let mut child = dsh()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dsh-cli");
    child.stdin.take().unwrap().write_all(input).unwrap();
    finish(child.wait_with_output().unwrap())
}

/// A fresh, empty directory for one test, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("dsh-cli-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    pub fn parse(text: &str) -> Json {
        let mut p = Parser {
            s: text.as_bytes(),
            i: 0,
        };
        let v = p.value();
        p.ws();
        assert_eq!(p.i, p.s.len(), "trailing text after JSON: {text}");
        v
    }

    /// `v["a"]["b"]` by a dotted path; panics if absent.
    pub fn at(&self, path: &str) -> &Json {
        path.split('.').fold(self, |v, key| match v {
            Json::Obj(fields) => {
                &fields
                    .iter()
                    .find(|(k, _)| k == key)
                    .unwrap_or_else(|| panic!("no key {key:?} in {v:?}"))
                    .1
            }
            _ => panic!("{key:?}: not an object: {v:?}"),
        })
    }

    pub fn keys(&self) -> Vec<&str> {
        match self {
            Json::Obj(fields) => fields.iter().map(|(k, _)| k.as_str()).collect(),
            _ => panic!("not an object: {self:?}"),
        }
    }

    pub fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            _ => panic!("not a string: {self:?}"),
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|b| b" \t\r\n".contains(b)) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &str) -> bool {
        let hit = self.s[self.i..].starts_with(lit.as_bytes());
        if hit {
            self.i += lit.len();
        }
        hit
    }

    fn value(&mut self) -> Json {
        self.ws();
        match self.s.get(self.i).copied() {
            Some(b'{') => {
                self.i += 1;
                let mut fields = Vec::new();
                self.ws();
                if !self.eat("}") {
                    loop {
                        self.ws();
                        let Json::Str(key) = self.value() else {
                            panic!("object key is not a string")
                        };
                        self.ws();
                        assert!(self.eat(":"), "expected ':' at {}", self.i);
                        fields.push((key, self.value()));
                        self.ws();
                        if self.eat("}") {
                            break;
                        }
                        assert!(self.eat(","), "expected ',' at {}", self.i);
                    }
                }
                Json::Obj(fields)
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if !self.eat("]") {
                    loop {
                        items.push(self.value());
                        self.ws();
                        if self.eat("]") {
                            break;
                        }
                        assert!(self.eat(","), "expected ',' at {}", self.i);
                    }
                }
                Json::Arr(items)
            }
            Some(b'"') => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    let rest = std::str::from_utf8(&self.s[self.i..]).expect("UTF-8");
                    let c = rest.chars().next().expect("unterminated string");
                    self.i += c.len_utf8();
                    match c {
                        '"' => break,
                        '\\' => {
                            let e = self.s[self.i];
                            self.i += 1;
                            out.push(match e {
                                b'"' => '"',
                                b'\\' => '\\',
                                b'/' => '/',
                                b'n' => '\n',
                                b'r' => '\r',
                                b't' => '\t',
                                b'b' => '\u{8}',
                                b'f' => '\u{c}',
                                b'u' => {
                                    let hex = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
                                    self.i += 4;
                                    char::from_u32(u32::from_str_radix(hex, 16).unwrap()).expect("BMP char")
                                }
                                _ => panic!("bad escape \\{}", e as char),
                            });
                        }
                        c if c < ' ' => panic!("unescaped control character {c:?} in a string"),
                        c => out.push(c),
                    }
                }
                Json::Str(out)
            }
            _ if self.eat("null") => Json::Null,
            _ if self.eat("true") => Json::Bool(true),
            _ if self.eat("false") => Json::Bool(false),
            _ => {
                let start = self.i;
                while self.s.get(self.i).is_some_and(|b| b"-+.eE0123456789".contains(b)) {
                    self.i += 1;
                }
                let num = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                Json::Num(
                    num.parse()
                        .unwrap_or_else(|_| panic!("bad JSON at {start}: {num:?}")),
                )
            }
        }
    }
}

/// Asserts `pid` is gone within `bound` of now (killing it if not, so a
/// failure leaves nothing behind).
pub fn gone_within(pid: i32, bound: Duration, what: &str) {
    let start = Instant::now();
    while alive(pid) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = start.elapsed();
    if alive(pid) {
        // SAFETY: kill(2) takes integers; clean up before failing.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(took < bound, "{what}: the command ran on {took:?}");
}
