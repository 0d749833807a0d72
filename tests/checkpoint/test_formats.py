"""Format tables against the compressed-tensors package itself (its packing, its config schema)."""
import pytest
import torch

pytest.importorskip("compressed_tensors")
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32  # noqa: E402
from compressed_tensors.quantization import QuantizationConfig  # noqa: E402

from quantkit.checkpoint import formats  # noqa: E402
from quantkit.checkpoint.formats import (  # noqa: E402
    CT_FORMAT,
    HF_FP8_FORMAT,
    SchemeResolver,
    build_quantization_config,
    pack_int32,
    unpack_int32,
)
from quantkit.checkpoint.storage import CheckpointError  # noqa: E402
from quantkit.recipes import Fp8Block, Int4WeightOnly, Int8Dynamic, Int8WeightOnly  # noqa: E402


@pytest.mark.parametrize("byte_packing", [True, False], ids=["bytes", "words"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("shape", [(5, 64), (3, 301), (130, 7), (1, 1), (16, 1)])
def test_packing_matches_compressed_tensors_bit_for_bit(bits, shape, byte_packing, monkeypatch):
    monkeypatch.setattr(formats, "_BYTE_PACKING", byte_packing and formats._BYTE_PACKING)
    offset = 1 << (bits - 1)
    signed = torch.randint(-offset, offset, shape, dtype=torch.int8)
    ours = pack_int32((signed.to(torch.int16) + offset), bits)
    theirs = pack_to_int32(signed, bits)
    assert ours.dtype == torch.int32 and torch.equal(ours, theirs)
    assert torch.equal(unpack_int32(ours, bits, shape[1]).to(torch.int64) - offset, signed.to(torch.int64))
    assert torch.equal(unpack_from_int32(ours, bits, torch.Size(shape)), signed)
    # zero-points are packed along dim 0
    ours0 = pack_int32((signed.to(torch.int16) + offset).t(), bits).t().contiguous()
    assert torch.equal(ours0, pack_to_int32(signed, bits, packed_dim=0))


ALL = [Fp8Block(), Fp8Block(scale_fmt="ue8m0"), Int8Dynamic(), Int8WeightOnly(), Int4WeightOnly(),
       Int4WeightOnly(group_size=32, symmetric=True)]


@pytest.mark.parametrize("recipe", ALL, ids=str)
def test_config_validates_with_compressed_tensors_and_reads_back(recipe):
    qc = build_quantization_config(CT_FORMAT, {"a.q": recipe, "a.k": recipe}, ["lm_head"], class_target=True)
    parsed = QuantizationConfig.model_validate(qc)
    assert parsed.quantization_status == "compressed" and parsed.ignore == ["lm_head"]
    (scheme,) = parsed.config_groups.values()
    assert scheme.targets == ["Linear"]
    assert scheme.format == qc["format"] == {Fp8Block: "float-quantized", Int8Dynamic: "int-quantized"}.get(
        type(recipe), "pack-quantized")
    resolver = SchemeResolver.from_config(qc, "config.json")
    stored = {Fp8Block: {"weight": torch.float8_e4m3fn, "weight_scale": torch.float32},
              Int8Dynamic: {"weight": torch.int8, "weight_scale": torch.float32}}.get(
        type(recipe), {"weight_packed": torch.int32, "weight_scale": torch.bfloat16, "weight_shape": torch.int64})
    layout = resolver.layout_for("a.q", True, stored.get, str)
    assert layout.recipe == recipe
    assert resolver.layout_for("lm_head", True, lambda s: torch.bfloat16 if s == "weight" else None, str) is None


def test_mixed_recipes_make_one_group_each_with_module_targets():
    modules = {"l.0.q": Int4WeightOnly(), "l.0.o": Int8Dynamic(), "l.1.q": Int4WeightOnly()}
    qc = build_quantization_config(CT_FORMAT, modules, [], class_target=True)
    parsed = QuantizationConfig.model_validate(qc)
    assert qc["format"] == "mixed-precision"
    targets = sorted(sorted(s.targets) for s in parsed.config_groups.values())
    assert targets == [["l.0.o"], ["l.0.q", "l.1.q"]]
    resolver = SchemeResolver.from_config(qc, "config.json")
    dt = {"weight_packed": torch.int32}.get
    assert resolver.layout_for("l.1.q", True, dt, str).recipe == Int4WeightOnly()
    assert resolver.layout_for("l.0.o", True, {"weight": torch.int8}.get, str).recipe == Int8Dynamic()
    assert resolver.layout_for("l.1.o", True, {"weight": torch.bfloat16}.get, str) is None


def test_fp8_config_is_what_transformers_parses():
    from transformers.quantizers.auto import AutoQuantizationConfig

    qc = build_quantization_config(HF_FP8_FORMAT, {"q": Fp8Block(scale_fmt="ue8m0")}, ["lm_head"], class_target=True)
    assert qc == {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                  "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"], "scale_fmt": "ue8m0"}
    cfg = AutoQuantizationConfig.from_dict(dict(qc))
    assert type(cfg).__name__ == "FineGrainedFP8Config"
    assert list(cfg.weight_block_size) == [128, 128] and cfg.scale_fmt == "ue8m0"
    assert cfg.modules_to_not_convert == ["lm_head"]
    with pytest.raises(ValueError, match="fp8-block layers only"):
        build_quantization_config(HF_FP8_FORMAT, {"q": Int8Dynamic()}, [], class_target=True)


def test_unknown_quant_method_and_unsupported_schemes():
    with pytest.raises(CheckpointError, match=r"cfg\.json: quantization_config\.quant_method 'bitsandbytes' is not"):
        SchemeResolver.from_config({"quant_method": "bitsandbytes"}, "cfg.json")
    per_tensor_fp8 = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {
        "g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
              "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": True}}}}
    resolver = SchemeResolver.from_config(per_tensor_fp8, "cfg.json")
    with pytest.raises(CheckpointError, match="config group 'g'.*not a scheme quantkit has a layer for"):
        resolver.layout_for("x", True, {"weight": torch.float8_e4m3fn, "weight_scale": torch.float32}.get,
                            lambda s: f"f.safetensors: tensor x.{s}")
    with pytest.raises(CheckpointError, match="weight_block_size"):
        SchemeResolver.from_config({"quant_method": "fp8", "weight_block_size": None}, "cfg.json")
    with pytest.raises(CheckpointError, match="bits=8"):
        SchemeResolver.from_config({"quant_method": "gptq", "bits": 8, "group_size": 128}, "cfg.json")
