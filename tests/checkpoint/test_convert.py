"""The streaming converter: the real all-MiniLM-L6-v2 checkpoint with every recipe, peak memory on a
multi-shard checkpoint, dequantization, and every kind of bad input through the CLI."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from quantkit.checkpoint import CheckpointError, convert_checkpoint, load_quantized
from quantkit.cli import main as cli
from quantkit.layers import Fp8BlockLinear, Int8DynamicLinear, QuantizedLinear

from .common import INT4, RECIPES, bits, minilm_path, read_config, tiny_llama, tree_digest, write_config

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.", "Quantization makes neural networks smaller and faster.",
    "A man is playing a guitar on stage.", "Stock markets fell sharply on Monday.", "How do I bake sourdough bread?",
    "The cat sat on the mat.", "Paris is the capital of France.", "Large language models need a lot of memory.",
]

# Cosine similarity of the mean-pooled sentence embeddings with the original model's, worst of the 8
# sentences. Measured (CPU, reference numerics): fp8-block 0.9972, int8-dynamic 0.9965, int8-weight-only
# 0.9995, int4 min-max asymmetric 0.9529 (0.96 with the default search rounding).
COSINE_FLOOR = {"fp8-block": 0.993, "int8-dynamic": 0.993, "int8-weight-only": 0.998, "int4": 0.94}


@pytest.fixture(scope="module")
def minilm():
    import transformers

    path = minilm_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    reference = transformers.AutoModel.from_pretrained(path).eval()
    return path, batch, _embed(reference, batch)


def _embed(model, batch):
    from quantkit.accuracy.compare import sentence_embedding

    with torch.no_grad():
        return sentence_embedding(model(**batch).last_hidden_state, batch["attention_mask"])


@pytest.mark.parametrize("name", list(COSINE_FLOOR))
def test_minilm_converts_with_every_recipe(tmp_path, minilm, name):
    path, batch, reference = minilm
    out = tmp_path / "out"
    report = convert_checkpoint(path, out, RECIPES[name], progress=False)
    assert len(report.quantized) == 37 and not report.kept and report.linear_source == "architecture BertModel"
    for extra in ("tokenizer.json", "vocab.txt", "modules.json", "1_Pooling/config.json"):
        assert (out / extra).read_bytes() == (path / extra).read_bytes()
    config = read_config(out)
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert config["hidden_size"] == 384 and config["architectures"] == ["BertModel"]

    model = load_quantized(out)
    assert sum(isinstance(m, QuantizedLinear) for m in model.modules()) == 37
    cosine = (_embed(model, batch) * reference).sum(-1)
    assert cosine.min() >= COSINE_FLOOR[name], cosine

    if name == "int4":
        # an outside reader: transformers + compressed-tensors decompress the same weights we use
        import transformers

        theirs = transformers.AutoModel.from_pretrained(out).eval()
        their_embedding = _embed(theirs, batch)
        for module_name, layer in model.named_modules():
            if isinstance(layer, QuantizedLinear):
                w = theirs.get_submodule(module_name).weight
                assert torch.equal(bits(w), bits(layer.dequantize(w.dtype))), module_name
        torch.testing.assert_close(their_embedding, _embed(model, batch), rtol=1e-4, atol=1e-5)


def test_cli_recipe_file_fp8_format_and_dequantize_back(tmp_path, minilm, capsys):
    path, batch, reference = minilm
    before = tree_digest(path)
    recipe_file = tmp_path / "recipe.json"
    recipe_file.write_text(json.dumps({"type": "fp8-block", "override": [{"match": "pooler.dense", "type": "skip"}]}))
    assert cli(["convert", str(path), str(tmp_path / "fp8"), "--recipe", str(recipe_file), "--format", "fp8",
                "--max-shard-size", "20MB", "--no-progress"]) == 0
    assert "quantized 36 Linear modules" in capsys.readouterr().out
    index = json.loads((tmp_path / "fp8" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    qc = read_config(tmp_path / "fp8")["quantization_config"]
    assert qc["quant_method"] == "fp8" and qc["modules_to_not_convert"] == ["pooler.dense"]
    fp8 = load_quantized(tmp_path / "fp8")
    assert isinstance(fp8.encoder.layer[0].output.dense, Fp8BlockLinear)
    assert type(fp8.pooler.dense) is torch.nn.Linear

    # --dequantize: back to bf16 weights, no quantization_config, every other tensor untouched
    assert cli(["convert", str(tmp_path / "fp8"), str(tmp_path / "bf16"), "--dequantize", "--no-progress"]) == 0
    config = read_config(tmp_path / "bf16")
    assert "quantization_config" not in config
    dense = load_quantized(tmp_path / "bf16")
    assert not any(isinstance(m, QuantizedLinear) for m in dense.modules())
    for module_name, layer in fp8.named_modules():
        if isinstance(layer, Fp8BlockLinear):
            w = dense.get_submodule(module_name).weight
            assert w.dtype == torch.bfloat16 and torch.equal(bits(w), bits(layer.dequantize(torch.bfloat16)))
    assert torch.equal(dense.embeddings.word_embeddings.weight, fp8.embeddings.word_embeddings.weight)
    assert not any(n.endswith("weight_scale_inv") for n in _names(tmp_path / "bf16"))
    cosine = (_embed(dense.float(), batch) * reference).sum(-1)
    assert cosine.min() > 0.99
    assert tree_digest(path) == before  # the input is only ever read


def test_requantize_and_format_change_of_a_quantized_input(tmp_path, minilm):
    path, batch, reference = minilm
    convert_checkpoint(path, tmp_path / "fp8", "fp8-block", format="fp8", progress=False)
    # no recipe: a lossless change of layout, fp8 (DeepSeek) -> compressed-tensors float-quantized
    report = convert_checkpoint(tmp_path / "fp8", tmp_path / "ct", progress=False)
    assert len(report.quantized) == 37
    a, b = load_quantized(tmp_path / "fp8"), load_quantized(tmp_path / "ct")
    for (na, la), (_, lb) in zip(a.named_modules(), b.named_modules()):
        if isinstance(la, QuantizedLinear):
            assert torch.equal(bits(la.weight), bits(lb.weight)) and torch.equal(la.weight_scale, lb.weight_scale), na
    # another recipe: requantized from the dequantized weights
    convert_checkpoint(tmp_path / "fp8", tmp_path / "int8", "int8-weight-only", progress=False)
    model = load_quantized(tmp_path / "int8")
    assert (_embed(model, batch) * reference).sum(-1).min() > 0.99


def test_ignore_and_override_without_a_recipe_apply_to_a_quantized_input(tmp_path, capsys):
    """No --recipe: every stored module keeps its recipe (a format change), except those --ignore names
    (dequantized) and those an --override matches."""
    model = tiny_llama(dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "in")
    convert_checkpoint(tmp_path / "in", tmp_path / "fp8", "fp8-block", format="fp8", progress=False)
    assert cli(["convert", str(tmp_path / "fp8"), str(tmp_path / "out"), "--ignore", "model.layers.0.mlp.down_proj",
                "--override", "*.up_proj=int8-dynamic", "--no-progress"]) == 0
    qc = read_config(tmp_path / "out")["quantization_config"]
    assert qc["ignore"] == ["lm_head", "model.layers.0.mlp.down_proj"]
    assert "matches" not in capsys.readouterr().err  # both patterns matched a module
    fp8, out = load_quantized(tmp_path / "fp8"), load_quantized(tmp_path / "out")
    kept = out.model.layers[0].mlp.down_proj
    assert type(kept) is torch.nn.Linear
    assert torch.equal(kept.weight, fp8.model.layers[0].mlp.down_proj.dequantize(torch.bfloat16))
    for layer in (0, 1):
        assert isinstance(out.model.layers[layer].mlp.up_proj, Int8DynamicLinear)
        a, b = fp8.model.layers[layer].self_attn.q_proj, out.model.layers[layer].self_attn.q_proj
        assert isinstance(b, Fp8BlockLinear) and torch.equal(bits(a.weight), bits(b.weight))
        assert torch.equal(a.weight_scale, b.weight_scale)


def test_patterns_that_match_no_linear_module_are_named_in_a_warning(tmp_path, caplog):
    """The patterns match the model's module names, so the checkpoint's name prefix (`model.` here) or a typo
    matches nothing: a warning says so. A tied lm_head, which has no tensor of its own, still counts."""
    model = tiny_llama(dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "in")
    with caplog.at_level("WARNING", logger="quantkit"):
        convert_checkpoint(tmp_path / "in", tmp_path / "out", "int8-dynamic", ignore=["lm_head", "lm-head"],
                           overrides={"model.model.layers.0.*": "skip", "*.up_proj": "int8-weight-only"},
                           progress=False)
    warned = [r.getMessage() for r in caplog.records if "matches" in r.getMessage()]
    assert len(warned) == 1 and re.search(r"no Linear module of .*in matches 'lm-head', 'model\.model\.layers\.0\.\*' "
                                          r"\(given as --ignore / --override", warned[0]), warned


def test_tied_language_model_converts_and_transformers_reads_it(tmp_path):
    import transformers

    model = tiny_llama(dtype=torch.bfloat16)
    model.save_pretrained(tmp_path / "in")
    report = convert_checkpoint(tmp_path / "in", tmp_path / "out", INT4, progress=False)
    assert len(report.quantized) == 14 and report.linear_source == "architecture LlamaForCausalLM"
    qc = read_config(tmp_path / "out")["quantization_config"]
    assert qc["ignore"] == ["lm_head"]  # tied to the embeddings: no tensor of its own, high precision
    ours = load_quantized(tmp_path / "out")
    assert ours.lm_head.weight is ours.model.embed_tokens.weight
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids = torch.randint(0, 256, (2, 11))
    with torch.no_grad():
        a, b = ours(ids).logits.float(), theirs(ids).logits.float()
    for name, layer in ours.named_modules():
        if isinstance(layer, QuantizedLinear):
            w = theirs.get_submodule(name).weight
            assert torch.equal(bits(w), bits(layer.dequantize(w.dtype))), name
    torch.testing.assert_close(a, b, rtol=0.02, atol=0.02)  # bf16 activations, different matmul order


def _names(directory):
    out = []
    for file in Path(directory).glob("*.safetensors"):
        with safe_open(str(file), "pt") as f:
            out.extend(f.keys())
    return out


# -- streaming: peak memory against the shard size ---------------------------------------------------
_CHILD = textwrap.dedent("""
    import json, sys
    import torch
    from quantkit.checkpoint import convert_checkpoint

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

    torch.set_num_threads(1)
    kw = dict(progress=False, use_architecture=False, max_shard_size=sys.argv[5], reopen_bytes=int(sys.argv[6]),
              device="cpu")
    # warm up every code path (imports, allocator) on a tiny checkpoint first
    convert_checkpoint(sys.argv[3], sys.argv[4], "int8-weight-only", **kw)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak-RSS counter (VmHWM) to the current RSS
    before = status("VmRSS")
    convert_checkpoint(sys.argv[1], sys.argv[2], "int8-weight-only", **kw)
    print(json.dumps({"before": before, "peak": status("VmHWM")}))
