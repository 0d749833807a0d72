"""On a CUDA GPU: the converter's GPU arithmetic writes exactly what the CPU writes, and loaded
checkpoints run there (``pytest -m gpu tests/checkpoint``)."""
import time

import pytest
import torch
from safetensors import safe_open

from quantkit.checkpoint import convert_checkpoint, load_quantized

from .common import INT4, bits, minilm_path

pytestmark = pytest.mark.gpu


def _tensors(directory):
    out = {}
    for file in sorted(directory.glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


@pytest.mark.parametrize("recipe", ["fp8-block", "int8-dynamic", "int8-weight-only", INT4], ids=str)
def test_gpu_conversion_writes_what_the_cpu_writes(tmp_path, recipe):
    path = minilm_path()
    start = time.perf_counter()
    convert_checkpoint(path, tmp_path / "gpu", recipe, device="cuda", progress=False)
    gpu_seconds = time.perf_counter() - start
    convert_checkpoint(path, tmp_path / "cpu", recipe, device="cpu", progress=False)
    gpu, cpu = _tensors(tmp_path / "gpu"), _tensors(tmp_path / "cpu")
    assert gpu.keys() == cpu.keys()
    different = [k for k in gpu if gpu[k].dtype != cpu[k].dtype or not torch.equal(bits(gpu[k]), bits(cpu[k]))]
    assert not different, f"{len(different)} tensors differ, first {different[:3]}"
    print(f"{recipe}: GPU conversion {gpu_seconds:.2f} s")


def test_loaded_checkpoint_runs_on_the_gpu(tmp_path):
    import transformers

    path = minilm_path()
    convert_checkpoint(path, tmp_path / "int4", "int4-weight-only", progress=False)  # default (search) rounding
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    batch = tokenizer(["GPUs multiply matrices.", "A checkpoint survives the disk."], padding=True,
                      return_tensors="pt")
    reference = transformers.AutoModel.from_pretrained(path).float().eval()  # the carried copy may be fp16
    model = load_quantized(tmp_path / "int4", device="cuda")
    assert all(t.device.type == "cuda" for t in model.state_dict().values())

    def embed(m, device):
        inputs = {k: v.to(device) for k, v in batch.items()}
        with torch.no_grad():
            out = m(**inputs).last_hidden_state.float().cpu()
        mask = batch["attention_mask"][..., None].float()
        return torch.nn.functional.normalize((out * mask).sum(1) / mask.sum(1), dim=-1)

    cosine = (embed(model, "cuda") * embed(reference, "cpu")).sum(-1)
    assert cosine.min() > 0.95, cosine
