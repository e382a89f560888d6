"""Consumer projects around real compiled zoo models (mlp, resnet18 tiny).

Each consumer is a small C (or C++) program that reads the weights file, runs
the model on an input file and prints the outputs; the test compares them with
PyTorch eager.  Covered: CMake add_subdirectory, CMake find_package after
``cmake --install`` (static and shared), plain make, pkg-config, Meson
(subproject), two models in one C program and one C++ program (``<name>.hpp``),
every exported symbol carrying the model prefix, and CMake's error for a
missing weights file.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_outputs_close, copy_artifact

HAVE_GCC = shutil.which("gcc") is not None
HAVE_GXX = shutil.which("g++") is not None
HAVE_CMAKE = shutil.which("cmake") is not None
HAVE_MAKE = shutil.which("make") is not None
HAVE_PKGCONFIG = shutil.which("pkg-config") is not None
HAVE_NM = shutil.which("nm") is not None

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux consumer builds"),
    pytest.mark.skipif(not HAVE_GCC, reason="no gcc"),
]
needs_cmake = pytest.mark.skipif(not HAVE_CMAKE, reason="no cmake")

STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
MODELS = ("mlp", "resnet18")


def _meson_cmd() -> list[str] | None:
    if importlib.util.find_spec("mesonbuild") is not None:
        return [sys.executable, "-m", "mesonbuild.mesonmain"]
    exe = shutil.which("meson")
    return [exe] if exe else None


def _have_ninja() -> bool:
    return shutil.which("ninja") is not None or importlib.util.find_spec("ninja") is not None


def sh(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, check: bool = True):
    e = dict(os.environ)
    if env:
        e.update(env)
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=e, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


# --------------------------------------------------------------------------- consumer sources


def consumer_c(names: list[str]) -> str:
    """C99 program: for each model, `argv[2i+1]` = weights file, `argv[2i+2]` = raw input bytes
    (the inputs concatenated in order); prints `<name> <k> v v v ...` per float32 output k."""
    includes = "\n".join(f'#include "{n}.h"' for n in names)
    funcs = []
    for n in names:
        N = n.upper()
        funcs.append(f"""
static int run_{n}(const char *weights_path, const char *input_path)
{{
    size_t wsize, isize, off = 0, j;
    int i, rc;
    void *weights = read_file(weights_path, &wsize);
    unsigned char *in = (unsigned char *)read_file(input_path, &isize);
    void *ws = NULL;
    {n}_ctx ctx;
    const void *ins[{N}_NUM_INPUTS + 1];
    void *outs[{N}_NUM_OUTPUTS];
    const {n}_tensor_desc *id = {n}_inputs(), *od = {n}_outputs();
    if ({n}_abi_version() != {N}_ABI_VERSION) return 4;
    if (posix_memalign(&ws, {N}_WORKSPACE_ALIGN, {N}_WORKSPACE_BYTES) != 0) return 3;
    rc = {n}_init(&ctx, weights, wsize, ws, {N}_WORKSPACE_BYTES);
    if (rc != {N}_OK) {{ fprintf(stderr, "{n}_init: %s\\n", {n}_strerror(rc)); return 1; }}
    for (i = 0; i < {N}_NUM_INPUTS; i++) {{ ins[i] = in + off; off += id[i].nbytes; }}
    if (off != isize) {{ fprintf(stderr, "{n}: input file has %lu bytes, expected %lu\\n",
                                 (unsigned long)isize, (unsigned long)off); return 1; }}
    for (i = 0; i < {N}_NUM_OUTPUTS; i++) outs[i] = malloc(od[i].nbytes);
    rc = {n}_run_v(&ctx, ins, outs);
    if (rc != {N}_OK) {{ fprintf(stderr, "{n}_run_v: %s\\n", {n}_strerror(rc)); return 1; }}
    for (i = 0; i < {N}_NUM_OUTPUTS; i++) {{
        printf("{n} %d", i);
        for (j = 0; j < od[i].nbytes / sizeof(float); j++) printf(" %.9g", (double)((float *)outs[i])[j]);
        printf("\\n");
        free(outs[i]);
    }}
    free(ws);
    free(weights);
    free(in);
    return 0;
}}""")
    calls = "\n".join(f"    if ((rc = run_{n}(argv[{2 * i + 1}], argv[{2 * i + 2}])) != 0) return rc;"
                      for i, n in enumerate(names))
    return f"""#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
{includes}

