"""Mixture-of-experts checkpoints: experts stored one tensor per expert projection under the names transformers
gives them on disk (Mixtral: block_sparse_moe.experts.{e}.w1 / w3 / w2), written by save_quantized, read by
load_quantized and transformers, and quantized on disk by convert."""
import pytest
import torch
from safetensors import safe_open

import quantkit
from quantkit.checkpoint import convert_checkpoint, load_quantized, save_quantized
from quantkit.layers import QuantizedLinear
from quantkit.layers.experts import Experts

from .common import INT4, RECIPES, bits

transformers = pytest.importorskip("transformers")


def tiny_mixtral(dtype=torch.float32, seed=0):
    config = transformers.MixtralConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return transformers.MixtralForCausalLM._from_config(config, dtype=dtype).eval()


def tiny_qwen3_moe(dtype=torch.float32, seed=0):
    config = transformers.Qwen3MoeConfig(vocab_size=128, hidden_size=128, intermediate_size=256,
                                         moe_intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, head_dim=32, num_experts=4, num_experts_per_tok=2)
    torch.manual_seed(seed)
    return transformers.Qwen3MoeForCausalLM._from_config(config, dtype=dtype).eval()


def stored_names(directory):
    with safe_open(str(directory / "model.safetensors"), "pt") as f:
        return set(f.keys())


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("name,fmt", [("fp8-block", "compressed-tensors"), ("fp8-block", "fp8"),
                                      ("int8-dynamic", "compressed-tensors"), ("int8-weight-only", "compressed-tensors"),
                                      ("int4", "compressed-tensors")])
def test_moe_round_trip_under_the_checkpoint_names(tmp_path, name, fmt):
    model = tiny_mixtral(dtype=torch.bfloat16)
    quantkit.quantize_(model, RECIPES[name])
    save_quantized(model, tmp_path / "ckpt", format=fmt)
    names = stored_names(tmp_path / "ckpt")
    # what transformers' save_pretrained writes for Mixtral (and what vLLM's Mixtral loader reads)
    primary = "weight_packed" if name in ("int4", "int8-weight-only") else "weight"  # pack-quantized
    assert f"model.layers.1.block_sparse_moe.experts.3.w2.{primary}" in names
    assert "model.layers.0.block_sparse_moe.gate.weight" in names
    assert not any(".mlp." in n for n in names)
    loaded = load_quantized(tmp_path / "ckpt")
    experts = loaded.get_submodule("model.layers.1.mlp.experts")
    assert isinstance(experts, Experts) and isinstance(experts.expert(3).down, QuantizedLinear)
    for key, tensor in model.state_dict().items():
        assert torch.equal(bits(loaded.state_dict()[key]), bits(tensor)), key
    ids = torch.randint(0, 128, (2, 6))
    assert torch.equal(logits(loaded, ids), logits(model, ids))


@pytest.mark.parametrize("name", ["int8-weight-only", "int4-sym"])
def test_transformers_loads_our_moe_checkpoint(tmp_path, name):
    """transformers (with compressed-tensors) merges our per-expert tensors into its fused experts, dequantized.

    transformers 5.17's expert decompression reads pack-quantized weights without zero-points (so not int4's default
    asymmetric rounding), not int8-dynamic's int-quantized weights, and fp8 scales only where they broadcast over
    the weight (not 128 x 128 blocks of a real model): notes/moe.md. load_quantized reads all of them."""
    model = tiny_qwen3_moe()
    quantkit.quantize_(model, RECIPES[name])
    save_quantized(model, tmp_path / "ckpt")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").eval()
    ids = torch.randint(0, 128, (2, 6))
    ours, their_logits = logits(model, ids), logits(theirs, ids)
    fused = theirs.get_submodule("model.layers.0.mlp.experts")
    experts = model.get_submodule("model.layers.0.mlp.experts")
    for e in range(experts.num_experts):
        ex = experts.expert(e)
        assert torch.equal(fused.gate_up_proj[e], torch.cat([ex.gate.dequantize(), ex.up.dequantize()]))
        assert torch.equal(fused.down_proj[e], ex.down.dequantize())
    torch.testing.assert_close(their_logits, ours, rtol=1e-4, atol=1e-4)  # same dense weights, summation order


