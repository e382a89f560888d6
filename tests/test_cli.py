"""The pt2c command line: compile -> build -> run -> verify on a tiny MLP, inspect, targets, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from typer.testing import CliRunner  # noqa: E402

from pt2c import zoo  # noqa: E402
from pt2c.cli import app  # noqa: E402
from pt2c.runtime.verify import OutputCheck, VerifyReport, compare  # noqa: E402

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def mlp_pt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    model, ex = zoo.mlp("tiny")
    ep = torch.export.export(model, ex)
    path = d / "mlp.pt2"
    torch.export.save(ep, path)
    x = np.random.default_rng(1).standard_normal(tuple(ex[0].shape)).astype(np.float32)
    np.save(d / "x.npy", x)
    with torch.inference_mode():
        ref = model(torch.from_numpy(x)).numpy()
    return path, d / "x.npy", ref


@pytest.fixture(scope="module")
def built(mlp_pt2):
    """(artifact dir, x.npy, reference output) after `pt2c compile` + `pt2c build` (default gcc/cc)."""
    path, xnpy, ref = mlp_pt2
    out = path.parent / "art"
    r = invoke("compile", path, "-o", out, "--target", "generic", "-O", "1")
    assert r.exit_code == 0, r.output
    assert "weights" in r.output and "lower bound" in r.output
    r = invoke("build", out)
    assert r.exit_code == 0, r.output
    lib = r.stdout.strip().splitlines()[-1]
    assert lib.endswith("libmlp.so") and (out / "build" / "libmlp.so").is_file()
    return out, xnpy, ref


def test_compile_records_command(built):
    out, _, _ = built
    m = json.loads((out / "manifest.json").read_text())
    assert m["target"] == "generic"
    assert "pt2c compile" in (out / "mlp.c").read_text()


def test_run_positional_and_named(built, tmp_path):
    out, xnpy, ref = built
    r = invoke("run", out, "-i", xnpy, "-o", tmp_path / "a")
    assert r.exit_code == 0, r.output
    assert "[4, 10]" in r.output
    np.testing.assert_allclose(np.load(tmp_path / "a" / "output.npy"), ref, rtol=1e-4, atol=1e-5)
    r = invoke("run", out, "-i", f"x={xnpy}", "-o", tmp_path / "b")
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(tmp_path / "b" / "output.npy"), ref, rtol=1e-4, atol=1e-5)


def test_run_wrong_shape_is_clear(built, tmp_path):
    out, _, _ = built
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((3, 32), np.float32))
    r = invoke("run", out, "-i", bad, "-o", tmp_path)
    assert r.exit_code == 2
    assert "expected shape (4, 32)" in r.output and "Traceback" not in r.output
    r = invoke("run", out, "-i", f"y={bad}")
    assert r.exit_code == 2 and "unknown input name 'y'" in r.output
    r = invoke("run", out)
    assert r.exit_code == 2 and "missing input" in r.output
    r = invoke("run", out, "-i", tmp_path / "nope.npy")
    assert r.exit_code == 2 and "no such .npy file" in r.output


def test_run_does_not_import_torch(built, tmp_path):
    out, xnpy, _ = built
    code = textwrap.dedent(f"""
        import sys
        from pt2c.cli import app
        try:
            app(["run", {str(out)!r}, "-i", {str(xnpy)!r}, "-o", {str(tmp_path)!r}])
        except SystemExit as e:
            assert not e.code, e.code
        assert "torch" not in sys.modules, "pt2c run imported torch"
        print("NO_TORCH")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "NO_TORCH" in p.stdout, p.stdout + p.stderr
    assert (tmp_path / "output.npy").is_file()


def test_verify_pass(mlp_pt2, tmp_path):
    path, xnpy, _ = mlp_pt2
    r = invoke("verify", path, "-i", xnpy, "--tol", "1e-4", "-o", tmp_path / "v")
    assert r.exit_code == 0, r.output
    assert "PASS" in r.output and "max abs err" in r.output
    assert (tmp_path / "v" / "build" / "libmlp.so").is_file()


def test_verify_fail_exits_1(mlp_pt2, monkeypatch):
    import pt2c.runtime.verify as v

    def fake(*a, **k):
        rep = VerifyReport(name="mlp", target="native", tol=1e-4, input_source="example")
        rep.outputs.append(OutputCheck("output", (4, 10), "float32", 0.5, 0.5, 1.0, 1e-4, False))
        return rep

    monkeypatch.setattr(v, "verify", fake)
    r = invoke("verify", mlp_pt2[0])
    assert r.exit_code == 1 and "FAIL" in r.output


