//! Gives libdsh.so its SONAME (`libdsh.so.<major>`) and writes `dsh.pc`
//! (pkg-config, for building against this build tree) plus a
//! `libdsh.so.<major>` symlink next to libdsh in the target directory.
//! `scripts/install` installs the library with its own, relocatable `dsh.pc`.

use std::path::PathBuf;

/// What a program linking libdsh.a needs besides it: `rustc --print
/// native-static-libs` for a staticlib on x86_64-unknown-linux-gnu, less the
/// `-lc` every C compiler adds (scripts/install copies this line into the
/// installed dsh.pc; docs/requirements.md quotes it, which
/// scripts/test-packages checks).
const LIBS_PRIVATE: &str = "-lgcc_s -lutil -lrt -lpthread -lm -ldl";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("CARGO_PKG_VERSION_MAJOR");
    let soname = format!("libdsh.so.{major}");
    // A program linked against libdsh records this name (not libdsh.so), so
    // an installed libdsh.so.0.x.y can be replaced by a compatible one.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");

    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/dsh-ffi-<hash>/out.
    let Some(libdir) = out.ancestors().nth(3) else {
        return;
    };
    // What a program linked here asks the loader for at run time; Cargo
    // writes only libdsh.so (the link is dangling until the first link).
    let link = libdir.join(&soname);
    if std::fs::read_link(&link).is_err() {
        let _ = std::fs::remove_file(&link);
        #[cfg(unix)]
        let _ = std::os::unix::fs::symlink("libdsh.so", &link);
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let include = manifest.join("..").join("include");
    let include = include.canonicalize().unwrap_or(include);
    let pc = format!(
        "libdir={}\nincludedir={}\n\nName: dsh\nDescription: dsh-native, a bash executor for AI-agent harnesses\n\
         Version: {}\nLibs: -L${{libdir}} -Wl,-rpath,${{libdir}} -ldsh\nLibs.private: {LIBS_PRIVATE}\n\
         Cflags: -I${{includedir}}\n",
        libdir.display(),
        include.display(),
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
    );
    let _ = std::fs::write(libdir.join("dsh.pc"), pc);
}
