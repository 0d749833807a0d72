"""save_quantized -> load_quantized round trips, and outside readers (compressed-tensors, transformers)."""
import json

import pytest
import torch
from safetensors import safe_open

import quantkit
from quantkit.checkpoint import CheckpointError, load_quantized, save_quantized
from quantkit.layers import Fp8BlockLinear, Int4WeightOnlyLinear, Int8DynamicLinear, QuantizedLinear

from .common import RECIPES, assert_same_state, bits, make_net, read_config, tiny_llama


def _quantized_net(recipe, **kw):
    net = make_net()
    with pytest.warns(UserWarning) if "int4" in str(recipe) else _nullcontext():
        quantkit.quantize_(net, recipe, **kw)
    return net


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("sharded", [False, True], ids=["one-file", "sharded"])
@pytest.mark.parametrize("fmt", ["compressed-tensors", "fp8"])
@pytest.mark.parametrize("name", list(RECIPES))
def test_round_trip_is_bit_exact(tmp_path, name, fmt, sharded):
    net = _quantized_net(RECIPES[name])
    out = tmp_path / "ckpt"
    if fmt == "fp8" and not name.startswith("fp8"):
        with pytest.raises(ValueError, match="fp8-block layers only"):
            save_quantized(net, out, format=fmt)
        assert not out.exists()
        return
    save_quantized(net, out, format=fmt, max_shard_size=60_000 if sharded else "5GB")
    files = sorted(p.name for p in out.iterdir())
    assert ("model.safetensors.index.json" in files) == sharded
    assert sum(f.endswith(".safetensors") for f in files) > (2 if sharded else 0)
    assert read_config(out)["quantization_config"]["quant_method"] == ("fp8" if fmt == "fp8" else "compressed-tensors")

    skeleton = make_net(device="meta")
    loaded = load_quantized(out, skeleton)
    assert loaded is skeleton
    assert_same_state(net, loaded)
    for a, b in zip(net.modules(), loaded.modules()):
        assert type(a) is type(b)
        if isinstance(a, QuantizedLinear):
            assert a.extra_repr() == b.extra_repr()  # scale_fmt, group_size, symmetric survive
    ids = torch.randint(0, 50, (3, 5))
    assert torch.equal(net(ids), loaded(ids))


def test_mixed_recipes_round_trip(tmp_path):
    net = make_net()
    quantkit.quantize_(net, "fp8-block", overrides={"l2": RECIPES["int4"], "l4": "int8-dynamic", "l3": "skip"})
    save_quantized(net, tmp_path / "ckpt")
    qc = read_config(tmp_path / "ckpt")["quantization_config"]
    assert qc["format"] == "mixed-precision" and qc["ignore"] == ["l3"]
    assert sorted(sorted(g["targets"]) for g in qc["config_groups"].values()) == [["l1"], ["l2"], ["l4"]]
    loaded = load_quantized(tmp_path / "ckpt", make_net(device="meta"))
    assert [type(m).__name__ for m in (loaded.l1, loaded.l2, loaded.l3, loaded.l4)] == [
        "Fp8BlockLinear", "Int4WeightOnlyLinear", "Linear", "Int8DynamicLinear"]
    assert_same_state(net, loaded)


def test_transformers_model_round_trip_builds_from_config_and_reties(tmp_path):
    model = tiny_llama()
    quantkit.quantize_(model, RECIPES["int4"], ignore=["lm_head"])
    assert model.lm_head.weight is model.model.embed_tokens.weight
    out = tmp_path / "llama"
    save_quantized(model, out, max_shard_size=100_000)
    config = read_config(out)
    assert config["architectures"] == ["LlamaForCausalLM"] and config["hidden_size"] == 128
    assert config["quantization_config"]["ignore"] == ["lm_head"]
    with open(out / "model.safetensors.index.json") as f:
        assert "lm_head.weight" not in json.load(f)["weight_map"]  # tied: stored once

    loaded = load_quantized(out)  # no skeleton: built on meta from config.json
    assert type(loaded).__name__ == "LlamaForCausalLM"
    assert isinstance(loaded.model.layers[0].mlp.down_proj, Int4WeightOnlyLinear)
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert not any(t.is_meta for t in loaded.state_dict().values())
    assert_same_state(model, loaded)
    ids = torch.randint(0, 256, (2, 9))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)


