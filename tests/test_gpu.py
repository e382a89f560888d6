"""The GPU backend (--target opencl | cuda[:sm_XX,...]) without a GPU.

- OpenCL artifacts of every model family and of a sixth of the op table run on the CPU OpenCL driver pocl
  (scripts/setup.sh installs it) and are compared with eager PyTorch (tolerance: 1e-4 * max(1, max|ref|)
  for the families, the op table's own per row);
- CUDA artifacts of every family are compiled by nvcc (CUDA 13 in /usr/local/cuda) for sm_75, sm_80 and
  sm_90, warnings as errors; on a machine without a GPU their init must say so (ERR_NO_DEVICE);
- bad input: no OpenCL platform, an index out of range, a truncated or foreign weights blob, ops the GPU
  backend cannot run (all listed at once).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import pt2c
from conftest import assert_outputs_close, eager
from pt2c import zoo
from pt2c.errors import UnsupportedError
from pt2c.runtime.build import BuildError, find_nvcc
from pt2c.runtime.runner import RunError
from pt2c.targets import get_targets

HERE = Path(__file__).parent
STRICT = "-O1 -std=c99 -Wall -Wextra -Werror -pedantic"
FAMILIES = ["mlp", "resnet18", "mobilenetv2", "bert", "gpt2", "llama", "lstm", "gru"]


def _pocl() -> bool:
    return Path("/etc/OpenCL/vendors/pocl.icd").exists() and Path("/usr/include/CL/cl.h").exists()


def _nvcc() -> str | None:
    try:
        return find_nvcc()
    except BuildError:
        return None


needs_pocl = pytest.mark.skipif(not _pocl(), reason="the CPU OpenCL driver pocl is not installed (scripts/setup.sh)")
needs_nvcc = pytest.mark.skipif(_nvcc() is None, reason="nvcc not found (CUDA toolkit in /usr/local/cuda)")


def _compile(model, inputs, out: Path, target: str, name: str):
    return pt2c.compile(model, out, example_inputs=inputs, target=target, name=name)


# ---------------------------------------------------------------- every family on OpenCL (pocl)

@needs_pocl
@pytest.mark.parametrize("family", FAMILIES)
def test_family_opencl(family, tmp_path):
    model, inputs = zoo.FAMILIES[family]("tiny")
    art = _compile(model, inputs, tmp_path / family, "opencl", family)
    assert art.manifest["backend"] == "opencl" and (tmp_path / family / f"{family}.cl").exists()
    lib = pt2c.build(tmp_path / family, cflags=STRICT)
    m = pt2c.load(tmp_path / family, lib=lib)
    assert m.isa.startswith("opencl: ")
    outs = m.run([t.numpy() for t in inputs])
    assert_outputs_close(outs, eager(model, inputs), f"{family} on OpenCL")
    assert_outputs_close(m.run([t.numpy() for t in inputs]), eager(model, inputs), f"{family}, second run")
    m.close()


@needs_pocl
@pytest.mark.parametrize("arch", ["t5", "whisper", "swin", "mixtral", "convnext", "segformer"])
def test_hf_opencl(arch, tmp_path):
    """A sample of tests/test_hf_models.py's architectures (all 38 pass on OpenCL when run by hand):
    encoder-decoder, audio, windowed attention, top-k routed experts, depthwise CNN, upsampling decoder."""
    sys.path.insert(0, str(HERE))
    import test_hf_models

    model, inputs = test_hf_models.make(arch)
    pt2c.compile(model, tmp_path / arch, example_inputs=inputs, target="opencl", name=arch)
    m = pt2c.load(tmp_path / arch, lib=pt2c.build(tmp_path / arch, cflags=STRICT))
    assert_outputs_close(m.run([x.numpy() for x in inputs]), eager(model, inputs), f"{arch} on OpenCL")


# ---------------------------------------------------------------- the op table on OpenCL

def _op_cases():
    sys.path.insert(0, str(HERE))
    import test_ops

    return test_ops, [c for c in test_ops.CASES[::6] if not c.xfail]


GPU_UNSUPPORTED = HERE / "gpu_unsupported.json"  # rows of the sample the GPU backend refuses (kept current)


@needs_pocl
def test_op_table_opencl(tmp_path):
    """Every sixth row of tests/test_ops.py's table through the OpenCL path: each either matches eager within
    the row's tolerance, or is refused at compile time with an UnsupportedError naming the GPU target; the
    refused rows are exactly those gpu_unsupported.json lists (a new refusal or a newly supported row fails
    until the list is updated)."""
    T, cases = _op_cases()
    refused, failed = [], []
    for i, c in enumerate(cases):
        g = torch.Generator().manual_seed(1000 + i)
        xs = [T.make_input(s, g) for s in c.specs]
        mod = T.Mod(c.fn).eval()
        with torch.no_grad():
            ref = [t.detach().numpy().copy() for t in T._flatten(mod(*[t.clone() for t in xs]))]
        ep = torch.export.export(mod, tuple(t.clone() for t in xs), strict=False)
        d = tmp_path / f"op{i}"
        try:
            pt2c.compile(ep, d, target="opencl", name=f"op{i}")
        except UnsupportedError as e:
            assert "on a GPU target" in str(e), f"{c.id}: {e}"
            refused.append(c.id)
            continue
        try:
            b = T.Built(f"op{i}", d, [t.numpy() for t in xs], ref, lib=pt2c.build(d, cflags=STRICT))
            T._check(c, b)
        except Exception as e:  # collected: one report for the whole table
            failed.append(f"{c.id}: {str(e)[:400]}")
    assert not failed, "\n".join(failed)
    known = json.loads(GPU_UNSUPPORTED.read_text())
    assert sorted(refused) == sorted(known), (f"newly refused: {sorted(set(refused) - set(known))}; "
                                              f"newly supported: {sorted(set(known) - set(refused))}")
    assert len(cases) - len(refused) >= 90  # the table's reach on the GPU path


# ---------------------------------------------------------------- CUDA: built by nvcc for three architectures

@needs_nvcc
@pytest.mark.parametrize("family", ["mlp", "resnet18", "mobilenetv2", "bert", "gpt2", "llama", "lstm"])
def test_family_cuda_builds(family, tmp_path):
    model, inputs = zoo.FAMILIES[family]("tiny")
    art = _compile(model, inputs, tmp_path / family, "cuda:sm_75,sm_80,sm_90", family)
    assert art.manifest["gpu_archs"] == ["sm_75", "sm_80", "sm_90"]
    cmd = [_nvcc(), "-O1", "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror",
           *get_targets("cuda:sm_75,sm_80,sm_90")[0].cflags, "-Xcompiler", "-fPIC", "-c", f"{family}.cu", "-o",
           f"{family}.o"]
    p = subprocess.run(cmd, cwd=tmp_path / family, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-4000:]
    obj = subprocess.run(["cuobjdump", "--list-elf", f"{family}.o"], cwd=tmp_path / family, capture_output=True,
                         text=True) if shutil.which("cuobjdump") else None
    if obj is not None and obj.returncode == 0:
        for sm in ("sm_75", "sm_80", "sm_90"):
            assert sm in obj.stdout


@needs_nvcc
def test_cuda_without_device(tmp_path):
    """Built with its own Makefile; on a machine without a GPU or driver, init says so (no crash, nothing
    held); with a GPU it runs and matches eager."""
    model, inputs = zoo.mlp("tiny")
    _compile(model, inputs, tmp_path / "m", "cuda:sm_80", "mcu")
    lib = pt2c.build(tmp_path / "m")
    # the header is plain C99: a C program calls the library (init, the graph switch, strerror, release)
    prog = tmp_path / "c.c"
    prog.write_text(textwrap.dedent("""\
        #include <stdio.h>
        #include "mcu.h"
        int main(void) {
            static unsigned char w[1 << 16];
            FILE *f = fopen("m/mcu.weights", "rb");
            size_t n = fread(w, 1, sizeof(w), f);
            mcu_ctx ctx;
            int rc;
            fclose(f);
            rc = mcu_init(&ctx, w, n, NULL, 0);
            printf("%d %d %s\\n", rc, mcu_use_graph(&ctx, 1), mcu_strerror(rc));
            mcu_release(&ctx);
            return 0;
        }
        """))
    subprocess.run(["gcc", *STRICT.split(), "-I", str(tmp_path / "m"), str(prog), str(lib), "-o", str(tmp_path / "c"),
                    f"-Wl,-rpath,{lib.parent}"], check=True)
    out = subprocess.run([str(tmp_path / "c")], cwd=tmp_path, capture_output=True, text=True).stdout
    try:
        m = pt2c.load(tmp_path / "m", lib=lib)
    except RunError as e:
        assert "status 15" in str(e) and "no GPU device or driver" in str(e)
        assert out.startswith("15 8 no GPU device"), out  # (use_graph on a ctx init refused: ERR_NOT_INITIALIZED)
        return
    assert out.startswith("0 0 ok"), out
    assert_outputs_close(m.run([t.numpy() for t in inputs]), eager(model, inputs), "mlp on CUDA")


@needs_nvcc
def test_cuda_two_models_link_into_one_library(tmp_path):
    """The kernels have internal linkage (as the CPU kernels are static): two models' objects link together."""
    objs = []
    for name, (m, x) in (("one", zoo.mlp("tiny")), ("two", (torch.nn.Linear(8, 3), (torch.randn(2, 8),)))):
        _compile(m, x, tmp_path / name, "cuda:sm_80", name)
        objs.append(tmp_path / f"{name}.o")
        subprocess.run([_nvcc(), "-O1", "-arch=sm_80", "-Xcompiler", "-fPIC", "-c", str(tmp_path / name / f"{name}.cu"),
                        "-o", str(objs[-1])], check=True, capture_output=True)
    p = subprocess.run([_nvcc(), "-shared", "-o", str(tmp_path / "both.so"), *map(str, objs)], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr[-2000:]


def test_cuda_target_spec():
    t = get_targets("cuda:sm_80,sm_90")[0]
    assert t.backend == "cuda" and t.gpu_archs == (80, 90)
    assert t.cflags[-1] == "-gencode=arch=compute_90,code=compute_90"  # PTX for newer GPUs
    assert get_targets("cuda")[0].gpu_archs == (75, 80, 90)
    for bad, what in (("cuda:sm_61", "older"), ("cuda:sm_8x", "not a CUDA architecture"),
                      ("cuda:sm_80,sm_80", "more than once")):
        with pytest.raises(ValueError, match=what):
            get_targets(bad)


# ---------------------------------------------------------------- bad input

@pytest.fixture(scope="module")
def embed_cl(tmp_path_factory):
    """An OpenCL artifact with a run-time index (an embedding), built."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.e = torch.nn.Embedding(10, 4)

        def forward(self, i):
            return self.e(i) * 2.0

    torch.manual_seed(0)
    m, x = M().eval(), (torch.tensor([[1, 2, 9]]),)
    d = tmp_path_factory.mktemp("gpu") / "emb"
    pt2c.compile(m, d, example_inputs=x, target="opencl", name="emb")
    return m, x, d, pt2c.build(d, cflags=STRICT)


@needs_pocl
def test_opencl_index_out_of_range(embed_cl):
    m, x, d, lib = embed_cl
    model = pt2c.load(d, lib=lib)
    assert_outputs_close(model.run([x[0].numpy()]), eager(m, x), "embedding")
    with pytest.raises(RunError, match="status 9: an index input is out of range"):
        model.run([np.array([[1, 10, 2]])])
    assert_outputs_close(model.run([x[0].numpy()]), eager(m, x), "embedding after an error")


@needs_pocl
def test_opencl_weights_and_platform_errors(embed_cl, tmp_path):
    """A truncated blob, a corrupted one, the blob of another compile and a machine without an OpenCL
    platform: each a clear status from init (nothing held afterwards), in a C program on the library's API."""
    _, _, d, lib = embed_cl
    prog = tmp_path / "t.c"
    prog.write_text(textwrap.dedent("""\
        #include <stdio.h>
        #include <string.h>
        #include "emb.h"
        int main(int argc, char **argv) {
            static unsigned char buf[1 << 20];
            FILE *f = fopen(argv[1], "rb");
            size_t n = fread(buf, 1, sizeof(buf), f);
            emb_ctx ctx;
            int rc;
            fclose(f);
            if (argc > 2 && strcmp(argv[2], "truncate") == 0) n -= 8;
            if (argc > 2 && strcmp(argv[2], "flip") == 0) buf[100] ^= 1;
            rc = emb_init(&ctx, buf, n, NULL, 0);
            printf("%d %s | %s\\n", rc, emb_strerror(rc), emb_last_error(&ctx));
            emb_release(&ctx);
            return 0;
        }
        """))
    exe = tmp_path / "t"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Werror", "-I", str(d), str(prog), str(lib), "-o", str(exe),
                    f"-Wl,-rpath,{lib.parent}"], check=True)
    other = tmp_path / "other"
    pt2c.compile(torch.nn.Linear(3, 2), other, example_inputs=(torch.randn(1, 3),), target="opencl", name="other")

    def run(weights: Path, *a: str, **env: str) -> str:
        return subprocess.run([str(exe), str(weights), *a], capture_output=True, text=True,
                              env={**os.environ, **env}).stdout

    w = d / "emb.weights"
    assert run(w).startswith("0 ok"), run(w)
    assert run(w, "truncate").startswith("3 "), run(w, "truncate")  # ERR_WEIGHTS_TRUNCATED
    assert run(w, "flip").startswith("7 "), run(w, "flip")  # ERR_WEIGHTS_CORRUPT
    assert run(other / "other.weights").startswith("6 ")  # ERR_WEIGHTS_MISMATCH
    empty = tmp_path / "vendors"
    empty.mkdir()
    out = run(w, OCL_ICD_VENDORS=str(empty))
    assert out.startswith("15 no GPU device or driver"), out


