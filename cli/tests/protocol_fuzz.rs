//! Malformed input of every kind against `dsh serve`: byte noise, broken
//! and truncated JSON, invalid UTF-8, wrong types and unknown keys in every
//! method's parameters, absurd numbers, deep nesting, an over-long line.
//! The server must answer each request it can read with exactly one
//! message, never crash, and never touch the command already running.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

mod support;
use support::rpc::Rpc;

/// xorshift64*: reproducible noise without a crate; the seed is printed.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Every method the server has (from its own lists, so a new one is
/// fuzzed too), and names it does not.
fn methods() -> &'static [&'static str] {
    static ALL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let served = dsh_cli::protocol::session::METHODS
            .iter()
            .chain(dsh_cli::protocol::terminals::METHODS);
        served
            .copied()
            .chain(["", "Run", "$/cancel", "terminal_"])
            .collect()
    })
}

const KEYS: &[&str] = &[
    "request",
    "spec",
    "id",
    "config",
    "run_id",
    "stream",
    "resume",
    "data",
    "data_base64",
    "timeout_ms",
    "command",
    "workdir",
    "limits",
    "env",
    "stdin_pipe",
    "protocol_version",
    "sandbox_policy",
    "on_expiry",
    "stdout_max_bytes",
];

/// A JSON value of any type, sometimes absurd.
fn value(n: &mut Noise, depth: usize) -> Value {
    match n.below(if depth > 3 { 9 } else { 12 }) {
        0 => Value::Null,
        1 => json!(n.below(2) == 0),
        2 => json!(n.next() as i64),
        3 => json!(*n.pick(&[0.5, -1.0, 1e308, -0.0, 4e15, 9_007_199_254_740_993.0])),
        4 => json!(*n.pick(&[
            "",
            "bash-1",
            "\u{0}",
            "é\u{fffd}",
            "../..",
            "kill",
            "AAAA===",
            "x".repeat(3000).as_str()
        ])),
        5 => json!(n.below(1 << 20)),
        6 => json!(*n.pick(KEYS)),
        7 => json!(u64::MAX),
        8 => json!("true"),
        9 => Value::Array((0..n.below(4)).map(|_| value(n, depth + 1)).collect()),
        _ => object(n, depth + 1),
    }
}

fn object(n: &mut Noise, depth: usize) -> Value {
    let mut m = Map::new();
    for _ in 0..n.below(5) {
        m.insert((*n.pick(KEYS)).to_owned(), value(n, depth + 1));
    }
    Value::Object(m)
}

/// Parameters that can do nothing: a method's call with one key it does
/// not take (refused before any effect), or wrong-typed values where a
/// right one could act.
fn harmless_params(n: &mut Noise) -> Value {
    let mut p = match object(n, 0) {
        Value::Object(m) => m,
        _ => unreachable!(),
    };
    p.insert("zz_not_a_parameter".into(), value(n, 0));
    Value::Object(p)
}

/// One line of input: noise of some kind.
fn line(n: &mut Noise, id: u64) -> Vec<u8> {
    let call =
        json!({ "jsonrpc": "2.0", "id": id, "method": *n.pick(methods()), "params": harmless_params(n) });
    let text = call.to_string().into_bytes();
    match n.below(10) {
        0 => (0..n.below(200))
            .map(|_| n.next() as u8)
            .filter(|b| *b != b'\n')
            .collect(),
        1 => text[..n.below(text.len())].to_vec(),
        2 => {
            let mut t = text;
            // Not in `{"id":N,`: a flipped digit would make it another
            // line's id, and the check below that each id is answered
            // once would see two.
            let keep = t.iter().position(|b| *b == b',').map_or(0, |c| c + 1);
            for _ in 0..1 + n.below(4) {
                let i = keep + n.below(t.len() - keep);
                t[i] = (n.next() as u8).max(1);
                if t[i] == b'\n' {
                    t[i] = b' ';
                }
            }
            t
        }
        3 => format!("[{}]", String::from_utf8_lossy(&text)).into_bytes(),
        4 => b"\xff\xfe{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"list\"}".to_vec(),
        5 => format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
        // Params that are not an object (by position, or a lone value).
        6 => {
            let params = match value(n, 0) {
                Value::Object(_) => Value::Array(vec![value(n, 2)]),
                v => v,
            };
            json!({ "jsonrpc": "2.0", "id": id, "method": *n.pick(methods()), "params": params })
                .to_string()
                .into_bytes()
        }
        7 => json!({ "jsonrpc": *n.pick(&["1.0", "2", ""]), "id": id, "method": "list" })
            .to_string()
            .into_bytes(),
        8 => json!({ "jsonrpc": "2.0", "id": format!("v8-{}", n.below(5)), "method": "list", "result": 1 })
            .to_string()
            .into_bytes(),
        _ => text,
    }
}

