"""Run a WASI (wasm32-wasi) program with wasmtime's Python API: a launcher for ``--exec``.

    python -m pt2c.runtime.wasirun PROGRAM.wasm [ARGS...]

The host's ``/`` is pre-opened as ``/``; arguments naming an existing file or folder are
passed as absolute paths (WASI has no current directory), so paths in ARGS work as they do
natively.  stdout/stderr are inherited and the program's exit status is returned.  Needs ``pip install wasmtime``.  (The ``wasmtime``
command-line tool, ``wasmtime run --dir=/ --dir=. PROGRAM.wasm ARGS``, does the same.)
"""

from __future__ import annotations

import os
import sys


def run(argv: list[str]) -> int:
    """Run ``argv[0]`` (a .wasm file) with arguments ``argv[1:]``; returns its exit status."""
    try:
        import wasmtime
    except ImportError:
        print("error: the wasmtime Python package is missing (pip install wasmtime)", file=sys.stderr)
        return 127
    if not argv:
        print("usage: python -m pt2c.runtime.wasirun PROGRAM.wasm [ARGS...]", file=sys.stderr)
        return 2
    engine = wasmtime.Engine()
    module = wasmtime.Module.from_file(engine, argv[0])
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    store = wasmtime.Store(engine)
    wasi = wasmtime.WasiConfig()
    args = [os.path.abspath(a) if not a.startswith("-") and os.path.exists(a) else a for a in argv[1:]]
    wasi.argv = [os.path.basename(argv[0])] + args
    wasi.inherit_stdout()
    wasi.inherit_stderr()
    wasi.inherit_stdin()
    wasi.preopen_dir("/", "/")
    store.set_wasi(wasi)
    instance = linker.instantiate(store, module)
    start = instance.exports(store)["_start"]
    try:
        start(store)  # type: ignore[operator]
    except wasmtime.ExitTrap as e:
        return int(e.code)
    return 0


def main() -> None:
    sys.stdout.flush()
    raise SystemExit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
