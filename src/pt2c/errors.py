"""Errors users see.  Each says what went wrong, where, and what to try."""

from __future__ import annotations


class Pt2cError(Exception):
    """Base class: a clear, user-facing error (the CLI prints it without a traceback)."""


class InputError(Pt2cError):
    """The input program could not be read: missing, corrupt, or from an unsupported version."""


class OutputError(Pt2cError):
    """The output folder cannot be written: not a folder, not writable, or holding files pt2c did not write."""


class ModelNameError(Pt2cError, ValueError):
    """The model name (it becomes file names and C symbols) is not a C identifier or is too long."""


class UnsupportedError(Pt2cError):
    """The program uses ops (or op variants) pt2c cannot compile; lists every one at once."""

    def __init__(self, problems: list[tuple[str, str, str]]):
        # problems: (op target, where, why)
        self.problems = problems
        by_op: dict[str, list[tuple[str, str]]] = {}
        for op, where, why in problems:
            by_op.setdefault(op, []).append((where, why))
        lines = [f"{len(by_op)} unsupported op(s) in {len(problems)} node(s):"]
        for op, sites in by_op.items():
            lines.append(f"  {op}  ({len(sites)} node{'s' if len(sites) != 1 else ''})")
            for where, why in sites[:5]:
                lines.append(f"    - {where}" + (f": {why}" if why else ""))
            if len(sites) > 5:
                lines.append(f"    - ... and {len(sites) - 5} more")
        lines.append("What to try: rewrite these parts of the model with supported ops (see docs/ops.md), "
                     "or keep them outside the exported module.")
        if any(not op.startswith(("aten.", "prims.", "higher_order.", "torch.ops.aten.", "torch.ops.prims."))
               for op in by_op):
            lines.append("For a custom op: give pt2c its C kernel (pt2c compile --kernels DIR, or "
                         "pt2c.register_kernel; docs/custom-ops.md).")
        super().__init__("\n".join(lines))


class UnsupportedDtypeError(UnsupportedError):
    """The program holds tensors of dtypes pt2c does not compute in; lists every place at once."""

    def __init__(self, problems: list[tuple[str, str]]):
        # problems: (dtype(s), where)
        self.problems = problems
        dtypes = sorted({d for ds, _ in problems for d in ds.split(", ")})
        lines = [f"unsupported dtype{'s' if len(dtypes) > 1 else ''} {', '.join(dtypes)} in {len(problems)} "
                 f"place{'s' if len(problems) != 1 else ''}: pt2c computes in float32 / float64 / bfloat16 / "
                 "float16 (indices and masks: int64, int32, int16, int8, uint8, bool)"]
        for dts, where in problems[:10]:
            lines.append(f"  - {where}: {dts}")
        if len(problems) > 10:
            lines.append(f"  - ... and {len(problems) - 10} more")
        lines.append("What to try: export the model in float32, bfloat16 or float16 (model.float() and float32 "
                     "example inputs); for int8, quantize it with torchao's PT2E flow (prepare_pt2e / convert_pt2e), "
                     "whose quantize / dequantize ops pt2c runs, instead of quantized tensor types.")
        Pt2cError.__init__(self, "\n".join(lines))