""")


def _write_sharded(directory, n_shards, per_shard, rows, cols, seed=0):
    directory.mkdir()
    generator = torch.Generator().manual_seed(seed)
    weight_map = {}
    for s in range(n_shards):
        shard = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        tensors = {}
        for i in range(per_shard):
            layer = s * per_shard + i
            tensors[f"layers.{layer}.proj.weight"] = torch.randn(rows, cols, generator=generator)
            tensors[f"layers.{layer}.proj.bias"] = torch.randn(rows, generator=generator)
        save_file(tensors, str(directory / shard))
        weight_map.update(dict.fromkeys(tensors, shard))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    write_config(directory, {"architectures": ["SomethingCustom"], "model_type": "custom"})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_streaming_peak_memory_stays_near_one_tensor(tmp_path):
    """Peak memory is measured inside the converting process: after a warm-up conversion, the peak-RSS
    counter is reset (/proc/self/clear_refs) and VmHWM - VmRSS over the real conversion is the
    conversion's own footprint. (ru_maxrss of a child cannot be reset and includes the ~300 MB of
    torch's import, which would swamp a test-sized checkpoint.) Input pages that safetensors maps
    count in RSS until the file is closed; the reader reopens a file after ``reopen_bytes``, so
    the footprint is about that budget plus one weight's quantization temporaries: the shard size
    and the model size do not enter it. glibc's malloc is given a fixed mmap threshold: its default
    dynamic one keeps freed mid-sized (4 MiB) temporaries in the heap, where RSS counts them although
    they are free (tensors above 32 MiB, i.e. real models' weights, are always returned at once)."""
    tensor_bytes = 1024 * 1024 * 4  # 4 MiB fp32 weights
    per_shard, n_shards = 16, 3
    shard_bytes = per_shard * tensor_bytes  # 64 MiB shards, 192 MiB in all
    reopen = 2 * tensor_bytes
    _write_sharded(tmp_path / "big", n_shards=n_shards, per_shard=per_shard, rows=1024, cols=1024)
    _write_sharded(tmp_path / "small", n_shards=2, per_shard=1, rows=64, cols=64)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "MALLOC_MMAP_THRESHOLD_": "1048576"}
    result = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "big"), str(tmp_path / "out"),
                             str(tmp_path / "small"), str(tmp_path / "small-out"), "16MB", str(reopen)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    growth = measured["peak"] - measured["before"]
    print(f"peak growth {growth / 2**20:.1f} MiB; weight {tensor_bytes / 2**20:.0f} MiB, reopen budget "
          f"{reopen / 2**20:.0f} MiB, shard {shard_bytes / 2**20:.0f} MiB, checkpoint "
          f"{n_shards * shard_bytes / 2**20:.0f} MiB")
    # measured 16.2 MiB: the budget plus two fp32 temporaries of the weight being quantized
    assert growth < reopen + 4 * tensor_bytes, growth
    assert growth < shard_bytes / 2
    out = tmp_path / "out"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 3
    qc = read_config(out)["quantization_config"]
    assert len(qc["config_groups"]["group_0"]["targets"]) == per_shard * n_shards  # name heuristic: module names
    last = f"layers.{per_shard * n_shards - 1}.proj"
    with safe_open(str(out / index["weight_map"][f"{last}.weight_packed"]), "pt") as f:
        assert f.get_tensor(f"{last}.weight_packed").shape == (1024, 256)


