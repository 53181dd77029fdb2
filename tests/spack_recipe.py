"""Loads the Spack recipe (packaging/spack/packages/lmdbio/package.py) with
a minimal stand-in for Spack's package API, and checks its variants,
dependencies and install step against scripts/install.sh: every option the
recipe passes is one the script documents, every --with-X the script offers
has a variant X, and the install runs the script with the variant's
options. Spack itself is not available on these machines.

usage: python3 tests/spack_recipe.py
"""

import importlib.util
import os
import re
import subprocess
import sys
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = os.path.join(ROOT, "packaging", "spack", "packages", "lmdbio", "package.py")
INSTALL_SH = os.path.join(ROOT, "scripts", "install.sh")


def read(path):
    with open(path) as f:
        return f.read()


class Directives:
    """What the recipe's class body declared, in order."""

    def __init__(self):
        self.calls = []

    def record(self, name):
        def directive(*args, **kwargs):
            self.calls.append((name, args, kwargs))

        return directive

    def named(self, name):
        return [(a, k) for n, a, k in self.calls if n == name]


class Prefix(str):
    """A path whose attributes are sub-directories, as Spack's Prefix."""

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return Prefix(os.path.join(self, name))


class Spec:
    """A concrete spec: its variants ("+caffe") and dependencies by name."""

    def __init__(self, variants):
        self.variants = set(variants)
        self.deps = {
            "mpi": types.SimpleNamespace(mpicc="/opt/mpi/bin/mpicc", prefix=Prefix("/opt/mpi")),
            "hdf5": types.SimpleNamespace(prefix=Prefix("/opt/hdf5")),
            "llvm": types.SimpleNamespace(prefix=Prefix("/opt/llvm")),
            "caffe": types.SimpleNamespace(prefix=Prefix("/opt/caffe")),
            "python": types.SimpleNamespace(
                prefix=Prefix("/opt/python"),
                command=types.SimpleNamespace(path="/opt/python/bin/python3"),
            ),
        }

    def satisfies(self, constraint):
        wanted = constraint.lstrip("+~")
        return (wanted in self.variants) == constraint.startswith("+")

    def __contains__(self, constraint):
        return self.satisfies(constraint)

    def __getitem__(self, name):
        return self.deps[name]


class Env:
    def __init__(self):
        self.values = {}

    def set(self, name, value):
        self.values[name] = str(value)

    def prepend_path(self, name, value):
        self.values[name] = str(value) + os.pathsep + self.values.get(name, "")


