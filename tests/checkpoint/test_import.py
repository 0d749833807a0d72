"""Other tools' checkpoints straight into our layers: compressed-tensors (written by the package itself),
DeepSeek / Hugging Face fp8, GPTQ and AWQ."""
import json

import pytest
import torch
from safetensors.torch import save_file

from quantkit.checkpoint import CheckpointError, load_quantized
from quantkit.layers import Fp8BlockLinear, Int4WeightOnlyLinear, Int8DynamicLinear, Int8WeightOnlyLinear
from quantkit.reference.common import ceil_div

from .common import bits, tiny_llama, write_config


def _linear_names(model):
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]


def _save_hf_dir(directory, model, tensors, quantization_config):
    """A model directory as another tool writes it: its tensors, the model's config + quantization_config."""
    directory.mkdir()
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"),
              metadata={"format": "pt"})
    config = json.loads(model.config.to_json_string(use_diff=False))
    config["architectures"] = [type(model).__name__]
    config["quantization_config"] = quantization_config
    write_config(directory, config)


# -- compressed-tensors, compressed by the package ----------------------------------------------------
def _ct_case(kind):
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES

    if kind == "int8-weight-only":  # channel-wise W8A16 (the preset W8A16 is group-wise)
        return dict(weights=QuantizationArgs(num_bits=8, type="int", strategy="channel", symmetric=True)), \
            "pack-quantized", Int8WeightOnlyLinear
    preset, fmt, cls = {"fp8-block": ("FP8_BLOCK", "float-quantized", Fp8BlockLinear),
                        "int8-dynamic": ("W8A8", "int-quantized", Int8DynamicLinear),
                        "int4-sym": ("W4A16", "pack-quantized", Int4WeightOnlyLinear),
                        "int4-asym": ("W4A16_ASYM", "pack-quantized", Int4WeightOnlyLinear)}[kind]
    return dict(PRESET_SCHEMES[preset]), fmt, cls


def _ct_qparams(w, args):
    """Scales (and zero-points) as llm-compressor's min-max observer would make them, in bf16."""
    n, k = w.shape
    if args.strategy == "block":
        blocks = torch.nn.functional.pad(w.float(), (0, -k % 128, 0, -n % 128)).view(ceil_div(n, 128), 128, -1, 128)
        return {"weight_scale": (blocks.abs().amax(dim=(1, 3)) / 448).bfloat16()}
    groups = w.float().view(n, -1, args.group_size) if args.strategy == "group" else w.float().view(n, 1, k)
    if args.symmetric:
        qmax = 127 if args.num_bits == 8 else 7.5
        return {"weight_scale": (groups.abs().amax(-1) / qmax).bfloat16()}
    lo, hi = groups.amin(-1).clamp(max=0), groups.amax(-1).clamp(min=0)
    scale = ((hi - lo) / 15).bfloat16()
    zero = (torch.round(-lo / scale.float()) - 8).clamp(-8, 7).to(torch.int8)
    return {"weight_scale": scale, "weight_zero_point": zero}


@pytest.mark.parametrize("kind", ["fp8-block", "int8-dynamic", "int8-weight-only", "int4-sym", "int4-asym"])
def test_compressed_tensors_checkpoint_written_by_the_package(tmp_path, kind):
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig, QuantizationScheme

    model = tiny_llama(intermediate_size=200)  # 200: partial fp8 blocks
    scheme_args, fmt, cls = _ct_case(kind)
    scheme = QuantizationScheme(targets=["Linear"], format=fmt, **scheme_args)
    if kind.startswith("int4"):
        model = tiny_llama(intermediate_size=256)  # int4 needs in_features % 128 == 0
    compressor = BaseCompressor.get_value_from_registry(fmt)
    tensors, dense = {}, {}
    for key, value in model.state_dict().items():
        tensors[key] = value
    for name in _linear_names(model):
        w = model.get_submodule(name).weight.detach()
        state = {"weight": w, **_ct_qparams(w, scheme.weights)}
        compressed = compressor.compress(state, scheme)
        del tensors[f"{name}.weight"]
        tensors.update({f"{name}.{k}": v for k, v in compressed.items()})
        dense[name] = compressor.decompress(compressed, scheme)["weight"]
    tensors.pop("lm_head.weight")  # tied
    qc = QuantizationConfig(config_groups={"group_0": scheme}, format=fmt, quantization_status="compressed",
                            ignore=["lm_head"]).model_dump()
    _save_hf_dir(tmp_path / "ct", model, tensors, json.loads(json.dumps(qc, default=str)))

    loaded = load_quantized(tmp_path / "ct")
    for name in _linear_names(model):
        layer = loaded.get_submodule(name)
        assert type(layer) is cls, name
        ours = layer.dequantize(dense[name].dtype)
        assert torch.equal(bits(ours), bits(dense[name])), name
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    with torch.no_grad():
        loaded(torch.randint(0, 256, (1, 5)))


