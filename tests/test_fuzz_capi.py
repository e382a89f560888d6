"""libFuzzer + ASan + UBSan over the generated C API (init and run), a fixed short budget.

tests/fuzz/capi_model.py compiles a tiny deterministic model (embedding, conv1d, linear, layer
norm, x[:, pos], softmax, gather; three int64 index inputs) with target generic, builds
tests/fuzz/fuzz_capi.c against it with
``clang -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined`` and runs it:

* corpus: a fresh temp folder (libFuzzer adds to it) seeded with the seeds generated for this
  compile (the real weights blob with valid, out-of-range and non-finite inputs; damaged blobs),
  plus the committed tests/fuzz/corpus/capi/ (read only: replayed first, so it doubles as a
  regression suite);
* budget: ``-seed=1 -runs=RUNS`` (deterministic), capped by ``-max_total_time=MAX_SECONDS``;
* pass: exit status 0 and no sanitizer / harness report in the output.

Skipped only when clang or its libFuzzer / sanitizer runtime is missing (scripts/setup.sh
installs both).  Longer campaigns: ``python3 tests/fuzz/capi_model.py --seconds 300``.
"""

from __future__ import annotations

import importlib.util
import re
import time
import warnings
from pathlib import Path

import pytest

RUNS = 250_000  # ~17 s at the ~15k exec/s of one x86-64 core here
MAX_SECONDS = 35  # a cap for slow machines; the test stays under a minute


def _load_helper():
    path = Path(__file__).parent / "fuzz" / "capi_model.py"
    spec = importlib.util.spec_from_file_location("pt2c_fuzz_capi_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


capi = _load_helper()


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> tuple[Path, Path]:
    why = capi.fuzzer_available()
    if why:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("fuzz_capi")
    out = capi.compile_model(work / "out")
    exe = capi.build_harness(out, work / "fuzz_capi")
    return out, exe


def test_committed_corpus_is_current(harness):
    """The committed seeds were generated from this compile (a stale blob only costs coverage: the
    fresh seeds are always added; regenerate with python3 tests/fuzz/capi_model.py --write-corpus)."""
    out, _ = harness
    fresh = capi.seeds(out)
    committed = {p.name[len("gen-"):]: p.read_bytes() for p in capi.CORPUS.glob("gen-*")}
    assert committed, f"no committed seeds in {capi.CORPUS}"
    missing = sorted(k for k in fresh if k not in committed)
    assert not missing, f"seeds {missing} not committed; python3 tests/fuzz/capi_model.py --write-corpus"
    assert all(committed[k] == v for k, v in fresh.items() if k.startswith("ref-")), \
        "the ref-* seeds do not depend on the weights; regenerate with --write-corpus"
    stale = sorted(k for k, v in fresh.items() if committed[k] != v)
    if stale:
        warnings.warn(f"committed fuzz seeds {stale} differ from this compile's; regenerate with "
                      "python3 tests/fuzz/capi_model.py --write-corpus", stacklevel=1)


def test_fuzz_capi(harness, tmp_path):
    out, exe = harness
    corpus = tmp_path / "corpus"
    capi.write_seeds(out, corpus)
    t0 = time.monotonic()
    r = capi.run_fuzzer(exe, [corpus, capi.CORPUS], out / f"{capi.NAME}.weights", runs=RUNS, seconds=MAX_SECONDS, seed=1,
                        timeout=MAX_SECONDS + 60, artifacts=tmp_path)
    log = r.stdout + r.stderr
    reports = capi.sanitizer_reports(log)
    crashes = sorted(p.name for p in tmp_path.glob("*-*") if p.name.startswith(("crash-", "leak-", "timeout-", "oom-")))
    tail = "\n".join(log.splitlines()[-60:])
    assert r.returncode == 0 and not reports and not crashes, (
        f"libFuzzer exit {r.returncode}, reports {reports[:5]}, inputs {crashes} (in {tmp_path}); "
        f"replay: {exe} {tmp_path}/<input>\n{tail}")
    m = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
    execs = int(m.group(1)) if m else 0
    assert execs >= min(RUNS, 10_000), f"only {execs} executions\n{tail}"
    print(f"fuzz_capi: {execs} executions in {time.monotonic() - t0:.1f}s, exit 0, no reports")
