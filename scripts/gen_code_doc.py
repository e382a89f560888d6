"""Regenerate docs/generated-code.md: excerpts of what `pt2c compile` writes for the zoo's ResNet-18
and GPT-2 (bench sizes, target x86_64-v3), cut from real output.

    python scripts/gen_code_doc.py > docs/generated-code.md
"""

from __future__ import annotations

import re
import tempfile
import warnings
from pathlib import Path

import torch

import pt2c
from pt2c import zoo

warnings.filterwarnings("ignore")


def compile_zoo(family: str, tmp: Path) -> tuple[str, str]:
    torch.manual_seed(0)
    m, x = zoo.FAMILIES[family]("bench")
    out = tmp / family
    pt2c.compile(torch.export.export(m.eval(), x), out, name=family, target="x86_64-v3",
                 command=f"pt2c compile {family}.pt2 --target x86_64-v3 -O 1")
    return (out / f"{family}.c").read_text(), (out / f"{family}.h").read_text()


def node_blocks(body: str) -> list[str]:
    """The run function's body cut at each node's comment."""
    parts = re.split(r"\n(?=\n    /\* )", body)
    return [p.strip("\n") for p in parts]


def run_function(src: str, name: str) -> tuple[str, list[str], str]:
    start = src.index(f"int {name}_run_v(")
    end = src.index(f"\nint {name}_run(", start)
    fn = src[start:end].rstrip()
    blocks = node_blocks(fn)
    return blocks[0], blocks[1:-1], blocks[-1]


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rsrc, rhdr = compile_zoo("resnet18", tmp)
        gsrc, _ = compile_zoo("gpt2", tmp)
    header = rsrc[:rsrc.index("*/") + 2]
    api = rhdr[rhdr.index("/* RESNET18_ABI_VERSION of the compiled library"):rhdr.index("\n#ifdef __cplusplus\n}")]
    head, nodes, tail = run_function(rsrc, "resnet18")
    ghead, gnodes, _ = run_function(gsrc, "gpt2")
    layer0 = [b for b in gnodes if ".h.0." in b.split("\n", 1)[0] or "h.0 " in b.split("\n", 1)[0]]
    print(f"""# Generated code: ResNet-18 and GPT-2 excerpts

What `pt2c compile` writes for two models of `pt2c.zoo` (bench sizes, random weights), target
`x86_64-v3`, cut from real output by `python scripts/gen_code_doc.py > docs/generated-code.md`.
Every node has a comment naming its module (path and type), what runs (the fused epilogue, the
algorithm) and its output's dtype and shape, then the line of the model's own source it came from.
Buffers are named after the module that produces them; literal kernel arguments are named after the
kernel's parameters; the workspace's kernel-scratch region is one pointer declared once.

## ResNet-18 (`zoo.resnet18("bench")`, 1x3x224x224)

BatchNorm is folded into the convolutions and the residual add + ReLU into the second convolution
of each block.

### File header

```c
{header}
```

### The API (`resnet18.h`)

```c
{api.rstrip()}
```

### The model (`resnet18.c`, start and end of `resnet18_run_v`)

```c
{head}

{nodes[0]}

{nodes[1]}

{nodes[2]}

{nodes[3]}
    ...

{nodes[-2]}

{nodes[-1]}

{tail}
```

## GPT-2 (`zoo.gpt2("bench")`, `transformers`' GPT2LMHeadModel, random weights)

One transformer block. The fused QKV projection (`c_attn`) writes one [tokens, 3 x hidden] buffer;
the attention kernel reads q, k and v straight out of it at their offsets (0, hidden, 2 x hidden)
with the strides of the head split (`pt2c_sdpa_layout`), and writes its output already permuted
back to [batch, tokens, heads, head size] for `c_proj`: the views cost no copies
(`passes/attention_views.py`).

```c
{chr(10).join(chr(10).join([b, '']) for b in layer0).rstrip()}
```
""")


if __name__ == "__main__":
    main()
