# Spack recipe for lmdbio; docs/install.md ("Spack") says how to use it.
# The build and install are scripts/install.sh's, so that a Spack install
# and a hand install give the same tree.

import os

from spack.package import *  # noqa: F401,F403

try:  # Spack 1.x keeps the build systems in the builtin repository
    from spack_repo.builtin.build_systems.generic import Package  # noqa: F811
except ImportError:
    pass

# The repository this recipe lives in (packaging/spack/packages/lmdbio/):
# Spack fetches the source from it unless LMDBIO_GIT names another clone.
_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.normpath(os.path.join(_HERE, os.pardir, os.pardir, os.pardir, os.pardir))


class Lmdbio(Package):
    """Scalable reads of stock LMDB training data for MPI jobs: a C library
    (lmdbio.h, pkg-config and CMake files), the lmdbio command (inspect,
    dump, convert, bench, sample-images) and, optionally, a plugin that
    makes stock Caffe 1.0 read through it and the Python package."""

    git = os.environ.get("LMDBIO_GIT") or "file://" + _SOURCE

    license("MIT OR Apache-2.0")

    version("main", branch="main")

    variant("caffe", default=False, description="Build libcaffe_lmdbio.so, the plugin for Caffe 1.0")
    variant("python", default=False, description="Install the Python package (lmdbio)")

    depends_on("mpi")
    depends_on("lmdb")
    depends_on("hdf5")
    depends_on("rust@1.85:", type="build")
    # bindgen (rsmpi's MPI bindings) needs libclang.
    depends_on("llvm+clang", type="build")
    depends_on("pkgconfig", type="build")

    depends_on("caffe", when="+caffe")

    extends("python", when="+python")
    depends_on("python@3.8:", when="+python", type=("build", "run"))
    depends_on("py-pip", when="+python", type="build")
    depends_on("py-maturin", when="+python", type="build")
    depends_on("py-mpi4py", when="+python", type=("build", "run"))

    def setup_build_environment(self, env):
        spec = self.spec
        # rsmpi and install.sh build against the MPI named here.
        env.set("MPICC", spec["mpi"].mpicc)
        env.set("HDF5_DIR", spec["hdf5"].prefix)
        env.set("LIBCLANG_PATH", spec["llvm"].prefix.lib)
        # Crates are downloaded into the stage, not the user's home.
        env.set("CARGO_HOME", join_path(self.stage.path, "cargo-home"))
        if spec.satisfies("+caffe"):
            env.set("CAFFE_INCLUDE_DIR", spec["caffe"].prefix.include)
        if spec.satisfies("+python"):
            env.set("PYTHON", spec["python"].command.path)

    def install_args(self, prefix):
        spec = self.spec
        args = ["--prefix", str(prefix), "--target-dir", join_path(self.stage.source_path, "target")]
        args.append("--with-caffe" if spec.satisfies("+caffe") else "--without-caffe")
        if spec.satisfies("+python"):
            args.append("--with-python")
        return args

    def install(self, spec, prefix):
        bash = which("bash")
        with working_dir(self.stage.source_path):
            bash("scripts/install.sh", *self.install_args(prefix))
