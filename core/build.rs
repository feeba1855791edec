//! Compiles the supervisor program (`supervisor/supervisor.c`) with the
//! target's C compiler; the library embeds the result (`include_bytes!` in
//! `src/launch/supervisor.rs`), so no package ships a separate executable.
//!
//! The compiler is the one the `cc` crate would pick: `CC_<target>`,
//! `TARGET_CC`, `CC`, else `cc` — the compiler Rust already links with.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "supervisor/supervisor.c";
    println!("cargo:rerun-if-changed={source}");
    let target = env::var("TARGET").unwrap_or_default();
    let per_target = format!("CC_{}", target.replace('-', "_"));
    for var in [per_target.as_str(), "TARGET_CC", "CC"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let cc = [per_target.as_str(), "TARGET_CC", "CC"]
        .iter()
        .find_map(|v| env::var(v).ok().filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| "cc".to_owned());
    // A CC may carry flags ("ccache gcc", "gcc -m32").
    let mut words = cc.split_whitespace();
    let program = words.next().expect("a non-empty compiler");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("dsh-supervisor");
    let status = Command::new(program)
        .args(words)
        .args(["-std=gnu99", "-O2", "-s", "-Wall", "-Wextra", "-o"])
        .arg(&out)
        .arg(source)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "dsh-core: compiling its supervisor ({source}) with `{cc}` failed ({s}); \
             set CC to a working C compiler"
        ),
        Err(e) => panic!(
            "dsh-core needs a C compiler to build its supervisor ({source}); `{cc}` could not \
             be run ({e}); install one (the same `cc` Rust links with) or set CC"
        ),
    }
}