@needs_pocl
def test_opencl_device_pointers(embed_cl, tmp_path):
    """run_device on the application's own cl_mem buffers and queue, then run_status."""
    _, x, d, lib = embed_cl
    prog = tmp_path / "dev.c"
    prog.write_text(textwrap.dedent("""\
        #define CL_TARGET_OPENCL_VERSION 120
        #include <CL/cl.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include "emb.h"
        int main(int argc, char **argv) {
            static unsigned char w[1 << 20];
            FILE *f = fopen(argv[1], "rb");
            size_t n = fread(w, 1, sizeof(w), f);
            int64_t idx[3] = {1, 2, 9}, bad[3] = {1, 2, 11};
            float y[12];
            emb_ctx ctx;
            cl_int e;
            cl_mem in, out;
            const void *ins[1];
            void *outs[1];
            int rc, k;
            fclose(f);
            (void)argc;
            if ((rc = emb_init(&ctx, w, n, NULL, 0)) != 0) return printf("init %d\\n", rc), 1;
            in = clCreateBuffer((cl_context)ctx.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof(idx), idx, &e);
            out = clCreateBuffer((cl_context)ctx.context, CL_MEM_READ_WRITE, sizeof(y), NULL, &e);
            ins[0] = in;
            outs[0] = out;
            rc = emb_run_device(&ctx, ins, outs, NULL);
            printf("run %d status %d", rc, emb_run_status(&ctx, NULL));
            clEnqueueReadBuffer((cl_command_queue)ctx.queue, out, CL_TRUE, 0, sizeof(y), y, 0, NULL, NULL);
            for (k = 0; k < 12; k++) printf(" %.6f", y[k]);
            clEnqueueWriteBuffer((cl_command_queue)ctx.queue, in, CL_TRUE, 0, sizeof(bad), bad, 0, NULL, NULL);
            rc = emb_run_device(&ctx, ins, outs, NULL);
            printf(" | bad %d status %d\\n", rc, emb_run_status(&ctx, NULL));
            clReleaseMemObject(in);
            clReleaseMemObject(out);
            emb_release(&ctx);
            return 0;
        }
        """))
    exe = tmp_path / "dev"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Werror", "-I", str(d), str(prog), str(lib), "-lOpenCL", "-o",
                    str(exe), f"-Wl,-rpath,{lib.parent}"], check=True)
    out = subprocess.run([str(exe), str(d / "emb.weights")], capture_output=True, text=True).stdout
    head, bad = out.split("|")
    words = head.split()
    assert words[:4] == ["run", "0", "status", "0"], out
    got = np.array([float(v) for v in words[4:]], np.float32).reshape(1, 3, 4)
    assert_outputs_close([got], eager(embed_cl[0], x), "run_device")
    assert bad.split() == ["bad", "0", "status", "9"], out


