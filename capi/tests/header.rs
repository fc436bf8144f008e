//! The committed header `include/xtcq.h` is what cbindgen makes of `capi/src` today: a
//! change to the C API that forgot to regenerate it fails here.
//!
//! Regenerate: `XTCQ_BLESS_HEADER=1 cargo test -p xtcq-capi --test header`.

use std::path::Path;

#[test]
fn header_matches_the_code() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../include/xtcq.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("capi/cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not read capi/src")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("cbindgen writes UTF-8");
    if std::env::var_os("XTCQ_BLESS_HEADER").is_some() {
        std::fs::write(&header, &generated).expect("writing include/xtcq.h");
        return;
    }
    let committed = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        committed == generated,
        "include/xtcq.h differs from what capi/src declares; regenerate it with \
         `XTCQ_BLESS_HEADER=1 cargo test -p xtcq-capi --test header` and commit it"
    );
}