# -- outside readers ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fp8-block", "int8-dynamic", "int8-weight-only", "int4", "int4-sym"])
def test_compressed_tensors_decompresses_to_our_dequantized_weights(tmp_path, name):
    """The package's own compressors, driven by the package's parse of our config, on our tensors."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig

    net = _quantized_net(RECIPES[name])
    save_quantized(net, tmp_path / "ckpt")
    config = QuantizationConfig.model_validate(read_config(tmp_path / "ckpt")["quantization_config"])
    (scheme,) = config.config_groups.values()
    compressor = BaseCompressor.get_value_from_registry(scheme.format)
    with safe_open(str(tmp_path / "ckpt" / "model.safetensors"), "pt") as f:
        stored = {k: f.get_tensor(k) for k in f.keys()}
    checked = 0
    for module_name, layer in net.named_modules():
        if not isinstance(layer, QuantizedLinear):
            assert module_name in config.ignore or not isinstance(layer, torch.nn.Linear)
            continue
        params = compressor.compression_param_names(scheme)
        state = {p: stored[f"{module_name}.{p}"] for p in params}
        dense = compressor.decompress(state, scheme)["weight"]
        ours = layer.dequantize(dense.dtype)
        assert dense.shape == ours.shape and torch.equal(bits(dense), bits(ours)), module_name
        checked += 1
    assert checked == (2 if "int4" in name else 4)


@pytest.mark.parametrize("name", ["fp8-block", "int8-dynamic", "int8-weight-only", "int4"])
def test_transformers_loads_our_compressed_tensors_output(tmp_path, name):
    """transformers + compressed-tensors (the path vLLM's format comes from) load our files on the CPU."""
    import transformers

    model = tiny_llama(dtype=torch.float32)
    quantkit.quantize_(model, RECIPES[name], ignore=["lm_head"])
    save_quantized(model, tmp_path / "ckpt")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").eval()
    ids = torch.randint(0, 256, (2, 7))
    with torch.no_grad():
        their_logits = theirs(ids).logits  # decompresses on the first forward
        our_logits = model(ids).logits
    for module_name, layer in model.named_modules():
        if isinstance(layer, QuantizedLinear):
            w = theirs.get_submodule(module_name).weight
            assert torch.equal(bits(w), bits(layer.dequantize(w.dtype))), module_name
    if name in ("int8-weight-only", "int4"):  # weight-only: same dense weights, so the same model up to matmul order
        torch.testing.assert_close(their_logits, our_logits, rtol=1e-4, atol=1e-4)


def test_our_fp8_layout_is_what_transformers_fp8_integration_requires(tmp_path):
    """transformers' fine-grained fp8 loader needs accelerate (not installed) or a GPU, so check its
    requirements directly: the FP8Linear it builds from our config (transformers/integrations/
    finegrained_fp8.py: replace_with_fp8_linear, FP8Linear.__init__) has exactly our tensor names,
    shapes and dtypes, and its Fp8Dequantize gives our dequantized weights."""
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize, replace_with_fp8_linear
    from transformers.quantizers.auto import AutoQuantizationConfig

    for scale_fmt in (None, "ue8m0"):
        model = tiny_llama()
        quantkit.quantize_(model, {"type": "fp8-block", "scale_fmt": scale_fmt}, ignore=["lm_head"])
        out = tmp_path / f"fp8-{scale_fmt}"
        save_quantized(model, out, format="fp8")
        config = read_config(out)
        qc = AutoQuantizationConfig.from_dict(dict(config["quantization_config"]))
        skeleton = tiny_llama()
        skeleton = replace_with_fp8_linear(skeleton, modules_to_not_convert=qc.modules_to_not_convert,
                                           quantization_config=qc, pre_quantized=True)
        theirs = {k: v for k, v in skeleton.state_dict().items() if k != "lm_head.weight"}
        with safe_open(str(out / "model.safetensors"), "pt") as f:
            ours = {k: f.get_tensor(k) for k in f.keys()}
        assert theirs.keys() == ours.keys()
        for key, t in theirs.items():
            assert tuple(ours[key].shape) == tuple(t.shape), key
            if key.endswith("weight_scale_inv") and scale_fmt == "ue8m0":
                # FP8Linear holds float8_e8m0fnu; float32 containers (DeepSeek-V3.1's) are cast after loading
                # (FineGrainedFP8HfQuantizer._process_model_after_weight_loading), exactly for powers of two
                assert t.dtype == torch.float8_e8m0fnu and ours[key].dtype == torch.float32
                assert torch.equal(ours[key].to(torch.float8_e8m0fnu).float(), ours[key])
            elif key.endswith(("weight_scale_inv",)) or t.dtype == torch.float8_e4m3fn:
                assert ours[key].dtype == t.dtype, key
        dequant = Fp8Dequantize(None)
        for module_name, layer in model.named_modules():
            if isinstance(layer, Fp8BlockLinear):
                w, s = ours[f"{module_name}.weight"], ours[f"{module_name}.weight_scale_inv"]
                assert torch.equal(bits(dequant._dequantize_one(w, s, torch.float32)), bits(layer.dequantize()))


def test_transformers_loads_our_fp8_layout_when_accelerate_is_installed(tmp_path):
    """Runs where accelerate is installed (transformers' fp8 loader insists on it): on a CPU it
    dequantizes to bf16, on an sm_89+ GPU it keeps FP8Linear; either way it must see our numbers."""
    pytest.importorskip("accelerate")
    import transformers
    from transformers.integrations.finegrained_fp8 import FP8Linear

    model = tiny_llama()
    quantkit.quantize_(model, "fp8-block", ignore=["lm_head"])
    save_quantized(model, tmp_path / "fp8", format="fp8")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "fp8")
    for name, layer in model.named_modules():
        if isinstance(layer, Fp8BlockLinear):
            module = theirs.get_submodule(name)
            if isinstance(module, FP8Linear) and module.weight.dtype == torch.float8_e4m3fn:
                assert torch.equal(bits(module.weight.cpu()), bits(layer.weight))
                assert torch.equal(module.weight_scale_inv.float().cpu(), layer.weight_scale)
            else:
                w = module.weight
                assert torch.equal(bits(w.cpu()), bits(layer.dequantize(w.dtype))), name