static void *read_file(const char *path, size_t *size)
{{
    FILE *f = fopen(path, "rb");
    long n;
    void *p = NULL;
    if (!f) {{ fprintf(stderr, "cannot open %s\\n", path); exit(3); }}
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || posix_memalign(&p, 64, (size_t)n + 64) != 0) exit(3);
    if (fread(p, 1, (size_t)n, f) != (size_t)n) exit(3);
    fclose(f);
    *size = (size_t)n;
    return p;
}}
{"".join(funcs)}

int main(int argc, char **argv)
{{
    int rc;
    if (argc != {2 * len(names) + 1}) {{ fprintf(stderr, "usage: app (weights input)...\\n"); return 2; }}
{calls}
    return 0;
}}
"""


def consumer_cpp(manifests: list[dict]) -> str:
    """C++11 program over <name>.hpp: same arguments and output as consumer_c, through
    <name>::Model(path) and the typed run(); also checks that a bad path throws <name>::Error."""
    includes = "\n".join(f'#include "{m["name"]}.hpp"' for m in manifests)
    funcs = []
    for m in manifests:
        n = m["name"]
        nin, nout = len(m["inputs"]), len(m["outputs"])
        args = [f"(const float *)(in.data() + off[{i}])" for i in range(nin)] + \
               [f"outs[{k}].data()" for k in range(nout)]
        funcs.append(f"""
static void run_{n}(const char *weights_path, const char *input_path)
{{
    try {{
        {n}::Model bad("/nonexistent/{n}.weights");
        std::exit(5);
    }} catch (const {n}::Error &e) {{
        if (e.status() != {n}::ERR_IO) std::exit(6);
    }}
    {n}::Model model(weights_path);
    std::vector<char> in = read_file(input_path);
    std::vector<std::size_t> off(1, 0);
    for (int i = 0; i < {n}::num_inputs; i++) off.push_back(off.back() + {n}::inputs()[i].nbytes);
    if (off.back() != in.size()) throw std::runtime_error("input size");
    std::vector<std::vector<float> > outs;
    for (int k = 0; k < {n}::num_outputs; k++) outs.push_back(std::vector<float>({n}::outputs()[k].nbytes / sizeof(float)));
    {n}::Model moved(std::move(model));
    moved.run({", ".join(args)});
    for (int k = 0; k < {n}::num_outputs; k++) {{
        std::printf("{n} %d", k);
        for (std::size_t j = 0; j < outs[k].size(); j++) std::printf(" %.9g", (double)outs[k][j]);
        std::printf("\\n");
    }}
}}""")
    calls = "\n".join(f"        run_{m['name']}(argv[{2 * i + 1}], argv[{2 * i + 2}]);" for i, m in enumerate(manifests))
    return f"""#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>
{includes}

static std::vector<char> read_file(const char *path)
{{
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path);
    return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}}
{"".join(funcs)}

