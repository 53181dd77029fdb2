//! Compiles the C++ half of `libcaffe_lmdbio.so` against the installed
//! Caffe 1.0 headers (Debian 11's `libcaffe-dev`), the MPI that rsmpi links
//! (from `$MPICC -show`) and `include/lmdbio.h`.
//!
//! Without Caffe's headers the plugin is skipped with a warning, and the
//! crate builds as an empty library; with `LMDBIO_REQUIRE_CAFFE=1` (set by
//! `scripts/test.sh`) their absence is an error, so CI never skips silently.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const CPP_SOURCES: &[&str] = &[
    "cpp/mpi_session.cpp",
    "cpp/key_log.cpp",
    "cpp/lmdbio_db.cpp",
    "cpp/worker_pool.cpp",
    "cpp/lmdbio_data_layer.cpp",
    "cpp/data_parallel.cpp",
];

fn main() {
    println!("cargo:rustc-check-cfg=cfg(caffe_plugin_skipped)");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=cpp");
    println!("cargo:rerun-if-changed=../include/lmdbio.h");
    for var in ["LMDBIO_REQUIRE_CAFFE", "CAFFE_INCLUDE_DIR", "MPICC"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let caffe_include = env::var_os("CAFFE_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    let opencv_include = PathBuf::from("/usr/include/opencv4");
    let missing: Vec<PathBuf> = [
        caffe_include.join("caffe/caffe.hpp"),
        opencv_include.join("opencv2/core/core.hpp"),
    ]
    .into_iter()
    .filter(|p| !p.exists())
    .collect();
    if !missing.is_empty() {
        let what = missing
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let required = env::var("LMDBIO_REQUIRE_CAFFE").is_ok_and(|v| !v.is_empty() && v != "0");
        if required {
            panic!(
                "LMDBIO_REQUIRE_CAFFE is set but Caffe's headers are missing ({what}); \
                 run scripts/setup.sh to install libcaffe-dev from Debian 11"
            );
        }
        println!(
            "cargo:warning=libcaffe_lmdbio.so NOT built: missing {what} \
             (install libcaffe-dev with scripts/setup.sh; set LMDBIO_REQUIRE_CAFFE=1 to make this an error)"
        );
        println!("cargo:rustc-cfg=caffe_plugin_skipped");
        return;
    }

    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++14")
        .cargo_metadata(false)
        .pic(true)
        // Debian's libcaffe is built CPU-only with OpenCV, LMDB and LevelDB
        // (INTERFACE_COMPILE_DEFINITIONS in /usr/share/caffe/CaffeTargets.cmake);
        // the headers' class layouts depend on these.
        .define("CPU_ONLY", None)
        .define("USE_OPENCV", None)
        .define("USE_LMDB", None)
        .define("USE_LEVELDB", None)
        // The C API only: Open MPI's C++ bindings do not compile cleanly.
        .define("OMPI_SKIP_MPICXX", "1")
        .define("MPICH_SKIP_MPICXX", "1")
        .include(manifest.join("../include"))
        .include(manifest.join("cpp"))
        .flag("-include")
        .flag(manifest.join("cpp/protobuf_compat.h").to_str().unwrap())
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .warnings_into_errors(true);
    // Third-party headers as system headers: their warnings are not ours.
    // (/usr/include already is one; naming it again would reorder it before
    // the C++ library's own directories and break #include_next.)
    for dir in [caffe_include, opencv_include]
        .into_iter()
        .chain(mpi_include_dirs())
        .filter(|d| d != Path::new("/usr/include"))
    {
        build
            .flag("-isystem")
            .flag(dir.to_str().expect("UTF-8 include path"));
    }
    for file in CPP_SOURCES {
        build.file(manifest.join(file));
    }
    build.compile("caffe_lmdbio_cpp");

    let out = env::var("OUT_DIR").unwrap();
    println!("cargo:rustc-link-search=native={out}");
    // Whole archive: the layer registers itself from a static initialiser
    // that nothing else references.
    println!("cargo:rustc-link-lib=static:+whole-archive,-bundle=caffe_lmdbio_cpp");
    for lib in [
        "caffe",
        "glog",
        "protobuf",
        "boost_system",
        "boost_thread",
        "stdc++",
        "dl",
    ] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
}

/// `-I` directories of the MPI named by `$MPICC` (default `mpicc.mpich`,
/// the one rsmpi links through `.cargo/config.toml`): `MPI_Comm` differs
/// between MPICH and Open MPI, so the C++ must see the same `mpi.h`.
fn mpi_include_dirs() -> Vec<PathBuf> {
    let mpicc = env::var("MPICC").unwrap_or_else(|_| "mpicc.mpich".into());
    let out = Command::new(&mpicc)
        .arg("-show")
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{mpicc} -show` to find mpi.h: {e}"));
    assert!(
        out.status.success(),
        "`{mpicc} -show` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dirs: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("-I"))
        .map(PathBuf::from)
        .collect();
    let found = dirs
        .iter()
        .chain([Path::new("/usr/include").to_path_buf()].iter())
        .any(|d| d.join("mpi.h").exists());
    assert!(found, "`{mpicc} -show` names no directory with mpi.h");
    dirs
}
