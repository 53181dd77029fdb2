//! Gives the C library (`liblmdbio.so`) its SONAME, `liblmdbio.so.MAJOR`,
//! so that programs linked against it record the ABI they were built for
//! and an installed `liblmdbio.so.0.x.y` is found through the usual
//! `liblmdbio.so.0` link (`scripts/install.sh` makes it).

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liblmdbio.so.{major}");
    println!("cargo:rerun-if-changed=build.rs");
}