int main(int argc, char **argv)
{{
    if (argc != {2 * len(manifests) + 1}) return 2;
    try {{
{calls}
    }} catch (const std::exception &e) {{
        std::fprintf(stderr, "error: %s\\n", e.what());
        return 1;
    }}
    return 0;
}}
"""


def parse_outputs(stdout: str) -> dict[str, list[np.ndarray]]:
    res: dict[str, list[np.ndarray]] = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in MODELS:
            res.setdefault(parts[0], []).append(np.array([float(v) for v in parts[2:]], np.float32))
    return res


# --------------------------------------------------------------------------- fixtures


class Models:
    """The two zoo models, compiled once (session cache) and copied here once."""

    def __init__(self, zoo_cache, root: Path):
        self.root = root
        self.c = {}
        self.dirs = {}
        self.inputs = {}
        for n in MODELS:
            c = zoo_cache.get(n)
            assert all(o.dtype == np.float32 for o in c.refs)
            self.c[n] = c
            self.dirs[n] = copy_artifact(c.out_dir, root / "src" / n)
            inp = root / f"{n}.in"
            inp.write_bytes(b"".join(np.ascontiguousarray(x).tobytes() for x in c.np_inputs))
            self.inputs[n] = inp

    def weights(self, n: str) -> Path:
        return self.dirs[n] / f"{n}.weights"

    def args(self, names, weights: dict[str, Path] | None = None) -> list[str]:
        out = []
        for n in names:
            out += [str((weights or {}).get(n, self.weights(n))), str(self.inputs[n])]
        return out

    def check(self, stdout: str, names) -> None:
        got = parse_outputs(stdout)
        for n in names:
            refs = self.c[n].refs
            assert n in got, f"no output for {n} in:\n{stdout[:2000]}"
            outs = [g.reshape(r.shape) for g, r in zip(got[n], refs)]
            assert_outputs_close(outs, refs, what=n)


@pytest.fixture(scope="module")
def models(zoo_cache, tmp_path_factory) -> Models:
    return Models(zoo_cache, tmp_path_factory.mktemp("integration"))


_installs: dict[tuple[str, bool], Path] = {}


def cmake_install(models: Models, name: str, shared: bool) -> Path:
    """Configure, build and install one model with CMake; cached per (model, shared)."""
    key = (name, shared)
    if key not in _installs:
        build = models.root / f"build-{name}-{'shared' if shared else 'static'}"
        prefix = models.root / f"prefix-{name}-{'shared' if shared else 'static'}"
        sh(["cmake", "-S", models.dirs[name], "-B", build, f"-DBUILD_SHARED_LIBS={'ON' if shared else 'OFF'}",
            "-DCMAKE_C_COMPILER=gcc"])
        sh(["cmake", "--build", build, "-j", "2"])
        sh(["cmake", "--install", build, "--prefix", prefix])
        _installs[key] = prefix
    return _installs[key]


# --------------------------------------------------------------------------- CMake


@needs_cmake
def test_cmake_add_subdirectory_two_models(models, tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.c").write_text(consumer_c(list(MODELS)))
    subdirs = "\n".join(f'add_subdirectory("{models.dirs[n].as_posix()}" "${{CMAKE_BINARY_DIR}}/{n}")' for n in MODELS)
    links = " ".join(f"{n}::{n}" for n in MODELS)
    paths = "\n".join(f'file(APPEND "${{CMAKE_BINARY_DIR}}/weights.txt" "${{{n}_WEIGHTS_FILE}}\\n")' for n in MODELS)
    (app / "CMakeLists.txt").write_text(f"""cmake_minimum_required(VERSION 3.13)