# -- DeepSeek-V3 / Hugging Face fp8 ---------------------------------------------------------------
def _deepseek_fp8(model, scale_dtype, ue8m0):
    tensors = dict(model.state_dict())
    tensors.pop("lm_head.weight")
    expected = {}
    for name in _linear_names(model):
        w = tensors.pop(f"{name}.weight").float()
        n, k = w.shape
        blocks = torch.nn.functional.pad(w, (0, -k % 128, 0, -n % 128)).view(ceil_div(n, 128), 128, -1, 128)
        scale = blocks.abs().amax(dim=(1, 3)) / 448
        if ue8m0:
            scale = torch.exp2(torch.ceil(torch.log2(scale)))
        scale = scale.to(scale_dtype)
        s = scale.float().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        q = (w / s).clamp(-448, 448).to(torch.float8_e4m3fn)
        tensors[f"{name}.weight"] = q
        tensors[f"{name}.weight_scale_inv"] = scale
        expected[name] = q.float() * s
    return tensors, expected


@pytest.mark.parametrize("scale_dtype,ue8m0", [(torch.float32, False), (torch.bfloat16, False),
                                               (torch.float32, True), (torch.float8_e8m0fnu, True)])
def test_deepseek_fp8_checkpoint(tmp_path, scale_dtype, ue8m0):
    model = tiny_llama(intermediate_size=200)
    tensors, expected = _deepseek_fp8(model, scale_dtype, ue8m0)
    qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    if ue8m0:
        qc["scale_fmt"] = "ue8m0"
    _save_hf_dir(tmp_path / "fp8", model, tensors, qc)
    loaded = load_quantized(tmp_path / "fp8")
    for name, dense in expected.items():
        layer = loaded.get_submodule(name)
        assert isinstance(layer, Fp8BlockLinear) and layer.scale_fmt == ("ue8m0" if ue8m0 else None)
        assert layer.weight_scale.dtype == torch.float32
        assert torch.equal(layer.dequantize(), dense), name
    assert type(loaded.lm_head) is torch.nn.Linear


def test_fp8_weight_without_its_scale(tmp_path):
    model = tiny_llama()
    tensors, _ = _deepseek_fp8(model, torch.float32, False)
    del tensors["model.layers.1.mlp.up_proj.weight_scale_inv"]
    qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    _save_hf_dir(tmp_path / "fp8", model, tensors, qc)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor model\.layers\.1\.mlp\.up_proj\.weight: "
                                              r"fp8 weight without its scale .*weight_scale_inv"):
        load_quantized(tmp_path / "fp8")


def test_fp8_weight_in_a_checkpoint_without_quantization_config(tmp_path):
    model = tiny_llama()
    tensors, _ = _deepseek_fp8(model, torch.float32, False)
    _save_hf_dir(tmp_path / "fp8", model, tensors, None)
    config = json.loads((tmp_path / "fp8" / "config.json").read_text())
    del config["quantization_config"]
    write_config(tmp_path / "fp8", config)
    with pytest.raises(CheckpointError, match="float8_e4m3fn weight but config.json has no quantization_config"):
        load_quantized(tmp_path / "fp8")


def test_unknown_quant_method(tmp_path):
    model = tiny_llama()
    tensors = dict(model.state_dict())
    tensors.pop("lm_head.weight")
    _save_hf_dir(tmp_path / "x", model, tensors, {"quant_method": "hqq"})
    with pytest.raises(CheckpointError, match=r"config\.json: quantization_config\.quant_method 'hqq' is not one"):
        load_quantized(tmp_path / "x")