def load_recipe(ran):
    """Imports package.py against stand-ins; `ran` collects the commands
    its install step runs, with the working directory."""
    directives = Directives()
    cwd = [None]

    class Package:
        def __init__(self, spec, stage):
            self.spec = spec
            self.stage = stage

    class Executable:
        def __init__(self, name):
            self.name = name

        def __call__(self, *args):
            ran.append((cwd[0], self.name, [str(a) for a in args]))

    class working_dir:  # noqa: N801 (Spack's name)
        def __init__(self, path):
            self.path = path

        def __enter__(self):
            cwd[0] = self.path

        def __exit__(self, *exc):
            cwd[0] = None

    api = types.ModuleType("spack.package")
    for name in ["version", "variant", "depends_on", "extends", "license", "conflicts", "maintainers"]:
        setattr(api, name, directives.record(name))
    api.Package = Package
    api.which = Executable
    api.working_dir = working_dir
    api.join_path = os.path.join
    api.__all__ = [n for n in vars(api) if not n.startswith("_")]
    spack = types.ModuleType("spack")
    spack.package = api
    saved = {k: sys.modules.get(k) for k in ["spack", "spack.package"]}
    sys.modules.update({"spack": spack, "spack.package": api})
    try:
        spec = importlib.util.spec_from_file_location("lmdbio_recipe", RECIPE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module, directives


def install_sh_options():
    """The long options install.sh's --help lists."""
    out = subprocess.run(["bash", INSTALL_SH, "--help"], check=True, capture_output=True, text=True)
    return set(re.findall(r"^\s+(--[a-z-]+)", out.stdout, re.M))


class RecipeTest(unittest.TestCase):
    def setUp(self):
        self.ran = []
        self.module, self.directives = load_recipe(self.ran)
        self.options = install_sh_options()

    def package(self, *variants):
        stage = types.SimpleNamespace(path="/stage", source_path="/stage/src")
        return self.module.Lmdbio(Spec(variants), stage)

    def test_the_script_documents_what_the_recipe_relies_on(self):
        for option in ["--prefix", "--uninstall", "--target-dir", "--with-caffe", "--without-caffe", "--with-python"]:
            self.assertIn(option, self.options)

    def test_variants_are_the_scripts_optional_parts(self):
        variants = {a[0]: k for a, k in self.directives.named("variant")}
        self.assertEqual(set(variants), {"caffe", "python"})
        for name, kwargs in variants.items():
            self.assertIs(kwargs.get("default"), False, name)
            self.assertTrue(kwargs.get("description"), name)
        offered = {o[len("--with-"):] for o in self.options if o.startswith("--with-")}
        self.assertEqual(offered, set(variants), "every --with-X of install.sh is a variant X")

    def test_dependencies(self):
        deps = {}
        for args, kwargs in self.directives.named("depends_on"):
            deps.setdefault(args[0].split("@")[0].split("+")[0], []).append(kwargs)
        for name in ["mpi", "lmdb", "hdf5", "rust", "llvm", "pkgconfig"]:
            self.assertIn(name, deps)
        for name in ["mpi", "lmdb", "hdf5"]:
            self.assertTrue(all("when" not in k for k in deps[name]), name)
        self.assertEqual(deps["rust"][0].get("type"), "build")
        rust = [a[0] for a, _ in self.directives.named("depends_on") if a[0].startswith("rust")]
        self.assertEqual(rust, ["rust@1.85:"], "the workspace's rust-version")
        cargo_toml = read(os.path.join(ROOT, "Cargo.toml"))
        self.assertIn('rust-version = "1.85"', cargo_toml)
        self.assertEqual([k.get("when") for k in deps["caffe"]], ["+caffe"])
        for name in ["python", "py-pip", "py-maturin", "py-mpi4py"]:
            self.assertEqual([k.get("when") for k in deps[name]], ["+python"], name)
        self.assertEqual([a[0] for a, k in self.directives.named("extends") if k.get("when") == "+python"], ["python"])

    def test_the_source_is_this_repository(self):
        versions = [a[0] for a, _ in self.directives.named("version")]
        self.assertEqual(versions, ["main"])
        if not os.environ.get("LMDBIO_GIT"):
            self.assertEqual(self.module.Lmdbio.git, "file://" + ROOT)

    def install(self, *variants):
        self.ran.clear()
        pkg = self.package(*variants)
        prefix = Prefix("/opt/lmdbio")
        pkg.install(pkg.spec, prefix)
        self.assertEqual(len(self.ran), 1)
        cwd, program, args = self.ran[0]
        self.assertEqual((cwd, program, args[0]), ("/stage/src", "bash", "scripts/install.sh"))
        for a in args[1:]:
            if a.startswith("--"):
                self.assertIn(a, self.options, "install.sh has no option " + a)
        self.assertEqual(args[args.index("--prefix") + 1], prefix)
        return args[1:]

    def test_install_runs_the_script_with_the_variants_options(self):
        plain = self.install()
        self.assertIn("--without-caffe", plain)
        self.assertNotIn("--with-python", plain)
        full = self.install("caffe", "python")
        self.assertIn("--with-caffe", full)
        self.assertIn("--with-python", full)
        self.assertNotIn("--without-caffe", full)
        self.assertEqual(full[full.index("--target-dir") + 1], "/stage/src/target")

    def test_the_build_environment_names_the_specs_mpi(self):
        env = Env()
        self.package("caffe", "python").setup_build_environment(env)
        self.assertEqual(env.values["MPICC"], "/opt/mpi/bin/mpicc")
        self.assertEqual(env.values["HDF5_DIR"], "/opt/hdf5")
        self.assertEqual(env.values["LIBCLANG_PATH"], "/opt/llvm/lib")
        self.assertEqual(env.values["CAFFE_INCLUDE_DIR"], "/opt/caffe/include")
        self.assertEqual(env.values["PYTHON"], "/opt/python/bin/python3")
        self.assertTrue(env.values["CARGO_HOME"].startswith("/stage"))
        env = Env()
        self.package().setup_build_environment(env)
        self.assertNotIn("CAFFE_INCLUDE_DIR", env.values)
        # install.sh reads every variable the recipe sets for it.
        script = read(INSTALL_SH)
        for name in ["MPICC", "CAFFE_INCLUDE_DIR", "PYTHON"]:
            self.assertIn(name, script)


if __name__ == "__main__":
    unittest.main(verbosity=2)