def test_inspect(built, mlp_pt2):
    out, _, _ = built
    for target in (out, mlp_pt2[0]):
        r = invoke("inspect", target)
        assert r.exit_code == 0, r.output
        assert "workspace" in r.output and "lower bound" in r.output
        assert "matmul" in r.output or "linear" in r.output
        assert "FLOPs" in r.output


def test_targets():
    r = invoke("targets")
    assert r.exit_code == 0
    assert "x86_64-v3" in r.output and "-march=x86-64-v3" in r.output


@pytest.mark.parametrize("cmd", ["compile", "verify", "inspect"])
def test_corrupt_and_missing_pt2(tmp_path, cmd):
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(np.random.default_rng(0).bytes(512))
    extra = ["-o", str(tmp_path / "o")] if cmd == "compile" else []
    r = invoke(cmd, bad, *extra)
    assert r.exit_code == 2, r.output
    assert "not a .pt2 archive" in r.output and "Traceback" not in r.output
    r = invoke(cmd, tmp_path / "missing.pt2", *extra)
    assert r.exit_code == 2, r.output
    assert "no such file" in r.output and "Traceback" not in r.output


def test_bad_target_and_name(mlp_pt2, tmp_path):
    r = invoke("compile", mlp_pt2[0], "-o", tmp_path / "o", "--target", "pentium")
    assert r.exit_code == 2 and "unknown target 'pentium'" in r.output and "Traceback" not in r.output
    r = invoke("compile", mlp_pt2[0], "-o", tmp_path / "o", "--name", "1bad-name")
    assert r.exit_code == 2 and "C identifier" in r.output


def test_build_missing_folder(tmp_path):
    r = invoke("build", tmp_path / "nothing")
    assert r.exit_code == 2 and "does not exist" in r.output and "Traceback" not in r.output


def test_compare_rule():
    ref = np.array([0.0, 2.0, -4.0], np.float32)
    # float: max|err| <= tol * max(1, max|ref|) = 1e-4 * 4
    assert compare("o", ref + np.float32(3e-4), ref, 1e-4).passed
    c = compare("o", ref + np.float32(6e-4), ref, 1e-4)
    assert not c.passed and c.tol_abs == pytest.approx(4e-4) and c.ref_scale == 4.0
    small = np.array([0.1, -0.2], np.float32)  # scale < 1: absolute tol
    assert not compare("o", small + np.float32(2e-4), small, 1e-4).passed
    nan = np.array([np.nan, 1.0], np.float32)
    assert compare("o", nan.copy(), nan, 1e-4).passed
    assert not compare("o", np.array([0.0, 1.0], np.float32), nan, 1e-4).passed
    ints = np.array([1, 2, 3], np.int64)
    assert compare("i", ints.copy(), ints, 1e-4).passed
    c = compare("i", ints + np.array([0, 0, 1]), ints, 1.0)
    assert not c.passed and c.tol_abs == 0
    assert not compare("o", np.zeros((2, 3)), np.zeros((3, 2)), 1e-4).passed


def test_compile_no_winograd_and_multiversion(tmp_path):
    """--no-winograd keeps 3x3 convs on im2col; a comma list of x86-64 levels multi-versions."""
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU()).eval()
    pt2 = tmp_path / "c.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(1, 16, 16, 16),)), pt2)
    for extra, wino in (([], True), (["--no-winograd"], False)):
        out = tmp_path / f"w{int(wino)}"
        r = invoke("compile", pt2, "-o", out, "--target", "x86_64,x86_64-v3", *extra)
        assert r.exit_code == 0, r.output
        src = (out / "c.c").read_text()
        assert ("pt2c_conv2d_wino(" in src) == wino and ("--no-winograd" in src) == (not wino)
        assert (out / "c_x86_64_v3.c").is_file()
        assert json.loads((out / "manifest.json").read_text())["target"] == "x86_64,x86_64-v3"
    r = invoke("compile", pt2, "-o", tmp_path / "bad", "--target", "x86_64,riscv64")
    assert r.exit_code != 0 and "multi-versioning combines the x86-64 levels" in r.output


def test_compile_reports_its_stages(tmp_path):
    """pt2c.compile(progress=...) names each stage as it starts (pt2c compile shows them beside its spinner)."""
    import torch

    import pt2c

    seen = []
    pt2c.compile(torch.nn.Linear(4, 2), tmp_path / "p", example_inputs=(torch.randn(1, 4),), progress=seen.append)
    assert seen == ["loading", "decomposing", "lowering", "optimizing", "planning memory", "writing"]
