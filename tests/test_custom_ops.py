"""Custom ops with users' C kernels (pt2c/custom.py, examples/custom_ops): compiled, built with the strict
warning flags, run and compared with the ops' own PyTorch implementations (tolerance: conftest's rule,
1e-4 * max(1, max|ref|)); from Python, and from the CLI in a fresh process where only the kernel files
are given; plus the errors (no kernel, a wrong prototype, a bad scratch expression) and --sanitize."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import pt2c
from pt2c.custom import KernelError
from pt2c.errors import UnsupportedError
from pt2c.runtime.verify import verify

from conftest import assert_outputs_close, build_and_run

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "custom_ops"
KERNELS = EXAMPLE / "kernels"
sys.path.insert(0, str(EXAMPLE))
import my_ops  # noqa: E402,F401  (registers mylib::*)


class Ops(torch.nn.Module):
    """All four ops, each fed by ATen ops pt2c compiles itself."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.norm_w = torch.nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = torch.ops.mylib.scaled_gelu(self.fc(x), 0.75)
        n = torch.ops.mylib.rms_norm(h, self.norm_w, 1e-5)
        med = torch.ops.mylib.median_rows(n)
        lo, hi = torch.ops.mylib.minmax(n)
        return n * 2.0, med + 1.0, hi - lo


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(4, 7, 16, generator=torch.Generator().manual_seed(0)),)


def _run(tmp_path: Path, model: torch.nn.Module, inputs: tuple, **kw) -> list[np.ndarray]:
    pt2c.compile(model, tmp_path / "out", example_inputs=inputs, target="x86_64-v3", **kw)
    return build_and_run(tmp_path / "out", [t.numpy() for t in inputs])


def test_three_kinds_of_user_kernels_match_their_pytorch_implementations(tmp_path: Path) -> None:
    """Elementwise with a float argument, one that needs scratch, one with two results (and a second input)."""
    m = Ops().eval()
    x = _inputs()
    art = pt2c.compile(m, tmp_path / "out", example_inputs=x, target="x86_64-v3", kernels=[KERNELS])
    outs = build_and_run(tmp_path / "out", [x[0].numpy()])
    with torch.no_grad():
        refs = [r.numpy() for r in m(*x)]
    assert_outputs_close(outs, refs, "custom ops")
    src = (tmp_path / "out" / "ops.c").read_text()
    assert '#include "custom_ops/mylib_median_rows.c"' in src and "(user kernel: custom_ops/mylib_minmax.c)" in src
    assert art.manifest["memory"]["scratch_bytes"] >= 16 * 4  # median_rows asked for one row of scratch
    assert {"custom_ops/pt2c_custom_op.h", "custom_ops/mylib_rms_norm.c"} <= set(art.files)
    # the kernel files are the user's, byte for byte
    assert (tmp_path / "out" / "custom_ops" / "mylib_minmax.c").read_text() == (KERNELS / "mylib_minmax.c").read_text()