project(app C)
{subdirs}
add_executable(app app.c)
target_compile_options(app PRIVATE {" ".join(STRICT[1:])})
set_target_properties(app PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_link_libraries(app PRIVATE {links})
file(WRITE "${{CMAKE_BINARY_DIR}}/weights.txt" "")
{paths}
""")
    build = tmp_path / "build"
    sh(["cmake", "-S", app, "-B", build, "-DCMAKE_C_COMPILER=gcc"])
    sh(["cmake", "--build", build, "-j", "2"])
    weights = (build / "weights.txt").read_text().split("\n")
    wmap = {n: Path(w) for n, w in zip(MODELS, weights)}
    for n in MODELS:
        assert wmap[n] == models.weights(n), f"{n}_WEIGHTS_FILE = {wmap[n]}"
    proc = sh([build / "app", *models.args(MODELS, wmap)])
    models.check(proc.stdout, MODELS)


@needs_cmake
@pytest.mark.parametrize("name,shared", [("mlp", False), ("resnet18", True)], ids=["mlp-static", "resnet18-shared"])
def test_cmake_find_package_after_install(models, tmp_path, name, shared):
    prefix = cmake_install(models, name, shared)
    libs = sorted(p.name for p in prefix.rglob(f"lib{name}.*"))
    assert libs == ([f"lib{name}.so"] if shared else [f"lib{name}.a"]), libs
    assert (prefix / "include" / f"{name}.h").is_file() and (prefix / "include" / f"{name}.hpp").is_file()
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.c").write_text(consumer_c([name]))
    (app / "CMakeLists.txt").write_text(f"""cmake_minimum_required(VERSION 3.13)
project(app C)
find_package({name} CONFIG REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE {name}::{name})
file(WRITE "${{CMAKE_BINARY_DIR}}/weights.txt" "${{{name}_WEIGHTS_FILE}}")
""")
    build = tmp_path / "build"
    sh(["cmake", "-S", app, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_C_COMPILER=gcc"])
    sh(["cmake", "--build", build])
    weights = Path((build / "weights.txt").read_text())
    assert weights.is_file() and prefix in weights.parents, weights
    proc = sh([build / "app", *models.args([name], {name: weights})])
    models.check(proc.stdout, [name])


@needs_cmake
def test_cmake_missing_weights_is_a_clear_error(models, tmp_path):
    src = copy_artifact(models.dirs["mlp"], tmp_path / "mlp")
    (src / "mlp.weights").unlink()
    proc = sh(["cmake", "-S", src, "-B", tmp_path / "build"], check=False)
    assert proc.returncode != 0
    err = " ".join(proc.stderr.split())
    assert "mlp.weights is missing" in err and "--embed-weights" in err, proc.stderr


# --------------------------------------------------------------------------- make, pkg-config


@pytest.mark.skipif(not HAVE_MAKE, reason="no make")
def test_plain_make(models, tmp_path):
    d = models.dirs["mlp"]
    build = tmp_path / "b"
    sh(["make", "-C", d, f"BUILDDIR={build}", "CC=gcc"])
    (tmp_path / "app.c").write_text(consumer_c(["mlp"]))
    sh(["gcc", *STRICT, "-O1", f"-I{d}", tmp_path / "app.c", build / "libmlp.a", "-fopenmp", "-lm",
        "-o", tmp_path / "app"])
    models.check(sh([tmp_path / "app", *models.args(["mlp"])]).stdout, ["mlp"])
    # and against the shared library
    sh(["gcc", *STRICT, f"-I{d}", tmp_path / "app.c", f"-L{build}", "-lmlp", f"-Wl,-rpath,{build}",
        "-o", tmp_path / "app_so"])
    models.check(sh([tmp_path / "app_so", *models.args(["mlp"])]).stdout, ["mlp"])


@needs_cmake
@pytest.mark.skipif(not HAVE_PKGCONFIG, reason="no pkg-config")
@pytest.mark.parametrize("name,shared", [("mlp", False), ("resnet18", True)], ids=["mlp-static", "resnet18-shared"])
def test_pkg_config(models, tmp_path, name, shared):
    prefix = cmake_install(models, name, shared)
    pcs = list(prefix.rglob(f"{name}.pc"))
    assert len(pcs) == 1, pcs
    env = {"PKG_CONFIG_PATH": str(pcs[0].parent)}
    flags = sh(["pkg-config", "--cflags", "--libs", name], env=env).stdout.split()
    weights = Path(sh(["pkg-config", "--variable=weights", name], env=env).stdout.strip())
    assert weights.is_file() and weights.resolve() == (prefix / "share" / name / f"{name}.weights").resolve()
    (tmp_path / "app.c").write_text(consumer_c([name]))
    sh(["gcc", *STRICT, tmp_path / "app.c", *flags, "-o", tmp_path / "app"])
    libdir = [f[2:] for f in flags if f.startswith("-L")][0]
    proc = sh([tmp_path / "app", *models.args([name], {name: weights})], env={"LD_LIBRARY_PATH": libdir})
    models.check(proc.stdout, [name])


# --------------------------------------------------------------------------- Meson


@pytest.mark.skipif(_meson_cmd() is None or not _have_ninja(), reason="meson and ninja not installed (pip install meson ninja)")
def _mlp_into(models, dst: Path, multi: bool) -> None:
    """The mlp artifact at dst: the shared one, or recompiled multi-versioned (x86_64 + x86_64-v3:
    an extra source file that the build file must compile with its own -march)."""
    if multi:
        import platform

        import pt2c

        if platform.machine() not in ("x86_64", "AMD64"):
            pytest.skip("multi-versioning is for x86-64 hosts")
        pt2c.compile(models.c["mlp"].ep, dst, target="x86_64,x86_64-v3", name="mlp")
        assert (dst / "mlp_x86_64_v3.c").is_file()
    else:
        copy_artifact(models.dirs["mlp"], dst)


@pytest.mark.parametrize("multi", [False, True], ids=["single", "multiversion"])
def test_meson_subproject(models, tmp_path, multi):
    meson = _meson_cmd()
    app = tmp_path / "app"
    (app / "subprojects").mkdir(parents=True)
    _mlp_into(models, app / "subprojects" / "mlp", multi)
    (app / "app.c").write_text(consumer_c(["mlp"]))
    (app / "weights.txt.in").write_text("@W@")
    (app / "meson.build").write_text("""project('app', 'c', default_options: ['c_std=c99', 'warning_level=3', 'werror=true'])
mlp_dep = dependency('mlp', fallback: ['mlp', 'mlp_dep'])
weights = subproject('mlp').get_variable('mlp_weights_file')
configure_file(input: 'weights.txt.in', output: 'weights.txt', configuration: {'W': weights})
executable('app', 'app.c', dependencies: mlp_dep)
""")
    build = tmp_path / "build"
    env = {"CC": "gcc", "PKG_CONFIG_PATH": ""}
    sh([*meson, "setup", build, app], env=env)
    sh([*meson, "compile", "-C", build], env=env)
    weights = Path((build / "weights.txt").read_text().strip())
    assert weights == app / "subprojects" / "mlp" / "mlp.weights"
    models.check(sh([build / "app", *models.args(["mlp"], {"mlp": weights})]).stdout, ["mlp"])


# --------------------------------------------------------------------------- two models, one program


def _objects(models: Models, tmp_path: Path) -> list[Path]:
    objs = []
    for n in MODELS:
        m = models.c[n].artifact.manifest
        obj = tmp_path / f"{n}.o"
        sh(["gcc", "-O2", *STRICT, *m["target_cflags"], "-fopenmp", "-fPIC", "-c", models.dirs[n] / f"{n}.c",
            "-o", obj])
        objs.append(obj)
    return objs


@pytest.mark.skipif(not HAVE_NM, reason="no nm")
def test_two_models_one_program_c_and_cpp(models, tmp_path):
    objs = _objects(models, tmp_path)
    # every global symbol an artifact defines carries its model's prefix
    for n, obj in zip(MODELS, objs):
        syms = sh(["nm", "-g", "--defined-only", obj]).stdout.split("\n")
        names = [s.split()[-1] for s in syms if s.strip()]
        assert names and all(s.startswith(f"{n}_") for s in names), names
        undef = sh(["nm", "-u", obj]).stdout
        assert "pt2c_" not in undef, undef
    incs = [f"-I{models.dirs[n]}" for n in MODELS]
    # C
    (tmp_path / "app.c").write_text(consumer_c(list(MODELS)))
    sh(["gcc", *STRICT, *incs, tmp_path / "app.c", *objs, "-fopenmp", "-lm", "-o", tmp_path / "app"])
    models.check(sh([tmp_path / "app", *models.args(MODELS)]).stdout, MODELS)
    # C++ through <name>.hpp (exceptions)
    if not HAVE_GXX:
        pytest.skip("no g++")
    manifests = [models.c[n].artifact.manifest for n in MODELS]
    (tmp_path / "app.cpp").write_text(consumer_cpp(manifests))
    sh(["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", *incs, tmp_path / "app.cpp", *objs,
        "-fopenmp", "-lm", "-o", tmp_path / "app_cpp"])
    models.check(sh([tmp_path / "app_cpp", *models.args(MODELS)]).stdout, MODELS)


@pytest.mark.skipif(not HAVE_GXX, reason="no g++")
def test_cpp_header_without_exceptions(models, tmp_path):
    d = models.dirs["mlp"]
    (tmp_path / "t.cpp").write_text("""#include "mlp.hpp"
#include <cstdio>
#include <vector>
int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    mlp::Model missing("/nonexistent/mlp.weights");
    if (missing.ok() || missing.status() != mlp::ERR_IO) return 3;
    std::vector<float> x(mlp::inputs()[0].nbytes / sizeof(float), 0.5f), y(mlp::outputs()[0].nbytes / sizeof(float));
    if (missing.run(x.data(), y.data()) != MLP_ERR_NOT_INITIALIZED) return 4;
    std::FILE *f = std::fopen(argv[1], "rb");
    std::vector<unsigned char> junk(100, 0);
    if (!f) return 5;
    std::fclose(f);
    mlp::Model bad(junk.data(), junk.size());
    if (bad.status() != MLP_ERR_WEIGHTS_MAGIC) return 6;
    mlp::Model good(argv[1]);
    if (!good.ok() || good.run(x.data(), y.data()) != mlp::OK) return 7;
    std::printf("%s\\n", mlp::strerror(MLP_ERR_WEIGHTS_MAGIC));
    return 0;
}
""")
    m = models.c["mlp"].artifact.manifest
    sh(["gcc", "-O1", *STRICT, *m["target_cflags"], "-c", d / "mlp.c", "-o", tmp_path / "mlp.o"])  # no OpenMP
    sh(["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fno-exceptions", "-DMLP_NO_EXCEPTIONS",
        f"-I{d}", tmp_path / "t.cpp", tmp_path / "mlp.o", "-lm", "-o", tmp_path / "t"])
    proc = sh([tmp_path / "t", models.weights("mlp")])
    assert "magic" in proc.stdout


# --------------------------------------------------------------------------- Bazel

_BAZEL_SHIMS = {
    # Offline stand-ins for the rule repositories an (old, e.g. Debian's 4.x) Bazel
    # fetches from GitHub: they re-export the native rules.
    "rules_cc": ("cc", ["cc_library", "cc_binary", "cc_test", "cc_import", "cc_toolchain",
                        "cc_toolchain_suite", "objc_library"]),
    "rules_java": ("java", ["java_binary", "java_import", "java_library", "java_plugin", "java_test",
                            "java_package_configuration", "java_runtime", "java_toolchain"]),
}


@pytest.mark.skipif(shutil.which("bazel") is None, reason="bazel not installed (apt-get install bazel-bootstrap)")
@pytest.mark.parametrize("multi", [False, True], ids=["single", "multiversion"])
def test_bazel_cc_library(models, tmp_path, multi):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "WORKSPACE").write_text("")
    _mlp_into(models, ws / "mlp", multi)
    (ws / "app.c").write_text(consumer_c(["mlp"]))
    (ws / "BUILD.bazel").write_text('load("@rules_cc//cc:defs.bzl", "cc_binary")\n'
                                    'cc_binary(name = "app", srcs = ["app.c"], deps = ["//mlp"], '
                                    'data = ["//mlp:weights"])\n')
    overrides = []
    for repo, (pkg, rules) in _BAZEL_SHIMS.items():
        d = tmp_path / repo
        (d / pkg).mkdir(parents=True)
        (d / "WORKSPACE").write_text("")
        (d / pkg / "BUILD").write_text('exports_files(["defs.bzl"])\n')
        (d / pkg / "defs.bzl").write_text("".join(f"{r} = native.{r}\n" for r in rules))
        overrides.append(f"--override_repository={repo}={d}")
    platforms = Path("/usr/share/bazel/tools/platforms")
    if platforms.is_dir():
        overrides.append(f"--override_repository=platforms={platforms}")
    proc = sh(["bazel", f"--output_user_root={tmp_path / 'bazel-root'}", "--batch", "build", *overrides, "//:app"],
              cwd=ws, check=False)
    if proc.returncode != 0 and ("Error downloading" in proc.stderr or "Unknown host" in proc.stderr):
        pytest.skip("this Bazel needs to download rule repositories (offline)")
    assert proc.returncode == 0, proc.stderr[-4000:]
    app = ws / "bazel-bin" / "app"
    models.check(sh([app, *models.args(["mlp"], {"mlp": ws / "mlp" / "mlp.weights"})]).stdout, ["mlp"])


@pytest.mark.skipif(not HAVE_GXX, reason="no g++")
def test_cpp_header_embedded_weights(models, tmp_path):
    """Weights compiled into the library: <name>::Model() is ready to run; the pkg-config,
    Meson and Bazel files then have no weights file."""
    import pt2c

    c = models.c["mlp"]
    art = pt2c.compile(c.ep, tmp_path / "mlpe", target=c.artifact.manifest["target"], name="mlpe", embed_weights=True)
    d = Path(art.out_dir)
    assert not (d / "mlpe.weights").exists()
    assert "mlpe_weights_file = ''" in (d / "meson.build").read_text()
    assert "weights" not in (d / "BUILD.bazel").read_text().split("cc_library", 1)[1].split("data =", 1)[1].split("]")[0]
    n_in = int(np.prod(c.np_inputs[0].shape))
    (tmp_path / "t.cpp").write_text(f"""#include "mlpe.hpp"
#include <cstdio>
#include <vector>
int main(int argc, char **argv)
{{
    if (argc != 2) return 2;
    std::vector<float> x({n_in}), y(mlpe::outputs()[0].nbytes / sizeof(float));
    std::FILE *f = std::fopen(argv[1], "rb");
    if (!f || std::fread(x.data(), sizeof(float), x.size(), f) != x.size()) return 3;
    std::fclose(f);
    mlpe::Model model;
    model.run(x.data(), y.data());
    std::printf("mlp 0");
    for (std::size_t j = 0; j < y.size(); j++) std::printf(" %.9g", (double)y[j]);
    std::printf("\\n");
    return 0;
}}
""")
    m = art.manifest
    sh(["gcc", "-O1", *STRICT, *m["target_cflags"], "-c", d / "mlpe.c", "-o", tmp_path / "mlpe.o"])
    sh(["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{d}", tmp_path / "t.cpp",
        tmp_path / "mlpe.o", "-lm", "-o", tmp_path / "t"])
    models.check(sh([tmp_path / "t", models.inputs["mlp"]]).stdout, ["mlp"])
