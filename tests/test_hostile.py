"""Hostile input (issue #25): .pt2 files, command lines, output folders and artifact folders written
to hurt the machine that compiles, builds or runs them.

Every case runs the real CLI (in process, through typer's runner, under a time limit; the cases that
could hang or exhaust memory run as a subprocess with a time limit and an address-space limit) and
checks the four promises of docs/security.md:

* no code from the input runs: every payload tries to create a canary file, which must not exist;
* no file outside the output folder is created, changed or deleted (a snapshot of the case's
  folder, minus the output folder, before and after);
* no Python traceback: exit code 0 (accepted) or 2 (a clean error, whose text is checked);
* bounded: seconds, not minutes; memory capped where an input could balloon.

The C API and runner cases (edited manifests, NULL pointers, header / library skew, threads) and
the code-injection fuzz of every string field are at the end.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import pt2c
from pt2c.cli import app
from pt2c.runtime.runner import RunError

from conftest import STRICT_CFLAGS

runner = CliRunner()
CASE_SECONDS = 120


# --------------------------------------------------------------------------- the base program


class Base(torch.nn.Module):
    """A linear layer, an embedding (an index input), a buffer and a lifted constant."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)
        self.emb = torch.nn.Embedding(10, 4)
        self.register_buffer("scale", torch.full((4,), 0.5))

    def forward(self, x, idx):
        return torch.relu(self.lin(x)) * self.scale + self.emb(idx) + torch.tensor([1.0, 2.0, 3.0, 4.0])