# -- bad input through the CLI: exit status 2, a message naming file and tensor, input untouched ------
@pytest.fixture
def small_model(tmp_path):
    """A tiny Llama checkpoint in two shards (float32)."""
    model = tiny_llama(dtype=torch.float32)
    directory = tmp_path / "in"
    model.save_pretrained(directory, max_shard_size="200KB")
    assert (directory / "model.safetensors.index.json").exists()
    return directory


def _fails(capsys, argv, pattern, input_dir, output):
    import re

    before = tree_digest(input_dir)
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert re.search(pattern, err), err
    assert tree_digest(input_dir) == before
    assert not Path(output).exists() or Path(output).name in ("exists", "a_file")  # outputs made before the call
    assert not [p for p in Path(output).parent.iterdir() if ".partial-" in p.name]
    return err


def _shards(directory):
    return sorted(Path(directory).glob("model-*.safetensors"))


def test_truncated_shard(tmp_path, small_model, capsys):
    shard = _shards(small_model)[1]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 1000])
    _fails(capsys, ["convert", str(small_model), str(tmp_path / "out"), "--recipe", "int8-dynamic"],
           rf"{shard.name}: truncated safetensors file: its header needs \d+ bytes", small_model, tmp_path / "out")


def test_corrupt_shard(tmp_path, small_model, capsys):
    shard = _shards(small_model)[0]
    data = bytearray(shard.read_bytes())
    data[8:16] = b"\x00garbage"
    shard.write_bytes(bytes(data))
    _fails(capsys, ["convert", str(small_model), str(tmp_path / "out"), "--recipe", "int8-dynamic"],
           rf"{shard.name}: corrupt safetensors header", small_model, tmp_path / "out")


