//! The configuration's defaults are defined once, in `core/src/spec/config.rs`;
//! every place that restates one for a reader (the docs, Python's help, the
//! TypeScript and C declarations, the CLI's help) is checked against it here,
//! so a changed default cannot leave a stale number behind.

use std::path::Path;

use dsh_core::{
    DEFAULT_GRACE_MS, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_SPILL_BYTES, DEFAULT_MAX_TIMEOUT_MS,
    DEFAULT_RETAIN_SETTLED, DEFAULT_TIMEOUT_MS,
};

/// Each default, and the words that name its field on every face.
fn fields() -> Vec<(&'static str, u64, Vec<&'static str>)> {
    vec![
        (
            "max_timeout_ms",
            DEFAULT_MAX_TIMEOUT_MS,
            vec![
                "max_timeout_ms",
                "maxTimeoutMs",
                "Cap for per-call timeouts",
                "Upper bound for per-call timeouts",
            ],
        ),
        (
            "timeout_ms",
            DEFAULT_TIMEOUT_MS,
            vec![
                "timeout_ms",
                "timeoutMs",
                "--timeout",
                "Default foreground timeout",
            ],
        ),
        (
            "max_output_bytes",
            DEFAULT_MAX_OUTPUT_BYTES,
            vec![
                "max_output_bytes",
                "maxOutputBytes",
                "In-memory window per stream",
                "In-memory cap per stream",
                "Per-stream in-memory cap",
                "in-memory window (",
                "in-memory window per stream",
                "--max-output",
            ],
        ),
        (
            "max_spill_bytes",
            DEFAULT_MAX_SPILL_BYTES,
            vec![
                "max_spill_bytes",
                "maxSpillBytes",
                "Cap of one spill file",
                "Per-stream spill-file cap",
            ],
        ),
        (
            "grace_ms",
            DEFAULT_GRACE_MS,
            vec!["grace_ms", "graceMs", "SIGTERM→SIGKILL grace", "--grace"],
        ),
        (
            "retain_settled",
            DEFAULT_RETAIN_SETTLED,
            vec![
                "retain_settled",
                "retainSettled",
                "Settled background processes kept",
            ],
        ),
    ]
}

/// The places that restate the defaults.
const PLACES: &[&str] = &[
    "docs/configuration.md",
    "docs/harness.md",
    "docs/cli.md",
    "bindings-python/python/dsh_native/__init__.py",
    "bindings-python/src/executor.rs",
    "bindings-node/index.d.ts",
    "bindings-node/harness.d.mts",
    "ffi/src/builders.rs",
    "include/dsh.h",
    "cli/src/args.rs",
    "cli/src/bin/dsh/args.rs",
];

/// A number as the docs write one: `120000`, `64 000`, `64 MiB`.
fn number_at(text: &str) -> Option<u64> {
    let text = text.trim_start_matches([' ', '`', '(']);
    let digits: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ' ')
        .collect();
    let rest = &text[digits.len()..];
    let digits = digits.trim_end();
    // "64 000" is one number; "3 s" is 3.
    let joined: String = digits.split(' ').collect();
    if joined.is_empty() {
        return None;
    }
    let n: u64 = joined.parse().ok()?;
    Some(if rest.starts_with("MiB") { n << 20 } else { n })
}

/// The field a line names first (at one place, the longest name wins:
/// `max_timeout_ms` holds `timeout_ms`).
fn field_of(line: &str, fields: &[(&'static str, u64, Vec<&'static str>)]) -> Option<(&'static str, u64)> {
    fields
        .iter()
        .filter_map(|(name, value, words)| {
            let at = words.iter().filter_map(|w| line.find(w)).min()?;
            Some((at, *name, *value))
        })
        .min_by_key(|(at, name, _)| (*at, std::cmp::Reverse(name.len())))
        .map(|(_, name, value)| (name, value))
}

#[test]
fn every_restated_default_is_the_cores() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let fields = fields();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for place in PLACES {
        let text = std::fs::read_to_string(root.join(place)).unwrap_or_else(|e| panic!("{place}: {e}"));
        // A "default N" that continues a line naming the field counts for it.
        let mut current: Option<(&str, u64)> = None;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.trim() == "*/" {
                current = None;
                continue;
            }
            if let Some(f) = field_of(line, &fields) {
                current = Some(f);
            }
            let Some((name, value)) = current else { continue };
            let mut found: Vec<u64> = line
                .match_indices("default ")
                .filter_map(|(at, d)| number_at(&line[at + d.len()..]))
                .collect();
            // A table row of a field: its first number is the default.
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() > 3 && field_of(cells[1], &fields).is_some() && cells[1].contains('`') {
                if let Some(n) = cells[2..].iter().find_map(|c| number_at(c)) {
                    found.push(n);
                }
            }
            for n in found {
                checked += 1;
                if n != value {
                    wrong.push(format!(
                        "{place}:{}: {name} default {n}, the core's is {value}",
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "stale defaults:\n{}", wrong.join("\n"));
    // Every face restates all five: the scan must keep finding them.
    assert!(
        checked >= 40,
        "only {checked} restated defaults found: the scan lost its places"
    );
}

#[test]
fn the_number_reader_reads_what_the_docs_write() {
    assert_eq!(number_at("120000, or"), Some(120_000));
    assert_eq!(number_at("64 000 bytes"), Some(64_000));
    assert_eq!(number_at("64 MiB)"), Some(64 << 20));
    assert_eq!(number_at("`3000`"), Some(3000));
    assert_eq!(number_at("milliseconds"), None);
}
