//! What the compile-time checks of this crate cannot see: the symbols the
//! shared library exports, the error kinds' codes, constants only the Rust
//! side defines, and the C compiler's own view of the structs' layouts.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use lmdbio::ErrorKind;
use lmdbio_abi_check::{header_constant, HEADER_CONSTANTS, HEADER_FUNCTIONS};
use lmdbio_testkit::c_programs::workspace;

#[test]
fn the_shared_library_exports_exactly_the_header_functions() {
    let lib = lmdbio_testkit::c_programs::library_dir().join("liblmdbio.so");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("run nm");
    assert!(out.status.success(), "nm {} failed", lib.display());
    let exported: BTreeSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .filter(|name| name.starts_with("lmdbio_"))
        .map(str::to_owned)
        .collect();
    let declared: BTreeSet<String> = HEADER_FUNCTIONS.iter().map(|&f| f.to_owned()).collect();
    assert!(declared.len() > 20, "bindgen found too few functions");
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    let missing: Vec<_> = declared.difference(&exported).collect();
    assert!(
        undeclared.is_empty() && missing.is_empty(),
        "exported but not in include/lmdbio.h: {undeclared:?}; \
         in the header but not exported: {missing:?}"
    );
}

/// `NoSuchDatabase` -> `NO_SUCH_DATABASE`.
fn screaming_snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[test]
fn every_error_kind_has_its_code_in_the_header_and_no_other_code_is_there() {
    let mut named = BTreeSet::new();
    for &kind in ErrorKind::ALL {
        let name = format!("LMDBIO_ERR_{}", screaming_snake(&format!("{kind:?}")));
        assert_eq!(
            header_constant(&name),
            Some(i128::from(kind.code())),
            "include/lmdbio.h: {name} should be {} ({kind:?})",
            kind.code()
        );
        assert_eq!(ErrorKind::from_code(kind.code()), kind);
        named.insert(name);
    }
    for (name, value) in HEADER_CONSTANTS {
        if name.starts_with("LMDBIO_ERR_") {
            assert!(
                named.contains(*name),
                "include/lmdbio.h defines {name} = {value}, which is no ErrorKind"
            );
        }
    }
    assert_eq!(header_constant("LMDBIO_OK"), Some(0));
}

/// `pub const LMDBIO_*` items of lmdbio's sources (the compile-time checks
/// cover the other direction).
fn rust_constants(dir: &Path, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_constants(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines() {
                if let Some(rest) = line.trim_start().strip_prefix("pub const LMDBIO_") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    found.insert(format!("LMDBIO_{name}"));
                }
            }
        }
    }
}

#[test]
fn every_rust_constant_of_the_c_abi_is_in_the_header() {
    let mut found = BTreeSet::new();
    rust_constants(&workspace().join("lib/src"), &mut found);
    assert!(found.contains("LMDBIO_OK"), "no constants found in lib/src");
    let missing: Vec<_> = found
        .iter()
        .filter(|name| header_constant(name).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "defined in lmdbio but not in include/lmdbio.h: {missing:?}"
    );
}

#[test]
fn the_c_compiler_agrees_with_the_documented_struct_layouts() {
    // tests/c/layout.c holds _Static_asserts of the LP64 layouts.
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc.mpich".into());
    let out = Command::new(&mpicc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"])
        .arg("-I")
        .arg(workspace().join("include"))
        .arg(workspace().join("tests/c/layout.c"))
        .output()
        .expect("run mpicc");
    assert!(
        out.status.success(),
        "{mpicc} rejected tests/c/layout.c:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
