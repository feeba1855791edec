//! include/dsh.h is generated from this crate by cbindgen and committed; this
//! test regenerates it and fails on any drift. `DSH_BLESS=1` rewrites it.

#[test]
fn committed_header_matches_the_source() {
    let crate_dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).expect("cbindgen.toml");
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
