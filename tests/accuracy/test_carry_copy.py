"""scripts/carry_minilm.py: the float16 copy of the real model that the GPU machine's accuracy runs read."""
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from .minilm import load_minilm, minilm_dir

ROOT = Path(__file__).resolve().parents[2]


def test_carry_copy_is_the_model_in_float16(tmp_path, monkeypatch):
    monkeypatch.delenv("QUANTKIT_MINILM_DIR", raising=False)
    src = minilm_dir()  # skips without the model package
    out = tmp_path / "carry" / "minilm"
    for _ in range(2):  # a second run replaces the first copy
        run = subprocess.run([sys.executable, str(ROOT / "scripts" / "carry_minilm.py"), str(out)],
                             capture_output=True, text=True, cwd=ROOT)
        assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["minilm"]  # no temporary directory left behind
    original, copy = load_file(src / "model.safetensors"), load_file(out / "model.safetensors")
    assert original.keys() == copy.keys()
    for name, tensor in original.items():
        expected = tensor.to(torch.float16) if tensor.is_floating_point() else tensor
        assert copy[name].dtype == expected.dtype and torch.equal(copy[name], expected), name
    for name in ("config.json", "tokenizer.json", "vocab.txt", "modules.json"):
        assert (out / name).read_bytes() == (src / name).read_bytes(), name
    assert (out / "1_Pooling" / "config.json").is_file()
    assert sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) < 64 * 2**20  # fits the device's carry


def test_carry_copy_loads_through_the_tests_entry_point(tmp_path, monkeypatch):
    monkeypatch.delenv("QUANTKIT_MINILM_DIR", raising=False)
    minilm_dir()
    out = tmp_path / "minilm"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "carry_minilm.py"), str(out)], check=True, cwd=ROOT,
                   capture_output=True)
    monkeypatch.setenv("QUANTKIT_MINILM_DIR", str(out))
    model, tokenizer = load_minilm()
    assert next(model.parameters()).dtype == torch.float32  # loaded as float32 from the float16 copy
    assert tokenizer("a sentence")["input_ids"][0] == tokenizer.cls_token_id