@pytest.mark.parametrize("make", [tiny_mixtral, tiny_qwen3_moe])
def test_convert_quantizes_experts_on_disk(tmp_path, make):
    """A checkpoint as transformers saves it (per-expert tensors): convert quantizes every expert projection,
    bit for bit as quantize_ does in memory, and load_quantized reads the result."""
    model = make(dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "float")
    report = convert_checkpoint(tmp_path / "float", tmp_path / "int8", "int8-weight-only", progress=False)
    experts = 2 * 4 * 3
    assert len(report.quantized) == experts + 2 * 4 + 1  # experts, attention, lm_head
    in_memory = make(dtype=torch.bfloat16)
    quantkit.quantize_(in_memory, "int8-weight-only")
    loaded = load_quantized(tmp_path / "int8")
    for key, tensor in in_memory.state_dict().items():
        assert torch.equal(bits(loaded.state_dict()[key]), bits(tensor)), key
    ids = torch.randint(0, 128, (2, 6))
    assert torch.equal(logits(loaded, ids), logits(in_memory, ids))

    # and back: --dequantize gives per-expert bf16 tensors that transformers loads into its fused experts
    convert_checkpoint(tmp_path / "int8", tmp_path / "bf16", None, dequantize=True, progress=False)
    assert stored_names(tmp_path / "bf16") == stored_names(tmp_path / "float")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "bf16", dtype=torch.bfloat16).eval()
    torch.testing.assert_close(logits(theirs, ids), logits(in_memory, ids), rtol=0.02, atol=0.02)


def test_convert_keeps_ignored_experts(tmp_path):
    model = tiny_mixtral(dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "float")
    plan = quantkit.recipes.load_plan(INT4).with_extra(ignore=["*.experts.*"])
    report = convert_checkpoint(tmp_path / "float", tmp_path / "out", plan, progress=False)
    assert len(report.quantized) == 2 * 4 + 1
    assert all("experts" in name for name in report.kept)
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        assert f.get_tensor("model.layers.0.block_sparse_moe.experts.0.w1.weight").dtype == torch.bfloat16
    loaded = load_quantized(tmp_path / "out")
    assert isinstance(loaded.get_submodule("model.layers.0.mlp.experts.0.w1"), torch.nn.Linear)


@pytest.mark.parametrize("name,fmt", [("fp8-block", "fp8"), ("int8-dynamic", "compressed-tensors")])
def test_stacked_experts_save_and_load(tmp_path, name, fmt):
    """After a forward on the GPU the experts' buffers are views into stacked tensors (quantkit.kernels.moe): the
    checkpoint is the same."""
    model = tiny_mixtral(dtype=torch.bfloat16)
    quantkit.quantize_(model, RECIPES[name])
    save_quantized(model, tmp_path / "before", format=fmt)
    for module in model.modules():
        if isinstance(module, Experts):
            assert module._stacks() is not None
    save_quantized(model, tmp_path / "after", format=fmt)
    assert (tmp_path / "before" / "model.safetensors").read_bytes() == (tmp_path / "after" / "model.safetensors").read_bytes()
    loaded = load_quantized(tmp_path / "after")
    for key, tensor in model.state_dict().items():
        assert torch.equal(bits(loaded.state_dict()[key]), bits(tensor)), key


def test_plain_safetensors_and_save_pretrained_take_the_stacked_experts(tmp_path):
    """The experts' buffers are disjoint views into the stacks (shared storage): safetensors' own ``save_file`` of the
    state dict and transformers' ``save_pretrained`` write them, and the bytes read back are the state dict's."""
    from safetensors.torch import load_file, save_file

    model = tiny_mixtral(dtype=torch.bfloat16)
    quantkit.quantize_(model, "int8-weight-only")
    state = model.state_dict()
    views = [t for k, t in state.items() if ".mlp.experts." in k and k.endswith(".w1.weight")]
    assert len({t.untyped_storage().data_ptr() for t in views[:2]}) == 1  # (what this test is about)
    save_file(state, tmp_path / "plain.safetensors")
    back = load_file(tmp_path / "plain.safetensors")
    assert back.keys() == state.keys()
    for key, tensor in state.items():
        assert torch.equal(bits(back[key]), bits(tensor)), key
    model.save_pretrained(tmp_path / "hf")
    assert (tmp_path / "hf" / "model.safetensors").is_file()