@needs_pocl
def test_opencl_matmul_shapes(tmp_path):
    """Both GEMM kernels (the tiled one and the few-row one) across shapes that are not multiples of their tiles,
    batched and broadcast operands, transposed weights, bias / residual / activation epilogues."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(37, 70)
            self.b = torch.nn.Linear(70, 5, bias=False)

        def forward(self, x1, x3, y, z):
            h = torch.nn.functional.gelu(self.a(x1))            # 1 row: pt2c_gemv
            h3 = torch.relu(self.a(x3)) + 1.0                   # 3 rows
            return self.b(h) + 0.5, self.b(h3), torch.bmm(y, z) + y[:, :, :1], torch.matmul(y, z[0])

    torch.manual_seed(0)
    m = M().eval()
    xs = (torch.randn(1, 37), torch.randn(3, 37), torch.randn(2, 67, 33), torch.randn(2, 33, 130))
    pt2c.compile(m, tmp_path / "mm", example_inputs=xs, target="opencl", name="mm")
    src = (tmp_path / "mm" / "mm.c").read_text()
    assert "pt2c_gemv" in src and "pt2c_gemm" in src
    model = pt2c.load(tmp_path / "mm", lib=pt2c.build(tmp_path / "mm", cflags=STRICT))
    assert_outputs_close(model.run([x.numpy() for x in xs]), eager(m, xs), "matmul shapes")


@needs_pocl
def test_opencl_names_that_are_keywords(tmp_path):
    """Inputs named like OpenCL C keywords and types (`local`, `half`): generated kernels prefix their
    parameters, so no model's names can collide with the dialect's."""
    class M(torch.nn.Module):
        def forward(self, local, half):
            return torch.relu(local) * half + local[:, :2].sum()

    xs = (torch.randn(3, 4), torch.randn(3, 4))
    pt2c.compile(M(), tmp_path / "kw", example_inputs=xs, target="opencl", name="kw")
    model = pt2c.load(tmp_path / "kw", lib=pt2c.build(tmp_path / "kw", cflags=STRICT))
    assert_outputs_close(model.run([x.numpy() for x in xs]), eager(M(), xs), "keyword names")


def test_gpu_unsupported_listed_at_once(tmp_path):
    class M(torch.nn.Module):
        def forward(self, x, y):
            return torch.cumsum(x, 0) + y.double().sum().float()

    with pytest.raises(UnsupportedError) as e:
        pt2c.compile(M(), tmp_path / "u", example_inputs=(torch.randn(4), torch.randn(4)), target="opencl")
    text = str(e.value)
    assert "on a GPU target" in text and "cumsum" in text and "float64" in text, text
    assert not (tmp_path / "u").exists()  # nothing written


def test_gpu_rejects_embedded_weights(tmp_path):
    with pytest.raises(ValueError, match="GPU artifacts load their weights"):
        pt2c.compile(torch.nn.Linear(2, 2), tmp_path / "e", example_inputs=(torch.randn(1, 2),), target="opencl",
                     embed_weights=True)
