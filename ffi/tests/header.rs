//! include/dsh.h is generated from this crate by cbindgen and committed; this
//! test regenerates it and fails on any drift. `DSH_BLESS=1` rewrites it.
//! The `DSH_VERSION_*` macros come from the crate version (the workspace's,
//! Cargo.toml), so a version bump makes this test fail until re-blessed.

#[test]
fn committed_header_matches_the_source() {
    let crate_dir = env!("CARGO_MANIFEST_DIR");
    let mut config =
        cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).expect("cbindgen.toml");
    config.after_includes = Some(format!(
        "\n/**\n * The library version this header was generated for, as numbers: the same\n \
         * as dsh_version() returns (\"MAJOR.MINOR.PATCH\") for a matching library.\n \
         */\n#define DSH_VERSION_MAJOR {}\n#define DSH_VERSION_MINOR {}\n#define DSH_VERSION_PATCH {}",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH"),
    ));
    let bindings = cbindgen::generate_with_config(crate_dir, config).expect("cbindgen failed");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let path = format!("{crate_dir}/../include/dsh.h");
    if std::env::var_os("DSH_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/dsh.h is out of date: run `DSH_BLESS=1 cargo test -p dsh-ffi --test header` and commit it"
    );
}