@pytest.fixture(scope="module")
def base_pt2(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("hostile_base")
    ep = torch.export.export(Base().eval(), (torch.randn(3, 8), torch.tensor([1, 2, 3])))
    path = d / "base.pt2"
    torch.export.save(ep, path)
    return path


def members(pt2: Path) -> tuple[str, dict[str, bytes]]:
    """(root folder, {name under the root: bytes}) of an archive."""
    with zipfile.ZipFile(pt2) as z:
        names = z.namelist()
        root = names[0].split("/", 1)[0] + "/"
        return root, {n[len(root):]: z.read(n) for n in names}


def write_archive(dst: Path, root: str, files: dict[str, bytes], deflate: set[str] = frozenset()) -> Path:
    with zipfile.ZipFile(dst, "w") as z:
        for name, data in files.items():
            z.writestr(root + name, data, zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED)
    return dst


def edit(src: Path, dst: Path, *, json_edit: dict[str, Callable[[Any], Any]] | None = None,
         replace: dict[str, bytes | None] | None = None, deflate: set[str] = frozenset()) -> Path:
    """A copy of `src` with JSON members edited (fn(obj) returns the new object, or edits in place and
    returns None) and members replaced, added or (None) removed."""
    root, files = members(src)
    for name, fn in (json_edit or {}).items():
        obj = json.loads(files[name])
        new = fn(obj)
        files[name] = json.dumps(obj if new is None else new).encode()
    for name, data in (replace or {}).items():
        if data is None:
            files.pop(name, None)
        else:
            files[name] = data
    return write_archive(dst, root, files, deflate)


class Payload:
    """Unpickling this creates the canary file (what a malicious pickle does, harmlessly)."""

    def __init__(self, canary: Path):
        self.canary = str(canary)

    def __reduce__(self):
        return (open, (self.canary, "w"))


def pickled(canary: Path) -> bytes:
    return pickle.dumps(Payload(canary))


def torch_saved(canary: Path) -> bytes:
    """A torch.save zip whose data.pkl is the payload (what torch.load(weights_only=False) runs)."""
    buf = io.BytesIO()
    torch.save({"x": torch.zeros(1)}, buf)
    root, files = members_of_bytes(buf.getvalue())
    files["data.pkl"] = pickled(canary)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for n, data in files.items():
            z.writestr(root + n, data)
    return out.getvalue()


def members_of_bytes(data: bytes) -> tuple[str, dict[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = z.namelist()
        root = names[0].split("/", 1)[0] + "/"
        return root, {n[len(root):]: z.read(n) for n in names}


def nodes(obj: Any) -> list[dict]:
    return obj["graph_module"]["graph"]["nodes"]


def first_node(obj: Any, target: str) -> dict:
    return next(n for n in nodes(obj) if n["target"] == target)


# --------------------------------------------------------------------------- running a case


@dataclass
class Outcome:
    code: int
    output: str


def snapshot(root: Path, skip: Path | None) -> dict[str, tuple[int, int, str]]:
    """path -> (size, mtime_ns, link target) of everything under root except `skip`."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if skip is not None and Path(dirpath) == skip.parent:
            dirnames[:] = [d for d in dirnames if Path(dirpath, d) != skip]
            filenames = [f for f in filenames if Path(dirpath, f) != skip]
        for f in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns,
                                             os.readlink(p) if os.path.islink(p) else "")
    return out


class _Timeout(Exception):
    pass


def cli(argv: list[Any], seconds: int = CASE_SECONDS) -> Outcome:
    """The CLI in process, under a wall-clock limit; a traceback (an exception escaping the CLI) fails."""
    def alarm(signum, frame):
        raise _Timeout(f"{argv} ran over {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        r = runner.invoke(app, [str(a) for a in argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise AssertionError(f"{argv}: an exception escaped the CLI (a traceback for the user): "
                             f"{type(r.exception).__name__}: {r.exception}\n{r.output}")
    assert "Traceback" not in r.output, r.output
    return Outcome(r.exit_code, r.output)


def cli_subprocess(argv: list[Any], seconds: int = 120, mem_bytes: int = 6 << 30) -> Outcome:
    """The CLI as a child process with a time and address-space limit (FIFOs, devices, zip bombs)."""
    import resource

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))

    p = subprocess.run([sys.executable, "-m", "pt2c.cli", *map(str, argv)], capture_output=True, text=True,
                       timeout=seconds, preexec_fn=limits)
    out = p.stdout + p.stderr
    assert "Traceback" not in out, out
    return Outcome(p.returncode, out)


@dataclass
class Case:
    name: str
    make: Callable[[Path, Path, Path], list[Any]]  # (base.pt2, work folder, canary) -> CLI argv
    expect: str  # regex the output must match
    code: int = 2
    isolate: bool = False  # run as a subprocess with limits


def run_case(case: Case, base: Path, work: Path) -> Outcome:
    canary = work / "CANARY"
    argv = case.make(base, work, canary)
    # a refused case may change nothing at all; an accepted one only its output folder
    out_dir = Path(argv[argv.index("-o") + 1]) if "-o" in argv and case.code == 0 else None
    before = snapshot(work, out_dir)
    result = cli_subprocess(argv) if case.isolate else cli(argv)
    after = snapshot(work, out_dir)
    assert not canary.exists(), f"{case.name}: code from the input ran (the canary file exists)"
    assert before == after, f"{case.name}: files outside the output folder changed: " \
                            f"{set(before.items()) ^ set(after.items())}"
    assert result.code == case.code, f"{case.name}: exit code {result.code}, expected {case.code}\n{result.output}"
    assert re.search(case.expect, result.output, re.S | re.I), f"{case.name}: output does not match " \
                                                                f"{case.expect!r}:\n{result.output}"
    return result


def compile_argv(pt2: Path, work: Path) -> list[Any]:
    return ["compile", pt2, "-o", work / "out", "--target", "generic"]


def pt2_case(name: str, expect: str, code: int = 2, cmd: str = "compile", **edits: Any) -> Case:
    """A case that edits the base archive and compiles (or inspects / verifies) it."""
    def make(base: Path, work: Path, canary: Path) -> list[Any]:
        kw = {k: (v(canary) if k == "replace_fn" else v) for k, v in edits.items()}
        replace = kw.pop("replace_fn", None) or kw.pop("replace", None)
        p = edit(base, work / "evil.pt2", replace=replace, **kw)
        if cmd == "compile":
            return compile_argv(p, work)
        if cmd == "verify":
            return ["verify", p, "--target", "generic", "-o", work / "out"]
        return [cmd, p]
    return Case(name, make, expect, code)


def _weights_cfg_pickle(obj: Any) -> None:
    entry = obj["config"]["lin.weight"]
    entry["use_pickle"] = True


def _const_cfg(kind: str) -> Callable[[Any], None]:
    def fn(obj: Any) -> None:
        key = next(iter(obj["config"]))
        if kind == "pickle":
            obj["config"][key]["use_pickle"] = True
        else:
            obj["config"][key]["path_name"] = f"{kind}0"
    return fn


def _set_target(target: str) -> Callable[[Any], None]:
    def fn(obj: Any) -> None:
        first_node(obj, "torch.ops.aten.relu.default")["target"] = target
    return fn


def _set_expr(expr: str) -> Callable[[Any], None]:
    def fn(obj: Any) -> None:
        meta = obj["graph_module"]["graph"]["tensor_values"]["x"]
        meta["sizes"][0] = {"as_expr": {"expr_str": expr, "hint": {"as_int": 3}}}
    return fn


def _meta(key: str, value: str) -> Callable[[Any], None]:
    def fn(obj: Any) -> None:
        for n in nodes(obj):
            n["metadata"][key] = value
    return fn


def _canary_code(canary: Path) -> str:
    return f"open({str(canary)!r}, 'w')"


W = "data/weights/"
C = "data/constants/"
WCFG = "data/weights/model_weights_config.json"
CCFG = "data/constants/model_constants_config.json"
MJ = "models/model.json"
SI = "data/sample_inputs/model.pt"

CASES: list[Case] = [
    # ---- code execution while loading: pickles, targets, expressions, generated Python
    pt2_case("weight flagged as pickled", r"weight 'lin\.weight'.*pickled.*never unpickles",
             json_edit={WCFG: _weights_cfg_pickle}, replace_fn=lambda c: {W + "weight_0": torch_saved(c)}),
    pt2_case("constant flagged as pickled", r"constant .*pickled", json_edit={CCFG: _const_cfg("pickle")},
             replace_fn=lambda c: {C + "tensor_0": torch_saved(c)}),
    pt2_case("custom object constant", r"custom object", json_edit={CCFG: _const_cfg("custom_obj_")},
             replace_fn=lambda c: {C + "custom_obj_0": pickled(c)}),
    pt2_case("opaque object constant", r"opaque object", json_edit={CCFG: _const_cfg("opaque_obj_")},
             replace_fn=lambda c: {C + "opaque_obj_0": pickled(c)}),
    pt2_case("legacy pickled weights", r"legacy", replace_fn=lambda c: {W + "model.pt": torch_saved(c)}),
    pt2_case("legacy pickled constants", r"legacy", replace_fn=lambda c: {C + "model.pt": torch_saved(c)}),
    pt2_case("pickled sample inputs (compile never reads them)", r"compiled", code=0,
             replace_fn=lambda c: {SI: torch_saved(c)}),
    pt2_case("pickled sample inputs (inspect)", r"inputs", code=0, cmd="inspect",
             replace_fn=lambda c: {SI: torch_saved(c)}),
    pt2_case("pickled sample inputs (verify)", r"sample inputs.*calls builtins\.open|sample inputs.*references",
             cmd="verify", replace_fn=lambda c: {SI: torch_saved(c)}),
    pt2_case("target torch.os.system", r"calls 'torch\.os\.system', which is not an operator",
             json_edit={MJ: _set_target("torch.os.system")}),
    pt2_case("target builtins.exec", r"not an operator", json_edit={MJ: _set_target("builtins.exec")}),
    pt2_case("target torch.ops.load_library", r"not an operator",
             json_edit={MJ: _set_target("torch.ops.load_library")}),
    pt2_case("target through a dunder", r"not an operator",
             json_edit={MJ: _set_target("torch.ops.__class__.__init__.__globals__.x")}),
    pt2_case("target operator.attrgetter", r"not an operator", json_edit={MJ: _set_target("_operator.attrgetter")}),
    pt2_case("target math via torch", r"not an operator", json_edit={MJ: _set_target("torch._C._get_tracing_state")}),
    pt2_case("target aten.from_file", r"reads files", json_edit={MJ: _set_target("torch.ops.aten.from_file.default")}),
    pt2_case("extension operator", r"not an operator", json_edit={MJ: _set_target("#ext:evil")}),
    # an op this process lacks is declared from its recorded calls (frontend/customops.py), so the error is
    # the missing C kernel; a call whose argument names or kinds are not plain cannot be declared
    pt2_case("unregistered custom op", r"mylib::evil\(Tensor self\) -> Tensor has no C kernel",
             json_edit={MJ: _set_target("torch.ops.mylib.evil.default")}),
    pt2_case("custom op argument name injects schema text", r"mylib.*cannot declare it .*not an identifier",
             json_edit={MJ: lambda o: _set_target("torch.ops.mylib.evil2.default")(o) or first_node(
                 o, "torch.ops.mylib.evil2.default")["inputs"][0].__setitem__("name", "x) -> Tensor; f(Tensor y")}),
    pt2_case("kernel-launching higher-order op", r"higher-order",
             json_edit={MJ: _set_target("torch.ops.higher_order.triton_kernel_wrapper_mutation")}),
    pt2_case("operator argument torch.os.system", r"not an operator", json_edit={MJ: lambda o: first_node(
        o, "torch.ops.aten.relu.default")["inputs"].append({"name": "f", "arg": {"as_operator": "torch.os.system"}, "kind": 1})}),
    pt2_case("shape expression __import__", r"contains|uses the name",
             json_edit={MJ: _set_expr("__import__('os').system('true')")}),
    pt2_case("shape expression exec(chr(...))", r"uses the name 'exec'", json_edit={MJ: _set_expr("exec(chr(49))")}),
    pt2_case("shape expression power tower", r"small integer", json_edit={MJ: _set_expr("9**9**9**9")}),
    pt2_case("shape expression attribute", r"contains '\.'", json_edit={MJ: _set_expr("s0.__class__")}),
    pt2_case("custom object argument", r"custom \(torchbind\) object", json_edit={MJ: lambda o: first_node(
        o, "torch.ops.aten.relu.default")["inputs"].append({"name": "o", "arg": {"as_custom_obj": {"name": "x",
                                                                                                   "class_fqn": "a"}}})}),
    pt2_case("subgraph name injects Python", r"subgraph name .* not a Python identifier", json_edit={MJ: lambda o: first_node(
        o, "torch.ops.aten.relu.default")["inputs"].append({"name": "g", "arg": {"as_graph": {
            "name": 'x"), open("/tmp/x", "w"), getattr(self, "y', "graph": {}}}, "kind": 1})}),
    pt2_case("forward argument name injects Python", r"forward argument name .* not a Python identifier",
             json_edit={MJ: lambda o: o["graph_module"]["module_call_graph"][0]["signature"].__setitem__(
                 "forward_arg_names", ["x=open('/tmp/x','w')", "idx"])}),
    # guard code is exec()'d by ep.module(): dropped, so verify (which runs eager) stays clean
    Case("guard code (verify runs eager)", lambda b, w, c: ["verify", edit(b, w / "evil.pt2", json_edit={
        MJ: lambda o: o.__setitem__("guards_code", [_canary_code(c)])}), "--target", "native", "-o", w / "out"],
        r"PASS", code=0),
    pt2_case("stack trace with a carriage return", r"compiled", code=0, json_edit={MJ: _meta(
        "stack_trace", 'File "a.py", line 1, in f\n    x\r__import__("os").system("true")')}),
    pt2_case("module type names a function", r"compiled", code=0,
             json_edit={MJ: _meta("nn_module_stack", "L__self__,,os.system")}),
    # ---- malformed archives: clean errors, bounded
    Case("empty file", lambda b, w, c: compile_argv(_write(w / "e.pt2", b""), w), r"not a \.pt2 archive"),
    Case("random bytes", lambda b, w, c: compile_argv(_write(w / "r.pt2", os.urandom(4096)), w), r"not a \.pt2"),
    Case("truncated archive", lambda b, w, c: compile_argv(_write(w / "t.pt2", b.read_bytes()[:-300]), w),
         r"not a \.pt2|corrupt|no serialized"),
    Case("folder as input", lambda b, w, c: compile_argv(w, w), r"folder"),
    Case("missing file", lambda b, w, c: compile_argv(w / "nope.pt2", w), r"no such file"),
    pt2_case("no model.json", r"no serialized ExportedProgram", replace={MJ: None}),
    pt2_case("model.json not JSON", r"not valid JSON", replace={MJ: b"{\"graph_module\": "}),
    pt2_case("model.json deeply nested", r"not valid JSON|malformed|does not match",
             replace={MJ: b"[" * 200000 + b"]" * 200000}),
    pt2_case("model.json wrong shape", r"corrupt|malformed|does not match", replace={MJ: b"[1, 2, 3]"}),
    pt2_case("newer schema", r"schema 99\.0 is not supported",
             json_edit={MJ: lambda o: o.__setitem__("schema_version", {"major": 99, "minor": 0})}),
    pt2_case("weights config not JSON", r"not valid JSON", replace={WCFG: b"\xff\xfe"}),
    pt2_case("weight member missing", r"missing member", replace={W + "weight_0": None}),
    pt2_case("weight shorter than its shape", r"needs \d+ elements", replace={W + "weight_0": b"\0" * 16}),
    pt2_case("weight size not a multiple of the dtype", r"not a whole number", replace={W + "weight_0": b"\0" * 131}),
    pt2_case("weight with huge sizes", r"needs \d+ elements|too large", json_edit={WCFG: lambda o: o["config"][
        "lin.weight"]["tensor_meta"].__setitem__("sizes", [{"as_int": 1 << 40}, {"as_int": 1 << 20}])}),
    pt2_case("weight with negative stride", r"bad sizes", json_edit={WCFG: lambda o: o["config"][
        "lin.weight"]["tensor_meta"].__setitem__("strides", [{"as_int": -8}, {"as_int": 1}])}),
    pt2_case("weight with symbolic size", r"integers", json_edit={WCFG: lambda o: o["config"][
        "lin.weight"]["tensor_meta"]["sizes"].__setitem__(0, {"as_expr": {"expr_str": "s0"}})}),
    pt2_case("weight of unknown dtype", r"unknown dtype", json_edit={WCFG: lambda o: o["config"][
        "lin.weight"]["tensor_meta"].__setitem__("dtype", 250)}),
    pt2_case("sparse weight", r"dense tensors only", json_edit={WCFG: lambda o: o["config"][
        "lin.weight"]["tensor_meta"].__setitem__("layout", 1)}),
    pt2_case("big-endian archive", r"big-endian", replace={"byteorder": b"big"}),
    pt2_case("zip slip member names are never extracted", r"compiled", code=0,
             replace={"../../../../tmp/evil": b"x", "/etc/evil": b"y"}),
    pt2_case("zip bomb in a weight", r"zip bomb", replace={W + "weight_0": b"\0" * (64 << 20)},
             deflate={W + "weight_0"}),
    pt2_case("zip bomb in model.json", r"zip bomb", replace={MJ: b" " * (64 << 20)}, deflate={MJ}),
    Case("shape expression contradicts its hint", lambda b, w, c: compile_argv(_contradicting_hint(w), w),
         r"does not evaluate to integers"),
    Case("float8 program", lambda b, w, c: compile_argv(_fp8(w), w), r"unsupported dtype float8_e4m3fn in 1 place"),
    Case("float8 program (verify)", lambda b, w, c: ["verify", _fp8(w)], r"unsupported dtype float8_e4m3fn"),
    # ---- resources: each in a child process with a time and memory cap
    Case("FIFO as input", lambda b, w, c: compile_argv(_fifo(w / "f.pt2"), w), r"FIFO", isolate=True),
    Case("symlink to /dev/zero", lambda b, w, c: compile_argv(_link(w / "z.pt2", "/dev/zero"), w), r"device",
         isolate=True),
    Case("/dev/urandom as input", lambda b, w, c: compile_argv(Path("/dev/urandom"), w), r"device", isolate=True),
    Case("member larger than the file", lambda b, w, c: compile_argv(_lying_size(b, w / "l.pt2"), w),
         r"more than the file holds|corrupt", isolate=True),
    # ---- the command line and the output folder
    Case("-o with a comment terminator", lambda b, w, c: ["compile", b, "-o", w / "a*/b/*c", "--target", "generic"],
         r"compiled", code=0),
    Case("-o is a file", lambda b, w, c: ["compile", b, "-o", _write(w / "f", b"user data"), "--target", "generic"],
         r"error"),
    Case("-o in /proc", lambda b, w, c: ["compile", b, "-o", "/proc/pt2c-out", "--target", "generic"], r"error"),
    Case("--name of 300 characters", lambda b, w, c: compile_argv(b, w) + ["--name", "m" * 300], r"error.*name"),
    Case("--name with a path", lambda b, w, c: compile_argv(b, w) + ["--name", "../x"], r"C identifier"),
    Case("output folder of the user's", lambda b, w, c: ["compile", b, "-o", _user_folder(w), "--target", "generic"],
         r"not empty|was not written by pt2c|--force"),
]


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _link(p: Path, target: str) -> Path:
    os.symlink(target, p)
    return p


def _user_folder(work: Path) -> Path:
    d = work / "mine"
    d.mkdir()
    (d / "Makefile").write_text("all:\n\techo mine\n")
    return d


def _lying_size(base: Path, dst: Path) -> Path:
    """The archive with its first weight's central-directory entry declaring 4 GiB (stored)."""
    data = bytearray(base.read_bytes())
    pos = data.find(b"PK\x01\x02")
    while pos != -1:
        name_len = int.from_bytes(data[pos + 28:pos + 30], "little")
        if data[pos + 46:pos + 46 + name_len].endswith(b"weight_0"):
            data[pos + 20:pos + 28] = (0xFFFFFFF0).to_bytes(4, "little") * 2  # compressed, uncompressed size
            break
        pos = data.find(b"PK\x01\x02", pos + 46)
    dst.write_bytes(bytes(data))
    return dst


def _contradicting_hint(work: Path) -> Path:
    """A dynamic-batch export whose relu output size is 27*s77 while its hint (and input) say 3:
    torch's symbolic shapes fail an assertion when the size is evaluated (fuzzer finding)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.lin(x)) * 2

    src = work / "dyn.pt2"
    b = torch.export.Dim("b", min=1, max=64)
    torch.export.save(torch.export.export(M(), (torch.randn(3, 4),), dynamic_shapes=({0: b},)), src)

    def bad(o: Any) -> None:
        e = o["graph_module"]["graph"]["tensor_values"]["relu"]["sizes"][0]["as_expr"]
        e["expr_str"] = "27*" + e["expr_str"]
    return edit(src, work / "bad.pt2", json_edit={MJ: bad})


class _Float8(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("w", torch.ones(4).to(torch.float8_e4m3fn))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w.float()


def _fp8(work: Path) -> Path:
    p = work / "fp8.pt2"
    torch.export.save(torch.export.export(_Float8(), (torch.randn(2, 4),)), p)
    return p


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(case: Case, base_pt2: Path, tmp_path: Path):
    run_case(case, base_pt2, tmp_path)


def test_at_least_fifty_cases():
    assert len(CASES) + len(MANIFEST_EDITS) >= 50


# --------------------------------------------------------------------------- the runner and the manifest


@pytest.fixture(scope="module")
def built(base_pt2, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built") / "art"
    pt2c.compile(str(base_pt2), out, target="generic", name="base")
    pt2c.build(out, cflags="-O2 " + STRICT_CFLAGS)
    return out


MANIFEST_EDITS: dict[str, Callable[[dict], None]] = {
    "smaller output shape": lambda m: m["outputs"][0].__setitem__("shape", [1, 4]),
    "larger output shape": lambda m: m["outputs"][0].__setitem__("shape", [300, 4]),
    "smaller input shape": lambda m: m["inputs"][0].__setitem__("shape", [1, 8]),
    "input dtype": lambda m: m["inputs"][1].__setitem__("dtype", "int32"),
    "output dtype": lambda m: m["outputs"][0].__setitem__("dtype", "float64"),
    "input renamed": lambda m: m["inputs"][0].__setitem__("name", "y"),
    "extra output": lambda m: m["outputs"].append(dict(m["outputs"][0], name="output2")),
    "name is a path": lambda m: m.__setitem__("name", "../../x"),
    "weights file is a path": lambda m: m["weights"].__setitem__("file", "../../../etc/passwd"),
    "signature": lambda m: m.__setitem__("signature", "0x0000000000000001"),
    "abi version": lambda m: m.__setitem__("abi_version", 2),
}


@pytest.mark.parametrize("what", MANIFEST_EDITS)
def test_edited_manifest_is_refused(built: Path, tmp_path: Path, what: str):
    """The library's descriptor tables are the truth: an edited manifest.json is refused by the
    runner, never trusted with buffer sizes (a smaller output shape used to corrupt the heap)."""
    d = tmp_path / "art"
    shutil.copytree(built, d, symlinks=True)
    m = json.loads((d / "manifest.json").read_text())
    MANIFEST_EDITS[what](m)
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(RunError):
        pt2c.load(d, lib=d / "build" / "libbase.so").run([np.zeros((3, 8), np.float32), np.zeros(3, np.int64)])


def test_manifest_not_json(built: Path, tmp_path: Path):
    d = tmp_path / "art"
    shutil.copytree(built, d, symlinks=True)
    (d / "manifest.json").write_text("{not json")
    with pytest.raises(RunError):
        pt2c.load(d)


def test_index_out_of_range_is_a_status(built: Path):
    m = pt2c.load(built)
    x = np.zeros((3, 8), np.float32)
    ok = m.run([x, np.array([0, 9, 5])])
    assert ok[0].shape == (3, 4)
    for bad in ([0, 10, 1], [-1, 0, 0], [0, 0, -(1 << 62)]):
        with pytest.raises(RunError, match="index"):
            m.run([x, np.array(bad)])


def test_threads_share_one_model(built: Path):
    """8 threads x 125 calls on one Model give exactly the single-thread results (calls take turns
    on the Model's one context and workspace)."""
    m = pt2c.load(built)
    rng = np.random.default_rng(0)
    cases = [(rng.standard_normal((3, 8)).astype(np.float32), rng.integers(0, 10, 3)) for _ in range(16)]
    want = [m.run(list(c))[0] for c in cases]
    errors: list[str] = []

    def work(t: int) -> None:
        for k in range(125):
            i = (t * 7 + k) % len(cases)
            got = m.run(list(cases[i]))[0]
            if not np.array_equal(got, want[i]):
                errors.append(f"thread {t} call {k}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


# --------------------------------------------------------------------------- C: header / library skew


SKEW_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "base.h"
int main(void)
{
    base_ctx ctx;
    static unsigned char ws[BASE_WORKSPACE_BYTES + 64];
    unsigned char *w = (unsigned char *)ws + (64 - (size_t)ws % 64) % 64;
    FILE *f = fopen(WEIGHTS, "rb");
    static unsigned char blob[1 << 20];
    size_t n = fread(blob, 1, sizeof(blob), f);
    int rc;
    fclose(f);
    rc = base_init(&ctx, blob, n, w, BASE_WORKSPACE_BYTES);
    printf("%d %s\n", rc, base_strerror(rc));
    return 0;
}
"""


def test_header_of_another_compile_is_detected_in_c(base_pt2: Path, built: Path, tmp_path: Path):
    """A program built with the header of one compile and linked with the library of another (same
    --name, other shapes) gets ERR_SIGNATURE from init, never an overrun."""
    other = tmp_path / "other"
    ep = torch.export.export(Base().eval(), (torch.randn(5, 8), torch.tensor([1, 2, 3, 4, 5])))
    pt2c.compile(ep, other, target="generic", name="base")
    (tmp_path / "main.c").write_text(SKEW_MAIN)
    weights = built / "base.weights"
    exe = tmp_path / "skew"
    cmd = ["cc", *STRICT_CFLAGS.split(), f'-DWEIGHTS="{weights}"', "-I", str(other), str(tmp_path / "main.c"),
           str(built / "base.c"), "-I", str(built), "-lm", "-o", str(exe)]
    # main.c sees other/base.h (first -I); base.c includes its own "base.h" from its folder
    subprocess.run(cmd, check=True, capture_output=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == "13" and "different compile" in out, out  # BASE_ERR_SIGNATURE
    cmd[cmd.index(str(other))] = str(built)  # the matching header: accepted
    subprocess.run(cmd, check=True, capture_output=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == "0", out


# --------------------------------------------------------------------------- C injection: every string field


HOSTILE_TEXT = [
    '*/ __attribute__((constructor)) static void pwn(void) { *(volatile int *)0 = 1; } /*',
    '*/\n#include "/etc/passwd"\n/*',
    "??/\n??= define evil 1 \\",
    '"; int evil_global = 1; const char *s = "',
    "\\\n*/ int evil_fn(void) { return 0; } /* \u2028\u0000\x7f\x1b[31m",
    "/* nested /* comment */ end */ $(shell touch CANARY) `touch CANARY` ${x}",
]


def _hostile_fields(obj: Any, payload: str) -> None:
    """Put `payload` into every free-text string field of model.json that reaches the output:
    stack traces, module stacks (paths and types), torch_fn, the torch version."""
    obj["torch_version"] = "2.13.0" + payload
    for node in nodes(obj):
        md = node["metadata"]
        md["stack_trace"] = f'File "{payload}.py", line 7, in forward\n    {payload}'
        flat = re.sub(r"[,;()\[\]]", "_", payload)  # the separators of this field's own format
        md["nn_module_stack"] = ";".join(f"L__self__{i},{flat},{flat}.Mod" for i in range(2))
        md["torch_fn"] = f"{re.sub(r'[;]', '_', payload)};x.y"


def _defined_symbols(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3}


def test_hostile_strings_in_every_field(base_pt2: Path, built: Path, tmp_path: Path):
    """Every string field of model.json that reaches the output carries text built to break out of a C
    comment, a string literal or a build-file comment: the artifact still builds with gcc -Werror
    -pedantic, its library defines exactly the symbols of a clean compile, and nothing ran."""
    clean = _defined_symbols(built / "build" / "libbase.so")
    assert "base_init_checked" in clean and not any("pwn" in s or "evil" in s for s in clean)
    for i, payload in enumerate(HOSTILE_TEXT):
        src = edit(base_pt2, tmp_path / f"h{i}.pt2", json_edit={MJ: lambda o, p=payload: _hostile_fields(o, p)})
        out = tmp_path / f"out{i}"
        r = cli(["compile", src, "-o", out, "--target", "generic", "--name", "base"])
        assert r.code == 0, r.output
        lib = pt2c.build(out, cflags="-O1 " + STRICT_CFLAGS)
        assert _defined_symbols(Path(lib)) == clean, payload
        assert not (out / "CANARY").exists() and not Path("CANARY").exists()
        assert "exported with torch 2.13.0" in (out / "base.c").read_text()  # the text reached the output, escaped


# --------------------------------------------------------------------------- errors the user sees


def test_fast_math_flags_are_warned_about(built: Path):
    r = cli(["build", built, "--cflags", "-O2 -std=c99 -ffast-math"])
    assert r.code == 0 and "warning:" in r.output and "-ffast-math" in r.output and "NaN" in r.output, r.output
    r = cli(["build", built, "--cflags", "-O2 -std=c99"])
    assert r.code == 0 and "warning:" not in r.output, r.output


def test_internal_errors_are_one_message(base_pt2: Path, tmp_path: Path, monkeypatch):
    """A bug (any exception that is not a user error) is one message and exit code 3, no traceback;
    PT2C_DEBUG=1 keeps the traceback for whoever debugs it."""
    import pt2c.compiler

    def boom(*a, **k):
        raise ZeroDivisionError("a bug\nwith a second line")

    monkeypatch.setattr(pt2c.compiler, "lower_program", boom)
    r = cli(compile_argv(base_pt2, tmp_path))
    assert r.code == 3 and "internal error: ZeroDivisionError: a bug" in r.output and "second line" not in r.output
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("PT2C_DEBUG", "1")
    res = runner.invoke(app, [str(a) for a in compile_argv(base_pt2, tmp_path)])
    assert isinstance(res.exception, ZeroDivisionError)


@pytest.mark.parametrize("what", ["name is a path", "input renamed to code", "weights file is a path"])
def test_wheel_refuses_an_edited_manifest(built: Path, tmp_path: Path, what: str):
    """The manifest's text goes into the wheel loader's Python source and into the wheel's paths."""
    from pt2c.packaging.wheel import WheelError, build_wheel

    d = tmp_path / "art"
    shutil.copytree(built, d, symlinks=True)
    m = json.loads((d / "manifest.json").read_text())
    edit = {"name is a path": lambda: m.__setitem__("name", "../../x"),
            "input renamed to code": lambda: m["inputs"][0].__setitem__("name", 'x"""; import os; """'),
            "weights file is a path": lambda: m["weights"].__setitem__("file", "../../etc/passwd")}
    edit[what]()
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(WheelError):
        build_wheel(d, tmp_path / "dist", lib=d / "build" / "libbase.so")
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").iterdir())
