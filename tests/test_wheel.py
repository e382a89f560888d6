"""`pt2c wheel` / pt2c.packaging.wheel: a wheel with the library, weights and a numpy-only
loader, installed into a fresh venv that cannot see torch (or pt2c), run, compared with eager."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_outputs_close, copy_artifact

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="linux wheel")

SCRIPT = """\
import sys
import numpy as np
import mlp
assert "torch" not in sys.modules and "pt2c" not in sys.modules
try:
    import torch  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("torch is importable in the test venv")
x = np.load(sys.argv[1])
model = mlp.load()
y = model(x)
assert isinstance(y, np.ndarray)
np.save(sys.argv[2], y)
assert np.array_equal(model.run({"x": x})[0], y)
ro = np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape)  # read-only, then column-major: same outputs
assert np.array_equal(model(ro), y) and np.array_equal(model(np.asfortranarray(x)), y)
try:
    model(x.astype(np.float64))
except mlp.ModelError as e:
    assert "dtype" in str(e)
else:
    raise SystemExit("no ModelError for a float64 input")
print("ok", mlp.manifest["name"], mlp.__file__)
"""


def _venv_with_numpy(root: Path) -> Path:
    """A plain venv (no system site-packages: no torch) with numpy; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    py = root / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--disable-pip-version-check",
                           "-q", "--only-binary", ":all:", "numpy"], capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        # offline: expose only the host's numpy to the venv (through a .pth to a folder of links)
        import numpy

        links = root / "numpy-only"
        links.mkdir()
        src = Path(numpy.__file__).parent
        for p in [src, *src.parent.glob("numpy.libs"), *src.parent.glob("numpy-*.dist-info")]:
            (links / p.name).symlink_to(p)
        site = next((root / "lib").glob("python3*/site-packages"))
        (site / "numpy-only.pth").write_text(str(links) + "\n")
    return py


def test_wheel_in_a_fresh_venv(mlp_compiled, tmp_path):
    out = copy_artifact(mlp_compiled.out_dir, tmp_path / "mlp")  # no build/: build_wheel builds it
    whl = __import__("pt2c.packaging.wheel", fromlist=["build_wheel"]).build_wheel(out, tmp_path / "dist")
    assert whl.name.startswith("mlp-") and whl.name.endswith("-py3-none-linux_x86_64.whl" if os.uname().machine == "x86_64"
                                                            else ".whl")
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        assert {"mlp/__init__.py", "mlp/libmlp.so", "mlp/mlp.weights", "mlp/manifest.json"} <= set(names)
        assert names[-1].endswith(".dist-info/RECORD")
        assert "Tag: py3-none-" in z.read(next(n for n in names if n.endswith("/WHEEL"))).decode()
        assert z.getinfo("mlp/libmlp.so").external_attr >> 16 & 0o777 == 0o755

    py = _venv_with_numpy(tmp_path / "venv")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--disable-pip-version-check",
                           "-q", "--no-deps", "--no-index", str(whl)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    np.save(tmp_path / "x.npy", mlp_compiled.np_inputs[0])
    (tmp_path / "run.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([str(py), "-I", str(tmp_path / "run.py"), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert str(tmp_path / "venv") in proc.stdout
    assert_outputs_close([np.load(tmp_path / "y.npy")], mlp_compiled.refs, what="wheel")


def test_wheel_is_deterministic_and_cli(mlp_compiled, tmp_path):
    from typer.testing import CliRunner

    from pt2c.cli import app

    lib = mlp_compiled.gcc_lib()
    from pt2c.packaging.wheel import build_wheel

    a = build_wheel(mlp_compiled.out_dir, tmp_path / "a", lib=lib)
    b = build_wheel(mlp_compiled.out_dir, tmp_path / "b", lib=lib)
    assert a.name == b.name
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()

    out = copy_artifact(mlp_compiled.out_dir, tmp_path / "mlp")
    r = CliRunner().invoke(app, ["wheel", str(out), "-o", str(tmp_path / "dist"), "--version", "2.0"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "dist" / a.name.replace(a.name.split("-")[1], "2.0")).is_file(), r.output
    r = CliRunner().invoke(app, ["wheel", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "manifest.json" in r.output


def test_wheel_passes_auditwheel_show(mlp_compiled, tmp_path):
    """The wheel's library needs only manylinux-allowed system libraries (libc, libm, libgomp)."""
    import shutil

    from pt2c.packaging.wheel import build_wheel

    exe = shutil.which("auditwheel")
    if exe is None:
        pytest.skip("auditwheel not installed (pip install auditwheel; scripts/setup.sh does)")
    whl = build_wheel(mlp_compiled.out_dir, tmp_path / "dist", lib=mlp_compiled.gcc_lib())
    r = subprocess.run([exe, "show", str(whl)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "is consistent with the following platform tag" in text and "manylinux_" in text, text