# -- GPTQ and AWQ ------------------------------------------------------------------------------------
def _pack_cols(values):
    """[R, C] nibbles -> int32 [R, C/8], column 8j+i at bits 4i of word j (two's complement)."""
    v = values.to(torch.int64).view(values.shape[0], -1, 8)
    word = sum(v[..., i] << (4 * i) for i in range(8))
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def _int4_case(n, k, g, sym):
    q = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    zero = torch.full((n, k // g), 8, dtype=torch.uint8) if sym else torch.randint(1, 16, (n, k // g), dtype=torch.uint8)
    scale = (torch.rand(n, k // g) * 0.02 + 0.001).half()
    dense = ((q.view(n, -1, g).float() - zero.float()[..., None]) * scale.float()[..., None]).view(n, k)
    return q, zero, scale, dense


@pytest.mark.parametrize("checkpoint_format,sym", [("gptq", True), ("gptq", False), ("gptq_v2", False)])
def test_gptq_checkpoint(tmp_path, checkpoint_format, sym):
    model = tiny_llama(intermediate_size=256)
    tensors = dict(model.state_dict())
    tensors.pop("lm_head.weight")
    expected = {}
    for name in _linear_names(model):
        w = tensors.pop(f"{name}.weight")
        n, k = w.shape
        q, zero, scale, expected[name] = _int4_case(n, k, 64, sym)
        stored_zero = zero.to(torch.int16) - (1 if checkpoint_format == "gptq" else 0)
        # GPTQ: [K/8, N], word (j, c) holds rows 8j..8j+7 of column c
        tensors[f"{name}.qweight"] = _pack_cols(q).t().contiguous()
        tensors[f"{name}.qzeros"] = _pack_cols((stored_zero & 0xF).t().contiguous())
        tensors[f"{name}.scales"] = scale.t().contiguous()
        tensors[f"{name}.g_idx"] = (torch.arange(k) // 64).to(torch.int32)
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": False, "sym": sym,
          "checkpoint_format": checkpoint_format}
    _save_hf_dir(tmp_path / "gptq", model, tensors, qc)
    loaded = load_quantized(tmp_path / "gptq")
    for name, dense in expected.items():
        layer = loaded.get_submodule(name)
        assert isinstance(layer, Int4WeightOnlyLinear) and layer.group_size == 64
        assert layer.weight_scale.dtype == torch.float16
        assert torch.equal(layer.dequantize(), dense), name


def test_gptq_act_order_is_refused(tmp_path):
    model = tiny_llama(intermediate_size=256)
    tensors = dict(model.state_dict())
    tensors.pop("lm_head.weight")
    for name in _linear_names(model):
        n, k = tensors.pop(f"{name}.weight").shape
        tensors[f"{name}.qweight"] = torch.zeros(k // 8, n, dtype=torch.int32)
        tensors[f"{name}.qzeros"] = torch.zeros(k // 64, n // 8, dtype=torch.int32)
        tensors[f"{name}.scales"] = torch.ones(k // 64, n, dtype=torch.float16)
        tensors[f"{name}.g_idx"] = (torch.randperm(k) // 64).to(torch.int32)
    _save_hf_dir(tmp_path / "gptq", model, tensors, {"quant_method": "gptq", "bits": 4, "group_size": 64,
                                                      "desc_act": True, "sym": False})
    with pytest.raises(CheckpointError, match=r"g_idx: activation-order group indices"):
        load_quantized(tmp_path / "gptq")


@pytest.mark.parametrize("zero_point", [True, False])
def test_awq_checkpoint_matches_compressed_tensors_own_awq_converter(tmp_path, zero_point):
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.entrypoints.convert.converters.autoawq import AutoAWQConverter
    from compressed_tensors.quantization import QuantizationScheme

    model = tiny_llama(intermediate_size=256)
    tensors = dict(model.state_dict())
    tensors.pop("lm_head.weight")
    awq_order = (0, 2, 4, 6, 1, 3, 5, 7)
    expected = {}
    converter = AutoAWQConverter(bits=4, group_size=128, zero_point=zero_point)
    scheme = QuantizationScheme(targets=["Linear"], format="pack-quantized",
                                weights=converter._build_quant_config().config_groups["config_group_0"].weights)
    for name in _linear_names(model):
        n, k = tensors.pop(f"{name}.weight").shape
        q, zero, scale, expected[name] = _int4_case(n, k, 128, not zero_point)
        # AWQ GEMM: [K, N/8], nibble p of a word holds column awq_order[p] of its 8
        perm = torch.tensor([8 * (c // 8) + awq_order[c % 8] for c in range(n)])
        awq = {f"{name}.qweight": _pack_cols(q.t()[:, perm].contiguous()), f"{name}.scales": scale.t().contiguous()}
        if zero_point:
            awq[f"{name}.qzeros"] = _pack_cols(zero.t()[:, perm].contiguous())
        tensors.update(awq)
        # the package's own reading of the same tensors
        converted = AutoAWQConverter(bits=4, group_size=128, zero_point=zero_point).process(dict(awq))
        local = {key.rpartition(".")[2]: v for key, v in converted.items()}
        theirs = BaseCompressor.get_value_from_registry("pack-quantized").decompress(local, scheme)["weight"]
        # the package multiplies in the scales' dtype (fp16): our exact product, rounded once, is the same
        assert theirs.dtype == torch.float16 and torch.equal(theirs, expected[name].half()), name
    qc = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": zero_point, "version": "gemm"}
    _save_hf_dir(tmp_path / "awq", model, tensors, qc)
    loaded = load_quantized(tmp_path / "awq")
    for name, dense in expected.items():
        layer = loaded.get_submodule(name)
        assert isinstance(layer, Int4WeightOnlyLinear) and layer.symmetric == (not zero_point)
        assert torch.equal(layer.dequantize(), dense), name
