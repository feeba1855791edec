# shellcheck shell=bash
# Sourced by scripts/test and scripts/vm-test (not run by itself).
#
# The core's tests say that they could not run, and why, with a line
# `SKIPPED <test>: <why>` on stderr (core/tests/common.rs `skip`); cargo
# still lists such a test as ok. report_skips counts and lists those lines.

# report_skips LOG [WHAT]: counts and lists the SKIPPED lines of LOG; WHAT
# starts the count's line (default "Rust tests skipped here").
report_skips() {
  local log=$1 what=${2:-Rust tests skipped here} n
  n=$({ grep -o 'SKIPPED .*' "$log" || true; } | wc -l)
  echo "$what: $n (cargo lists them as ok; they ran nothing)"
  { grep -o 'SKIPPED .*' "$log" || true; } | sed 's/^/  /'
}