def test_register_kernel_from_python_and_multi_versioned_build(tmp_path: Path) -> None:
    """pt2c.register_kernel with source text and a scratch function; a multi-versioned artifact includes
    the kernel in each code path (static: no duplicate symbols at link)."""
    class Med(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.mylib.median_rows(x * 3.0)

    src = (KERNELS / "mylib_median_rows.c").read_text().replace("pt2c: scratch", "(no line)")
    pt2c.register_kernel("mylib::median_rows", src, scratch=lambda ins, outs, args: ins[0].shape[-1] * 4)
    try:
        x = (torch.randn(5, 9),)
        pt2c.compile(Med(), tmp_path / "out", example_inputs=x, target="x86_64-v3,x86_64-v4")
        outs = build_and_run(tmp_path / "out", [x[0].numpy()])
    finally:
        pt2c.custom.unregister_kernel("mylib::median_rows")
    np.testing.assert_array_equal(outs[0], torch.ops.mylib.median_rows(x[0] * 3.0).numpy())


def test_missing_kernel_lists_every_custom_op_with_schema_and_prototype(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedError) as e:
        pt2c.compile(Ops().eval(), tmp_path / "out", example_inputs=_inputs())
    msg = str(e.value)
    for op in ("scaled_gelu", "rms_norm", "median_rows", "minmax"):
        assert f"mylib.{op}.default" in msg
    assert "mylib::rms_norm(Tensor x, Tensor weight, float eps) -> Tensor has no C kernel" in msg
    assert ("int mylib_minmax(const pt2c_tensor *out, const pt2c_tensor *in, const pt2c_arg *args, void *scratch, "
            "size_t scratch_bytes)") in msg
    assert "--kernels DIR" in msg
    assert not (tmp_path / "out").exists()


def test_wrong_prototype_is_a_compile_time_error_with_the_expected_one(tmp_path: Path) -> None:
    d = tmp_path / "k"
    d.mkdir()
    bad = (KERNELS / "mylib_minmax.c").read_text().replace("void *scratch,", "float *scratch,")
    (d / "mylib_minmax.c").write_text(bad)
    with pytest.raises(KernelError, match=r"(?s)wrong prototype:.*float \*scratch.*Expected prototype:\n    "
                                          r"int mylib_minmax\(const pt2c_tensor \*out"):
        pt2c.compile(Ops().eval(), tmp_path / "out", example_inputs=_inputs(), kernels=[d])
    (d / "mylib_minmax.c").write_text("int helper(int x) { return x; }\n")
    with pytest.raises(KernelError, match="expected one kernel function with the pt2c prototype, found 0"):
        pt2c.compile(Ops().eval(), tmp_path / "out", example_inputs=_inputs(), kernels=[d])
    with pytest.raises(KernelError, match="scratch expression .* is not allowed"):
        pt2c.register_kernel("mylib::minmax", (KERNELS / "mylib_minmax.c").read_text(),
                             scratch="__import__('os').system('true')")
    with pytest.raises(KernelError, match="not an operator name"):
        pt2c.register_kernel("minmax", (KERNELS / "mylib_minmax.c").read_text())


def test_decompose_uses_the_ops_python_implementation(tmp_path: Path) -> None:
    m = Ops().eval()
    x = _inputs()
    outs = _run(tmp_path, m, x, kernels=[KERNELS], decompose=["mylib::minmax", "mylib::scaled_gelu"])
    with torch.no_grad():
        refs = [r.numpy() for r in m(*x)]
    assert_outputs_close(outs, refs, "decomposed custom ops")
    ops = json.loads((tmp_path / "out" / "manifest.json").read_text())["op_counts"]
    assert ops["custom_call"] == 2  # rms_norm and median_rows; minmax and scaled_gelu became ATen ops


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(pt2c.__file__).parents[1])}
    return subprocess.run([sys.executable, "-m", "pt2c.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


def test_cli_fresh_process_with_only_the_kernel_files(tmp_path: Path) -> None:
    """A .pt2 saved where the ops are registered compiles in a fresh process that has only the kernel
    files (pt2c declares the ops from the archive's records); the built driver's outputs match the
    PyTorch outputs of the saving process.  verify then runs with --import (the reference)."""
    m = Ops().eval()
    x = _inputs()
    ep = torch.export.export(m, x)
    torch.export.save(ep, tmp_path / "ops.pt2")
    with torch.no_grad():
        refs = [r.numpy() for r in m(*x)]
    r = _cli("compile", "ops.pt2", "-o", "out", "--kernels", str(KERNELS), "--target", "x86_64-v3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "4 custom op kernel(s) in custom_ops/" in r.stdout
    outs = build_and_run(tmp_path / "out", [x[0].numpy()])
    assert_outputs_close(outs, refs, "CLI-compiled custom ops")

    r = _cli("verify", "ops.pt2", "--kernels", str(KERNELS), cwd=tmp_path)  # no PyTorch implementation
    assert r.returncode == 2 and "has no implementation in this process" in r.stderr and "--import" in r.stderr
    r = _cli("verify", "ops.pt2", "--kernels", str(KERNELS), "--import", str(EXAMPLE / "my_ops.py"), cwd=tmp_path)
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    r = _cli("compile", "ops.pt2", "-o", "out2", cwd=tmp_path)  # no kernels: every op listed, with its schema
    assert r.returncode == 2 and r.stderr.count("has no C kernel") == 4, r.stderr


def test_sanitize_catches_a_kernel_that_writes_out_of_bounds(tmp_path: Path) -> None:
    d = tmp_path / "k"
    d.mkdir()
    for f in KERNELS.glob("*.c"):
        (d / f.name).write_text(f.read_text())
    gelu = d / "mylib_scaled_gelu.c"
    gelu.write_text(gelu.read_text().replace("i < in[0].numel", "i <= in[0].numel"))  # one element too far
    m = Ops().eval()
    rep = verify(m, example_inputs=_inputs(), kernels=[KERNELS], sanitize=True, cc="gcc")
    assert rep.passed
    from pt2c.runtime.runner import RunError

    with pytest.raises(RunError, match=r"(?s)AddressSanitizer: heap-buffer-overflow.*mylib_scaled_gelu"):
        verify(m, example_inputs=_inputs(), kernels=[d], sanitize=True, cc="gcc")


def test_python_values_fixed_at_export_are_not_inputs(tmp_path: Path) -> None:
    """use_cache=False-style keyword arguments compile without a wrapper: a bool and a float, fixed at export."""
    class Kw(torch.nn.Module):
        def forward(self, x: torch.Tensor, use_cache: bool = True, scale: float = 1.0) -> torch.Tensor:
            return x * scale if use_cache else x - scale

    x = torch.randn(3, 4)
    art = pt2c.compile(Kw(), tmp_path / "out", example_inputs=(x,), example_kwargs={"use_cache": False, "scale": 2.5})
    assert [i["name"] for i in art.manifest["inputs"]] == ["x"]
    outs = build_and_run(tmp_path / "out", [x.numpy()])
    np.testing.assert_allclose(outs[0], (x - 2.5).numpy(), rtol=0, atol=0)
    rep = verify(Kw(), example_inputs=(x,), example_kwargs={"use_cache": False, "scale": 2.5})
    assert rep.passed


def test_worked_example_llama_with_a_fused_c_rms_norm(tmp_path: Path) -> None:
    """docs/custom-ops.md's example end to end: transformers Llama with RMS norms swapped for mylib::rms_norm,
    exported with use_cache=False (no wrapper), compiled with the C kernel, verified, built with CMake and run."""
    pytest.importorskip("transformers")
    r = subprocess.run([sys.executable, str(EXAMPLE / "llama_rms_norm.py"), str(tmp_path / "ex")], capture_output=True,
                       text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(Path(pt2c.__file__).parents[1])})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "5 RMS norms call mylib::rms_norm" in r.stdout and "verify: PASS" in r.stdout
    assert "ran from C: logits [1, 16, 1000]" in r.stdout


@torch.library.custom_op("mylib::tagged_scale", mutates_args=())
def tagged_scale(x: torch.Tensor, tag: str) -> torch.Tensor:
    return x * (2.0 if tag == 'say "hi"\\?' else 1.0)


@tagged_scale.register_fake
def _(x: torch.Tensor, tag: str) -> torch.Tensor:
    return torch.empty_like(x)


def test_string_argument_and_buffer_names_that_match_the_kernels_locals(tmp_path: Path) -> None:
    """A str argument with quotes, a backslash and a '?' reaches the kernel escaped (codegen/escape.py's
    c_string), and buffers named `in` / `out` / `args` (module names) do not collide with the call's locals."""
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.out = torch.nn.Linear(4, 4)
            self.args = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.args(torch.ops.mylib.tagged_scale(self.out(x), 'say "hi"\\?'))

    src = ('#include <string.h>\n#include "pt2c_custom_op.h"\n'
           "int mylib_tagged_scale(const pt2c_tensor *out, const pt2c_tensor *in, const pt2c_arg *args,\n"
           "                       void *scratch, size_t scratch_bytes)\n{\n"
           "    const float *x = (const float *)in[0].data;\n    float *y = (float *)out[0].data;\n"
           "    const float s = args[0].kind == PT2C_ARG_STR && strcmp(args[0].s, \"say \\\"hi\\\"\\\\\\?\") == 0 ? 2.0f : 1.0f;\n"
           "    int64_t i;\n    (void)scratch;\n    (void)scratch_bytes;\n"
           "    for (i = 0; i < in[0].numel; i++) y[i] = x[i] * s;\n    return 0;\n}\n")
    pt2c.register_kernel("mylib::tagged_scale", src)
    try:
        m = M().eval()
        x = torch.randn(3, 4)
        outs = _run(tmp_path, m, (x,))
    finally:
        pt2c.custom.unregister_kernel("mylib::tagged_scale")
    with torch.no_grad():
        assert_outputs_close(outs, [m(x).numpy()], "str argument")
