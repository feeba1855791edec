//! Writes `dsh.pc` (pkg-config) next to libdsh in the target directory.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/dsh-ffi-<hash>/out.
    let Some(libdir) = out.ancestors().nth(3) else {
        return;
    };
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let include = manifest.join("..").join("include");
    let include = include.canonicalize().unwrap_or(include);
    let pc = format!(
        "libdir={}\nincludedir={}\n\nName: dsh\nDescription: dsh-native, a bash executor for AI-agent harnesses\n\
         Version: {}\nLibs: -L${{libdir}} -Wl,-rpath,${{libdir}} -ldsh\nLibs.private: -lpthread -ldl -lm\n\
         Cflags: -I${{includedir}}\n",
        libdir.display(),
        include.display(),
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
    );
    let _ = std::fs::write(libdir.join("dsh.pc"), pc);
    println!("cargo:rerun-if-changed=build.rs");
}