# -- bad input --------------------------------------------------------------------------------------
def test_load_rejects_mismatches_against_the_model(tmp_path):
    net = _quantized_net("int8-dynamic")
    save_quantized(net, tmp_path / "ckpt")
    other = make_net(device="meta")
    other.l2 = torch.nn.Linear(256, 131, device="meta", dtype=torch.bfloat16)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor l2\.weight: shape \[130, 256\] does not "
                                              r"match the model \(expected \[131, 256\]\)"):
        load_quantized(tmp_path / "ckpt", other)
    other = make_net(device="meta")
    other.norm = torch.nn.LayerNorm(300, device="meta")
    with pytest.raises(CheckpointError, match=r"tensor norm\.weight: shape \[301\] does not match the model's"):
        load_quantized(tmp_path / "ckpt", other)
    other = make_net(device="meta")
    other.emb = torch.nn.Linear(301, 50, device="meta")  # a Linear: the config's "Linear" target covers it
    with pytest.raises(CheckpointError, match=r"tensor emb\.weight: config group 'group_0' says this module is "
                                              r"quantized, but its weight is torch\.bfloat16 and it has no weight_scale"):
        load_quantized(tmp_path / "ckpt", other)


def test_save_refuses_existing_output_unless_overwrite(tmp_path):
    net = _quantized_net("fp8-block")
    save_quantized(net, tmp_path / "ckpt")
    with pytest.raises(FileExistsError, match="already exists"):
        save_quantized(net, tmp_path / "ckpt")
    save_quantized(net, tmp_path / "ckpt", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_meta_model_cannot_be_saved(tmp_path):
    net = make_net(device="meta")
    quantkit.quantize_(net, "int8-dynamic")
    with pytest.raises(ValueError, match="meta"):
        save_quantized(net, tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()


def test_skeleton_already_quantized_differently(tmp_path):
    save_quantized(_quantized_net("int8-dynamic"), tmp_path / "ckpt")
    skeleton = make_net(device="meta")
    quantkit.quantize_(skeleton, "fp8-block")
    with pytest.raises(CheckpointError, match="already fp8-block"):
        load_quantized(tmp_path / "ckpt", skeleton)
    skeleton = make_net(device="meta")
    quantkit.quantize_(skeleton, "int8-dynamic")
    assert isinstance(load_quantized(tmp_path / "ckpt", skeleton).l1, Int8DynamicLinear)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for machines without a GPU")
def test_load_onto_cuda_without_a_gpu_says_so(tmp_path):
    net = _quantized_net("int8-dynamic")
    save_quantized(net, tmp_path / "ckpt")
    with pytest.raises(ValueError, match=r"device='cuda'\): torch .* sees no CUDA GPU"):
        load_quantized(tmp_path / "ckpt", make_net(), device="cuda")
