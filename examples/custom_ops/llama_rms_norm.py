"""The worked example of docs/custom-ops.md: a fused RMS norm written in C (kernels/mylib_rms_norm.c),
used inside a transformers Llama model, exported (use_cache=False, no wrapper), compiled with the kernel,
verified against PyTorch, then built with CMake and run from C.

    python examples/custom_ops/llama_rms_norm.py [WORK_DIR]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import my_ops  # noqa: E402  (registers mylib::rms_norm and the others)


def main(work: Path) -> None:
    import pt2c
    from pt2c.runtime.verify import verify
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).eval()
    n = my_ops.use_fused_rms_norm(model)  # every LlamaRMSNorm now calls torch.ops.mylib.rms_norm
    ids = torch.randint(0, cfg.vocab_size, (1, 16))

    # 1. export: keyword arguments such as use_cache=False are fixed at export, no wrapper module needed
    ep = torch.export.export(model, (ids,), {"use_cache": False})
    work.mkdir(parents=True, exist_ok=True)
    torch.export.save(ep, work / "llama.pt2")
    print(f"exported {work / 'llama.pt2'}: {n} RMS norms call mylib::rms_norm")

    # 2. compile with the C kernel, 3. verify against PyTorch (the op's Python implementation is the reference)
    kernels = HERE / "kernels"
    art = pt2c.compile(work / "llama.pt2", work / "llama", target="x86_64-v3", kernels=[kernels], force=True)
    print(f"compiled: {art.manifest['op_counts'].get('custom_call', 0)} custom_call node(s), files in "
          f"{work / 'llama' / 'custom_ops'}")
    report = verify(work / "llama.pt2", kernels=[kernels])
    print(f"verify: {'PASS' if report.passed else 'FAIL'} (max abs error {report.outputs[0].max_abs_err:.2e})")
    if not report.passed:
        raise SystemExit(1)

    # 4. build with CMake and run the standalone driver on the example input
    build = work / "llama" / "build"
    subprocess.run(["cmake", "-S", str(work / "llama"), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "-j", "2"], check=True, capture_output=True)
    lib = build / "libllama.a"
    exe = work / "llama_driver"
    subprocess.run(["cc", "-O2", "-std=c99", "-I", str(work / "llama"), str(work / "llama" / "llama_driver.c"),
                    str(lib), "-fopenmp", "-lm", "-o", str(exe)], check=True)
    from pt2c.runtime.verify import run_driver

    logits = run_driver(exe, work / "llama", [ids.numpy()]).outputs[0]
    with torch.no_grad():
        ref = model(ids, use_cache=False).logits.numpy()
    err = float(abs(logits - ref).max())
    print(f"built with CMake ({lib.name}) and ran from C: logits {list(logits.shape)}, max abs error {err:.2e}")
    if err > 1e-4 * max(1.0, float(abs(ref).max())):
        raise SystemExit(1)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("llama_rms_norm_example"))