def test_index_names_a_missing_shard(tmp_path, small_model, capsys):
    shard = _shards(small_model)[1]
    shard.unlink()
    _fails(capsys, ["convert", str(small_model), str(tmp_path / "out"), "--recipe", "int8-dynamic"],
           rf"model\.safetensors\.index\.json: names shard '{shard.name}' \(for tensor '[\w.]+'.*missing",
           small_model, tmp_path / "out")


def test_index_missing_an_entry(tmp_path, small_model, capsys):
    index_path = small_model / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shard = _shards(small_model)[0].name
    name = sorted(k for k, v in index["weight_map"].items() if v == shard)[-1]
    del index["weight_map"][name]
    index_path.write_text(json.dumps(index))
    _fails(capsys, ["convert", str(small_model), str(tmp_path / "out"), "--recipe", "int8-dynamic"],
           rf"index\.json: has no entry for tensor '{name}' of {shard}", small_model, tmp_path / "out")


def test_no_safetensors_at_all(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    write_config(tmp_path / "in", {"architectures": ["LlamaForCausalLM"]})
    _fails(capsys, ["convert", str(tmp_path / "in"), str(tmp_path / "out"), "--recipe", "int8-dynamic"],
           r"no \*\.safetensors file", tmp_path / "in", tmp_path / "out")


def test_fp8_weight_without_scale_in_another_shard(tmp_path, capsys):
    """DeepSeek's layout: a weight's scale may sit in another shard, found through the index; a missing
    one is reported with the weight's file and name."""
    model = tiny_llama(dtype=torch.bfloat16)
    src = tmp_path / "bf16"
    model.save_pretrained(src)
    convert_checkpoint(src, tmp_path / "fp8", "fp8-block", format="fp8", ignore=["lm_head"], progress=False,
                       max_shard_size="100KB")
    index_path = tmp_path / "fp8" / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    # move one scale into a shard of its own, away from its weight: still found
    name = "model.layers.1.self_attn.o_proj.weight_scale_inv"
    with safe_open(str(tmp_path / "fp8" / index["weight_map"][name]), "pt") as f:
        rest = {k: f.get_tensor(k) for k in f.keys()}
    moved = rest.pop(name)
    save_file(rest, str(tmp_path / "fp8" / index["weight_map"][name]), metadata={"format": "pt"})
    save_file({name: moved}, str(tmp_path / "fp8" / "extra.safetensors"), metadata={"format": "pt"})
    index["weight_map"][name] = "extra.safetensors"
    index_path.write_text(json.dumps(index))
    assert cli(["convert", str(tmp_path / "fp8"), str(tmp_path / "back"), "--dequantize", "--no-progress"]) == 0
    reloaded = load_quantized(tmp_path / "back")
    fp8 = load_quantized(tmp_path / "fp8")
    assert torch.equal(reloaded.model.layers[1].self_attn.o_proj.weight,
                       fp8.model.layers[1].self_attn.o_proj.dequantize(torch.bfloat16))
    # now lose it
    del index["weight_map"][name]
    index_path.write_text(json.dumps(index))
    (tmp_path / "fp8" / "extra.safetensors").unlink()
    weight_file = index["weight_map"]["model.layers.1.self_attn.o_proj.weight"]
    _fails(capsys, ["convert", str(tmp_path / "fp8"), str(tmp_path / "out"), "--dequantize"],
           rf"{weight_file}: tensor model\.layers\.1\.self_attn\.o_proj\.weight: fp8 weight without its scale",
           tmp_path / "fp8", tmp_path / "out")


@pytest.mark.parametrize("fmt, recipe, primary, rest", [
    ("compressed-tensors", INT4, "weight_packed", r"weight_\w+"), ("fp8", "fp8-block", "weight", "weight_scale_inv"),
    ("compressed-tensors", "fp8-block", "weight", "weight_scale")], ids=["ct-int4", "deepseek-fp8", "ct-fp8"])
def test_quantized_weight_missing_but_its_scale_present(tmp_path, capsys, fmt, recipe, primary, rest):
    """The scale (zero-points, shape) of a module whose weight is missing is reported, not copied through."""
    model = tiny_llama(dtype=torch.float32)
    model.save_pretrained(tmp_path / "in")
    convert_checkpoint(tmp_path / "in", tmp_path / "q", recipe, format=fmt, progress=False)
    file = tmp_path / "q" / "model.safetensors"
    with safe_open(str(file), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    del tensors[f"model.layers.1.mlp.up_proj.{primary}"]
    save_file(tensors, str(file), metadata={"format": "pt"})
    for argv in (["--dequantize"], ["--recipe", "int8-dynamic"]):
        _fails(capsys, ["convert", str(tmp_path / "q"), str(tmp_path / "out"), *argv],
               rf"model\.safetensors: tensor model\.layers\.1\.mlp\.up_proj\.{rest}: .*model\.layers\.1\.mlp\.up_proj "
               rf"has no weight", tmp_path / "q", tmp_path / "out")


def test_shape_mismatch_against_the_model(tmp_path, small_model, capsys):
    config = read_config(small_model)
    config["intermediate_size"] = 320
    write_config(small_model, config)
    _fails(capsys, ["convert", str(small_model), str(tmp_path / "out"), "--recipe", "int8-dynamic"],
           r"model-\d+-of-\d+\.safetensors: tensor model\.layers\.0\.mlp\.\w+_proj\.weight: shape \[\d+, \d+\] does "
           r"not match the model \(LlamaForCausalLM expects \[\d+, \d+\]\)", small_model, tmp_path / "out")


def test_dtype_mismatch(tmp_path, capsys):
    model = tiny_llama(dtype=torch.float32)
    src = tmp_path / "in"
    model.save_pretrained(src)
    convert_checkpoint(src, tmp_path / "ct", INT4, ignore=["lm_head"], progress=False)
    file = tmp_path / "ct" / "model.safetensors"
    with safe_open(str(file), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    tensors["model.layers.0.mlp.up_proj.weight_packed"] = tensors["model.layers.0.mlp.up_proj.weight_packed"].float()
    save_file(tensors, str(file), metadata={"format": "pt"})
    _fails(capsys, ["convert", str(tmp_path / "ct"), str(tmp_path / "out"), "--dequantize"],
           r"model\.safetensors: tensor model\.layers\.0\.mlp\.up_proj\.weight_packed: dtype float32 does not match "
           r"the model \(expected int32\)", tmp_path / "ct", tmp_path / "out")
    with pytest.raises(CheckpointError, match=r"weight_packed: dtype float32 does not match"):
        load_quantized(tmp_path / "ct")


@pytest.mark.parametrize("shape", [[256, 128, 1], [256], [0, 128]], ids=["three", "one", "zero"])
def test_pack_quantized_weight_shape_that_is_not_a_shape(tmp_path, capsys, shape):
    model = tiny_llama(dtype=torch.float32)
    model.save_pretrained(tmp_path / "in")
    convert_checkpoint(tmp_path / "in", tmp_path / "ct", "int8-weight-only", progress=False)
    file = tmp_path / "ct" / "model.safetensors"
    with safe_open(str(file), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    tensors["model.layers.0.mlp.up_proj.weight_shape"] = torch.tensor(shape, dtype=torch.int64)
    save_file(tensors, str(file), metadata={"format": "pt"})
    _fails(capsys, ["convert", str(tmp_path / "ct"), str(tmp_path / "out"), "--dequantize"],
           r"model\.safetensors: tensor model\.layers\.0\.mlp\.up_proj\.weight_shape: \[[\d, ]*\] is not a weight "
           r"shape \[out_features, in_features\]", tmp_path / "ct", tmp_path / "out")


def test_unknown_quant_method_and_existing_output(tmp_path, small_model, capsys):
    config = read_config(small_model)
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    write_config(small_model, config)
    _fails(capsys, ["convert", str(small_model), str(tmp_path / "out"), "--dequantize"],
           r"in/config\.json: quantization_config\.quant_method 'bitsandbytes' is not one quantkit reads",
           small_model, tmp_path / "out")
    del config["quantization_config"]
    write_config(small_model, config)
    _fails(capsys, ["convert", str(small_model), str(tmp_path / "out"), "--dequantize", "--dtype", "float16"],
           r"in is not quantized \(its config\.json has no quantization_config\): nothing to dequantize",
           small_model, tmp_path / "out")

    exists = tmp_path / "exists"
    exists.mkdir()
    (exists / "keep.txt").write_text("mine")
    _fails(capsys, ["convert", str(small_model), str(exists), "--recipe", "int8-dynamic"],
           r"output directory .*exists already exists \(pass --overwrite", small_model, exists)
    assert (exists / "keep.txt").read_text() == "mine"
    assert cli(["convert", str(small_model), str(exists), "--recipe", "int8-dynamic", "--overwrite",
                "--no-progress"]) == 0
    assert not (exists / "keep.txt").exists() and (exists / "config.json").exists()
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    for extra in ([], ["--overwrite"]):  # the same message either way: --overwrite replaces directories only
        _fails(capsys, ["convert", str(small_model), str(a_file), "--recipe", "int8-dynamic", *extra],
               r"output .*a_file exists and is not a directory", small_model, a_file)
    assert a_file.read_text() == "mine"
    _fails(capsys, ["convert", str(small_model), str(small_model), "--recipe", "int8-dynamic", "--overwrite"],
           r"overlaps the input", small_model, exists)
    _fails(capsys, ["convert", str(small_model), str(tmp_path / "x"), "--recipe", "no-such-recipe"],
           r"unknown recipe 'no-such-recipe'", small_model, tmp_path / "x")
    _fails(capsys, ["convert", str(small_model), str(tmp_path / "x")], r"not quantized: a recipe is needed",
           small_model, tmp_path / "x")


def test_bad_device_is_a_one_line_error(tmp_path, small_model, capsys):
    _fails(capsys, ["convert", str(small_model), str(tmp_path / "x"), "--recipe", "int8-dynamic", "--device", "gpu"],
           r"--device gpu: expected cpu, cuda or cuda:N", small_model, tmp_path / "x")
    if not torch.cuda.is_available():
        _fails(capsys, ["convert", str(small_model), str(tmp_path / "x"), "--recipe", "int8-dynamic", "--device",
                        "cuda"], r"--device cuda: torch .* sees no CUDA GPU", small_model, tmp_path / "x")


def test_interrupted_conversion_leaves_nothing(tmp_path, small_model, monkeypatch):
    from quantkit.checkpoint import convert as convert_module

    calls = {"n": 0}
    real = convert_module._run_unit

    def interrupted(*args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        yield from real(*args)

    monkeypatch.setattr(convert_module, "_run_unit", interrupted)
    before = tree_digest(small_model)
    with pytest.raises(KeyboardInterrupt):
        convert_checkpoint(small_model, tmp_path / "out", "int8-dynamic", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
    assert tree_digest(small_model) == before


def test_script_wrapper_runs_from_a_checkout():
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, str(root / "scripts" / "convert_checkpoint.py"), "--help"],
                            capture_output=True, text=True, timeout=120, cwd="/")
    assert result.returncode == 0, result.stderr
    assert "usage: quantkit convert" in result.stdout and "--dequantize" in result.stdout


@pytest.mark.slow
def test_cli_default_int4_recipe_on_minilm(tmp_path, minilm):
    """The command of the README, with the default int4 rounding (search: 15-20 s on 2 CPU cores)."""
    path, batch, reference = minilm
    assert cli(["convert", str(path), str(tmp_path / "int4"), "--recipe", "int4-weight-only", "--no-progress"]) == 0
    model = load_quantized(tmp_path / "int4")
    assert (_embed(model, batch) * reference).sum(-1).min() >= 0.95


def test_checkpoint_names_with_the_base_model_prefix(tmp_path):
    """A BertModel checkpoint whose tensors are named ``bert.…`` (as saved from a model with a head):
    quantization_config speaks of the model's module names, and the converter and the loader read
    it that way, so the converted checkpoint loads and converts back."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                                     num_attention_heads=2, max_position_embeddings=32)
    bert = transformers.BertModel(config).eval()
    src = tmp_path / "in"
    src.mkdir()
    save_file({f"bert.{k}": v.contiguous() for k, v in bert.state_dict().items()}, str(src / "model.safetensors"),
              metadata={"format": "pt"})
    write_config(src, {**config.to_dict(), "architectures": ["BertModel"]})
    out = tmp_path / "int8"
    convert_checkpoint(src, out, "int8-dynamic", ignore=["pooler.dense"],
                       overrides={"encoder.layer.0.output.dense": "int8-weight-only"}, progress=False)
    qc = read_config(out)["quantization_config"]
    assert qc["ignore"] == ["pooler.dense"]
    assert "encoder.layer.0.output.dense" in qc["config_groups"]["group_1"]["targets"]
    model = load_quantized(out)
    assert type(model.pooler.dense) is torch.nn.Linear
    assert sum(isinstance(m, QuantizedLinear) for m in model.modules()) == 6
    assert torch.equal(model.pooler.dense.weight, bert.pooler.dense.weight)
    convert_checkpoint(out, tmp_path / "back", dequantize=True, dtype=torch.float32, progress=False)
    dense = load_quantized(tmp_path / "back")
    layer = model.encoder.layer[0].output.dense
    assert torch.equal(dense.encoder.layer[0].output.dense.weight, layer.dequantize(torch.float32))


def test_weight_files_outside_the_checkpoint(tmp_path, caplog):
    """A sentence-transformers head's weights in a sub-folder (small beside the model) are copied as they are;
    a sub-folder copy of the model's own weights, and another format of them at the top level, are left out;
    each with a warning naming the file."""
    model = tiny_llama(dtype=torch.bfloat16)
    src = tmp_path / "in"
    model.save_pretrained(src)
    head = {"linear.weight": torch.randn(16, 128), "linear.bias": torch.randn(16)}
    (src / "2_Dense").mkdir()
    save_file(head, src / "2_Dense" / "model.safetensors")
    (src / "2_Dense" / "config.json").write_text('{"in_features": 128, "out_features": 16}')
    (src / "original").mkdir()
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
              src / "original" / "consolidated.safetensors")
    (src / "pytorch_model.bin").write_bytes(b"\0" * 1024)
    with caplog.at_level("WARNING", logger="quantkit"):
        convert_checkpoint(src, tmp_path / "out", RECIPES["int8-weight-only"], progress=False)
    out = tmp_path / "out"
    assert (out / "2_Dense" / "model.safetensors").read_bytes() == (src / "2_Dense" / "model.safetensors").read_bytes()
    assert (out / "2_Dense" / "config.json").is_file()
    assert not (out / "original").exists() and not (out / "pytorch_model.bin").exists()
    messages = [r.getMessage() for r in caplog.records]
    assert any("copying" in m and "2_Dense" in m and "unquantized" in m for m in messages), messages
    assert any("not copying" in m and "consolidated.safetensors" in m for m in messages), messages
    assert any("not copying" in m and "pytorch_model.bin" in m for m in messages), messages
