//! C programs against lmdbio's C ABI: this build's `liblmdbio.so` and the
//! test programs in `tests/c/` compiled against `include/lmdbio.h`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the parent of `tests/`).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace")
        .to_owned()
}

/// The directory holding this build's `liblmdbio.so`, built on demand into
/// the target directory and profile the calling test was built in (the
/// directory may be a second one, for another MPI, built with the same
/// MPICC), with the SONAME link programs look for at run time.
pub fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> -> target/<profile>
    let dir = exe.parent().unwrap().parent().unwrap().to_owned();
    let mut args = vec!["build", "-q", "-p", "lmdbio", "--lib"];
    if dir.file_name().is_some_and(|p| p == "release") {
        args.push("--release");
    }
    let status = Command::new(env!("CARGO"))
        .args(&args)
        .env("CARGO_TARGET_DIR", dir.parent().unwrap())
        .current_dir(workspace())
        .status()
        .expect("run cargo build for the cdylib");
    assert!(status.success(), "building liblmdbio.so failed");
    assert!(
        dir.join("liblmdbio.so").exists(),
        "no liblmdbio.so in {}",
        dir.display()
    );
    // An installed tree has the SONAME as a link (scripts/install.sh).
    let soname = dir.join("liblmdbio.so.0");
    if std::fs::symlink_metadata(&soname).is_err() {
        // Another test may make it at the same time.
        let _ = std::os::unix::fs::symlink("liblmdbio.so", &soname);
    }
    dir
}

/// Compiles `tests/c/NAME.c` with `$MPICC` (default `mpicc.mpich`), warnings
/// as errors, against the header and this build's library, into `work`.
pub fn compile_c(name: &str, work: &Path) -> PathBuf {
    let lib = library_dir();
    let exe = work.join(name);
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc.mpich".into());
    let out = Command::new(&mpicc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(workspace().join("include"))
        .arg(workspace().join(format!("tests/c/{name}.c")))
        .arg(format!("-L{}", lib.display()))
        .arg("-llmdbio")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("run {mpicc}: {e}"));
    assert!(
        out.status.success(),
        "{mpicc} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}
