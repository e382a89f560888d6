"""Graph passes.  Each takes and returns a Graph; `optimize` runs them with the verifier
between every pass, so a pass bug is caught where it happens."""

from __future__ import annotations

from collections.abc import Callable

from pt2c.ir import Graph
from pt2c.ops import verify
from pt2c.passes.fold import dce, fold_batchnorm, fuse_epilogues
from pt2c.passes.fusion import fuse_elementwise, fuse_views
from pt2c.passes.prepack import prepack
from pt2c.passes.pwdw import fuse_pw_dw

PIPELINE: list[tuple[str, Callable[[Graph], Graph]]] = [
    ("dce", dce),
    ("fold_batchnorm", fold_batchnorm),
    ("fuse_epilogues", fuse_epilogues),
    ("fuse_views", fuse_views),
    ("fuse_elementwise", fuse_elementwise),
    ("dce", dce),
    ("prepack", prepack),
    ("fuse_pw_dw", fuse_pw_dw),
]


def optimize(graph: Graph, level: int = 1) -> Graph:
    verify(graph)
    for name, p in PIPELINE:
        if level == 0 and name not in ("dce", "prepack"):
            continue
        graph = p(graph)
        try:
            verify(graph)
        except Exception as e:
            raise RuntimeError(f"internal error: the IR is invalid after pass '{name}': {e}") from e
    return graph