#[test]
fn malformed_input_never_crashes_the_server_nor_touches_commands() {
    // A new seed each run (DSH_FUZZ_SEED=0x… replays one), printed so a
    // failure can be replayed.
    let seed = match std::env::var("DSH_FUZZ_SEED") {
        Ok(s) => u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("DSH_FUZZ_SEED is hex"),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    };
    eprintln!("protocol fuzz seed {seed:#x} (DSH_FUZZ_SEED replays it)");
    let mut n = Noise(seed | 1);
    let mut rpc = Rpc::local();
    rpc.initialize(json!({ "grace_ms": 500 }));
    // The command that must come through untouched.
    let spec = rpc.spec(json!({ "command": "cat", "stdin_pipe": true }));
    let id = rpc.ok("start", json!({ "spec": spec }))["process"]["id"].clone();
    rpc.ok("write_stdin", json!({ "id": id, "data": "before\n" }));

    let rounds = 3_000u64;
    for i in 0..rounds {
        let mut bytes = line(&mut n, 10_000 + i);
        bytes.retain(|b| *b != b'\n');
        if let Ok(dump) = std::env::var("DSH_FUZZ_DUMP") {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dump)
                .unwrap();
            f.write_all(&bytes).unwrap();
            f.write_all(b"\n").unwrap();
        }
        rpc.send_line(&bytes);
    }
    // Well-formed calls with hostile values, aimed at a throwaway process
    // (never at the one that must come through): numbers past any clock
    // or offset, odd ids and strings, every field of a request.
    let spec = rpc.spec(json!({ "command": "sleep 300", "stdin_pipe": true }));
    rpc.ok("start", json!({ "spec": spec, "id": "throwaway" }));
    for i in 0..rounds {
        let v = value(&mut n, 1);
        let (method, params) = match n.below(7) {
            0 => ("wait", json!({ "id": "throwaway", "timeout_ms": v })),
            1 => (
                "read_from",
                json!({ "id": "throwaway", "stream": *n.pick(&["stdout", "stderr"]), "from": v }),
            ),
            2 => ("get", json!({ "id": v })),
            3 => ("owner_of", json!({ "id": v })),
            4 => ("write_stdin", json!({ "id": "throwaway", "data_base64": v })),
            5 => ("cancel", json!({ "run_id": v })),
            _ => {
                let mut request = match object(&mut n, 1) {
                    Value::Object(m) => m,
                    _ => unreachable!(),
                };
                request.retain(|k, _| k != "command" && k != "stdin_pipe");
                request.insert("command".into(), json!(*n.pick(&["true", ":", "exit 3"])));
                ("resolve", json!({ "request": request }))
            }
        };
        let id = 200_000 + i;
        rpc.send_line(
            json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
                .to_string()
                .as_bytes(),
        );
    }
    // A line longer than any message may be, then the server still answers.
    let mut long = b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"list\",\"params\":{\"pad\":\"".to_vec();
    long.resize(49 << 20, b'a');
    rpc.send_line(&long);
    let alive = rpc.call("get", json!({ "id": id }));
    assert_eq!(
        alive["result"]["process"]["status"], "running",
        "the command was touched: {alive}"
    );
    rpc.ok("write_stdin", json!({ "id": id, "data": "after\n" }));
    rpc.ok("close_stdin", json!({ "id": id }));
    rpc.ok("wait", json!({ "id": id }));
    // Calls are answered in order, so every answer to the noise came
    // before `get`'s: each is an error, none a success, none twice. (The
    // hostile but well-formed calls may succeed; waits answer later.)
    rpc.others
        .retain(|a| a["id"].as_u64().is_none_or(|id| id < 200_000));
    assert!(
        rpc.others.len() as u64 <= rounds + 1,
        "{} answers to {rounds} lines",
        rpc.others.len()
    );
    let mut ids = std::collections::HashSet::new();
    for answer in &rpc.others {
        assert!(answer.get("error").is_some(), "noise succeeded: {answer}");
        // The noise's own ids are 10 000 and up, one per line (variant 8
        // sends ids of its own, strings that may repeat).
        if let Some(id) = answer["id"]
            .as_u64()
            .filter(|id| (10_000..10_000 + rounds).contains(id))
        {
            assert!(ids.insert(id), "answered twice: {answer}");
        }
    }
    // The only notification: the command's own end, once its input closed.
    assert!(
        rpc.notes
            .iter()
            .all(|n| n["params"]["process"]["id"] == id && n["params"]["process"]["exit_code"] == 0),
        "noise made a notification: {:?}",
        rpc.notes
    );
    let out = rpc.ok("read_output", json!({ "id": id }));
    assert_eq!(out["delta"], "before\nafter\n");
    let listed = rpc.ok("list", json!({}))["processes"].as_array().unwrap().len();
    assert_eq!(listed, 2, "noise started a process");
}
