"""Graph passes.  Each takes a Graph and returns it rewritten; `ops.verify` runs after every one
(`run_pass`), so a pass bug is caught where it happens.

`optimize` runs the optimisation pipeline the options ask for (`pipeline`); `finish` runs the last
two passes, which every compile needs: outputs materialised and memory planned (the plan is
returned beside the graph and verified with it)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from pt2c.ir import Graph, MemoryPlan, Node, captured, clone
from pt2c.ops import verify
from pt2c.ops.control import own_inputs
from pt2c.options import CompileOptions
from pt2c.passes.algorithms import choose_algorithms
from pt2c.passes.attention_views import fold_attention_views
from pt2c.passes.fold import dce, fold_batchnorm, fuse_epilogues
from pt2c.passes.fusion import fuse_elementwise, fuse_views
from pt2c.passes.gathered import fuse_gathered_matmul
from pt2c.passes.memory import materialize_outputs, plan_memory, write_state
from pt2c.passes.pads import fold_pads
from pt2c.passes.prepack import prepack
from pt2c.passes.pwdw import fuse_pw_dw
from pt2c.sym import DynamicSizeError

Pass = Callable[[Graph], Graph]

# what opt_level 0 keeps: the passes the code generator needs (a conv2d's kernel, packed weights)
ESSENTIAL = ("dce", "choose_algorithms", "prepack")
# what a GPU target leaves out: choices and layouts of the CPU kernels (GPU kernels read plain weights)
CPU_ONLY = ("fuse_gathered_matmul", "choose_algorithms", "prepack", "fuse_pw_dw")


def pipeline(options: CompileOptions) -> list[tuple[str, Pass]]:
    """The optimisation passes for these options, in order."""
    passes: list[tuple[str, Pass]] = [
        ("dce", dce),
        ("fold_pads", fold_pads),
        ("fold_batchnorm", fold_batchnorm),
        ("fuse_gathered_matmul", fuse_gathered_matmul),
        ("fuse_epilogues", fuse_epilogues),
        ("fuse_views", fuse_views),
        ("fuse_elementwise", fuse_elementwise),
        ("fold_attention_views", fold_attention_views),
        ("dce", dce),
        ("choose_algorithms", partial(choose_algorithms, winograd=options.use_winograd)),
        ("prepack", prepack),
        ("fuse_pw_dw", fuse_pw_dw),
    ]
    if options.target.is_gpu:  # the CPU kernels' algorithm choice, packed layouts and fused pairs
        passes = [p for p in passes if p[0] not in CPU_ONLY]
    return [p for p in passes if options.opt_level > 0 or p[0] in ESSENTIAL]


def _verified(name: str, graph: Graph, plan: MemoryPlan | None = None) -> None:
    try:
        verify(graph, plan)
    except Exception as e:
        raise RuntimeError(f"internal error: the IR is invalid after pass '{name}': {e}") from e


def run_pass(name: str, p: Pass, graph: Graph) -> Graph:
    """One pass, then the verifier.  On a graph with dynamic sizes, an optimisation that needs a size static
    (a DynamicSizeError) is skipped, and named in graph.meta["skipped_passes"]; an essential pass is not."""
    if not graph.meta.get("dims") or name in ESSENTIAL:
        graph = p(graph)
        _verified(name, graph)
        return graph
    before = clone(graph)
    try:
        graph = p(graph)
        _verified(name, graph)
    except DynamicSizeError as e:
        before.meta.setdefault("skipped_passes", {})[name] = str(e)
        return before
    return graph


def optimize(graph: Graph, options: CompileOptions | None = None) -> Graph:
    """The pipeline on the graph, and first on the blocks of its control-flow nodes (each a graph whose
    inputs are the outer values it reads; afterwards the node's captured inputs are brought up to date)."""
    options = options or CompileOptions()
    verify(graph)
    for n in graph.nodes:
        if n.blocks:
            n.blocks = [_optimize_block(b, options) for b in n.blocks]
            refresh_captures(n)
    for name, p in pipeline(options):
        graph = run_pass(name, p, graph)
    return graph


def _optimize_block(b: Graph, options: CompileOptions) -> Graph:
    """optimize on a block: to the passes its inputs are graph inputs (no producer), as they are to its code."""
    producers = [(v, v.producer) for v in b.inputs]
    for v, _ in producers:
        v.producer = None
    try:
        return optimize(b, options)
    finally:
        for v, p in producers:
            v.producer = p


def refresh_captures(n: Node) -> None:
    """A control node's block inputs and node inputs after its blocks changed (values a pass removed from a
    block are no longer read; the operands the op itself takes stay first)."""
    own = n.inputs[:own_inputs(n)]
    for b in n.blocks:
        b.inputs = captured(b.nodes)
    seen = {id(v) for v in own + n.outputs}
    n.inputs = own + [v for b in n.blocks for v in b.inputs if id(v) not in seen and not seen.add(id(v))]  # type: ignore[func-returns-value]


def finish(graph: Graph) -> tuple[Graph, MemoryPlan]:
    """The last passes: every output made a value of its own (materialize_outputs), then the memory
    plan (plan_memory), verified with the graph."""
    graph = run_pass("write_state", write_state, graph)
    graph = run_pass("materialize_outputs", materialize_outputs, graph)
    plan = plan_memory(graph)
    _verified("plan_memory", graph, plan)
    return graph, plan
