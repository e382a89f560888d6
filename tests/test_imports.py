"""Architecture checks, read from the source (no pt2c module is imported for the first two):

- no import cycles between pt2c modules.  Every `import` / `from ... import` of a pt2c module
  counts, at module level and inside functions (a function-level import is how a cycle hides);
  only those under `if TYPE_CHECKING:` are skipped.  An import names one module: `from a.b
  import c` is an edge to a.b.c when that is a module, else to a.b (the parent packages Python
  initialises on the way are not edges, as in import-linter);
- no source file under src/pt2c (.py, and the kernels' .c / .h) over MAX_LINES lines;
- the ops' LowerCtx / EmitCtx protocols (pt2c/ops/context.py) are what frontend/lower.py's
  LowerCtx and codegen/emitter.py's Emitter provide.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PKG = SRC / "pt2c"
MAX_LINES = 800

# Files over MAX_LINES while another change splits them.  This list must shrink, never grow:
# remove an entry as soon as its file is split.
OVERSIZE_ALLOWED: set[str] = set()

# Import edges known to close a cycle, to be removed, not added to (empty: keep it so).
CYCLE_EDGES_ALLOWED: set[tuple[str, str]] = set()


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package)."""
    mods = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods[".".join(parts)] = (p, is_pkg)
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_pkg: bool, mods: dict) -> list[tuple[str, int]]:
    """(imported pt2c module, line) for every import in the tree outside `if TYPE_CHECKING:` blocks."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "pt2c")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            if base.split(".")[0] == "pt2c":
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    found.append((sub if sub in mods else base, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}."""
    mods = _modules()
    graph: dict[str, dict[str, int]] = {}
    for name, (path, is_pkg) in mods.items():
        edges: dict[str, int] = {}
        for target, line in _imports(ast.parse(path.read_text(), str(path)), name, is_pkg, mods):
            if target != name and target in mods:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _a_cycle(graph: dict[str, dict[str, int]], comp: list[str]) -> list[str]:
    """One cycle through comp[0] inside the component (breadth-first: a shortest one)."""
    inside = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in graph[v]:
                if w not in inside:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def _describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    mods = _modules()
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        path = mods[a][0].relative_to(SRC.parent)
        steps.append(f"  {a} -> {b}   ({path}:{graph[a][b]})")
    return "\n".join(steps)


def test_no_import_cycles() -> None:
    graph = import_graph()
    for a, b in CYCLE_EDGES_ALLOWED:
        assert b in graph[a], f"{a} no longer imports {b}: remove ({a!r}, {b!r}) from CYCLE_EDGES_ALLOWED"
    checked = {a: {b: line for b, line in edges.items() if (a, b) not in CYCLE_EDGES_ALLOWED}
               for a, edges in graph.items()}
    comps = _strongly_connected(checked)
    msg = "\n\n".join(f"import cycle: {len(comp)} modules import each other ({', '.join(comp)}); one cycle:\n"
                       + _describe(checked, _a_cycle(checked, comp)) for comp in comps)
    assert not comps, msg


def test_cycle_detection_finds_a_cycle() -> None:
    """The checker itself: a two-module cycle hidden in a function and one behind TYPE_CHECKING."""
    mods = {"pt2c.a": (None, False), "pt2c.b": (None, False), "pt2c.c": (None, False)}
    src_a = "from pt2c import b\n"
    src_b = "def f():\n    import pt2c.a\n"
    src_c = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pt2c.a import x\nimport pt2c.b\n"
    graph = {m: dict(_imports(ast.parse(s), m, False, mods)) for m, s in
             (("pt2c.a", src_a), ("pt2c.b", src_b), ("pt2c.c", src_c))}
    assert graph == {"pt2c.a": {"pt2c.b": 1}, "pt2c.b": {"pt2c.a": 2}, "pt2c.c": {"pt2c.b": 4}}
    assert _strongly_connected(graph) == [["pt2c.a", "pt2c.b"]]
    assert _a_cycle(graph, ["pt2c.a", "pt2c.b"]) == ["pt2c.a", "pt2c.b", "pt2c.a"]


def test_ops_do_not_import_codegen_or_frontend() -> None:
    """The op families are below codegen and frontend: those call into ops, never the reverse."""
    graph = import_graph()
    bad = [(a, b) for a, edges in graph.items() if a.startswith("pt2c.ops")
           for b in edges if b.startswith(("pt2c.codegen", "pt2c.frontend", "pt2c.passes", "pt2c.compiler"))]
    assert not bad, bad


def test_no_file_over_max_lines() -> None:
    too_long = []
    for p in sorted(PKG.rglob("*")):
        if p.suffix not in (".py", ".c", ".h") or not p.is_file():
            continue
        rel = p.relative_to(SRC.parent).as_posix()
        n = len(p.read_text(errors="replace").splitlines())
        if n > MAX_LINES and rel not in OVERSIZE_ALLOWED:
            too_long.append(f"{rel}: {n} lines")
        if rel in OVERSIZE_ALLOWED and n <= MAX_LINES:
            too_long.append(f"{rel}: {n} lines, no longer over {MAX_LINES}: remove it from OVERSIZE_ALLOWED")
    assert not too_long, f"files over {MAX_LINES} lines (split them by concern):\n" + "\n".join(too_long)


def _members(cls: type) -> tuple[set[str], set[str]]:
    """(methods, attributes assigned as self.<name> in any method) of a class, from its source."""
    tree = ast.parse(inspect.getsource(cls))
    methods, attrs = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            methods.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    attrs.add(t.attr)
    return methods, attrs


def _params(fn: object) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def test_context_protocols_match_the_real_classes() -> None:
    from pt2c.codegen.emitter import Emitter
    from pt2c.frontend import lower
    from pt2c.ops.context import EmitCtx, LowerCtx

    for proto, cls in ((LowerCtx, lower.LowerCtx), (EmitCtx, Emitter)):
        methods, attrs = _members(cls)
        for name in proto.__annotations__:
            assert name in attrs, f"{cls.__name__} has no attribute {name!r} ({proto.__name__} declares it)"
        for name, fn in vars(proto).items():
            if callable(fn) and not name.startswith("_"):
                assert name in methods, f"{cls.__name__} has no method {name!r} ({proto.__name__} declares it)"
                assert _params(fn) == _params(getattr(cls, name)), f"{cls.__name__}.{name}: parameters differ"
