"""quantkit.accuracy.compare: numbers checked against hand computations, rendering, bad input."""
from __future__ import annotations

import csv
import io
import json
import math
import re

import pytest
import torch
from torch import nn

import quantkit
from quantkit.accuracy import compare
from quantkit.recipes import Int4WeightOnly, Int8WeightOnly


def _net():
    return nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 16))


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_layer_and_output_numbers_by_hand():
    net = _net()
    batches = [torch.randn(5, 64), torch.randn(2, 3, 64)]
    report = compare(net, ["int8-weight-only", "fp8-block"], inputs=batches)
    assert [r.label for r in report.results] == ["int8-weight-only", "fp8-block"]
    assert report.kind == "module" and report.inputs == 2 and report.rows == 11

    # by hand, for int8-weight-only: quantize the same layers, run the math in float64
    q0 = quantkit.quantize_linear(net[0], Int8WeightOnly()).dequantize().double()
    q2 = quantkit.quantize_linear(net[2], Int8WeightOnly()).dequantize().double()
    w0, b0, w2, b2 = (t.detach().double() for t in (net[0].weight, net[0].bias, net[2].weight, net[2].bias))
    x = torch.cat([b.reshape(-1, 64) for b in batches]).double()
    h = x @ w0.t() + b0
    y = torch.relu(h) @ w2.t() + b2
    hq = x @ q0.t() + b0
    y_local = torch.relu(h) @ q2.t() + b2
    yq = torch.relu(hq) @ q2.t() + b2

    result = report.results[0]
    layers = {layer.name: layer for layer in result.layers}
    assert list(layers) == ["0", "2"]
    assert layers["0"].shape == (48, 64) and layers["0"].status == "quantized"
    assert layers["0"].format == "int8-weight-only" and layers["0"].calls == 2
    assert layers["0"].rel_error == pytest.approx(_rel(hq, h), rel=1e-4)
    assert layers["0"].rel_error_in_model == pytest.approx(_rel(hq, h), rel=1e-4)  # nothing before it
    assert layers["2"].rel_error == pytest.approx(_rel(y_local, y), rel=1e-4)
    assert layers["2"].rel_error_in_model == pytest.approx(_rel(yq, y), rel=1e-4)
    for layer in result.layers:
        assert layer.sqnr_db == pytest.approx(-20 * math.log10(layer.rel_error), rel=1e-9)
        assert layer.sqnr_db_in_model == pytest.approx(-20 * math.log10(layer.rel_error_in_model), rel=1e-9)
    assert layers["2"].rel_error_in_model > layers["2"].rel_error  # the error of layer 0 adds up

    out = result.output
    cos = torch.nn.functional.cosine_similarity(yq, y, dim=-1)
    assert out.rows == 11
    assert out.cosine_mean == pytest.approx(cos.mean().item(), abs=1e-7)
    assert out.cosine_min == pytest.approx(cos.min().item(), abs=1e-7)
    assert out.max_abs_diff == pytest.approx((yq - y).abs().max().item(), rel=1e-3)
    assert out.rel_error == pytest.approx(_rel(yq, y), rel=1e-4)
    assert out.sqnr_db == pytest.approx(-20 * math.log10(_rel(yq, y)), rel=1e-4)
    assert out.perplexity is None and out.top1_agreement is None
    assert result.quantized_layers == 2 and result.linear_layers == 2
    assert result.bytes_after < result.bytes_before
    # fp8 moves the outputs more than int8 weight-only
    assert report.results[1].output.rel_error > out.rel_error
    # the original is untouched
    assert isinstance(net[0], nn.Linear) and isinstance(net[2], nn.Linear)


def test_kept_layers_and_rendering(tmp_path):
    net = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 8))
    with pytest.warns(UserWarning, match="not a multiple of group_size"):
        report = compare(net, [Int4WeightOnly(), "int8-dynamic"], inputs=torch.randn(4, 256))
    kept = report.results[0].layers[1]
    assert kept.status.startswith("skipped: int4-weight-only cannot take it") and kept.format == "float"
    assert kept.rel_error == 0.0 and kept.sqnr_db == math.inf
    assert report.results[0].quantized_layers == 1
    assert report.results[0].worst_layer.name == "0"

    data = json.loads(report.to_json())
    assert data["results"][0]["layers"][1]["sqnr_db"] is None  # JSON has no infinity
    assert data["results"][0]["label"] == str(Int4WeightOnly())
    assert data["results"][0]["recipe"]["rounding"] == "search"
    assert data["results"][1]["output"]["rows"] == 4

    rows = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert len(rows) == 2 * (1 + 2)
    assert rows[0]["layer"] == "(model output)"
    assert float(rows[0]["cosine_mean"]) == report.results[0].output.cosine_mean
    assert rows[2]["layer"] == "2" and rows[2]["sqnr_db"] == "inf"

    text = report.table()
    assert "int8-dynamic" in text and "kept (skipped)" in text and "cos mean" in text
    assert "1/2" in text  # layers quantized by the int4 recipe
    png = report.plot(tmp_path / "errors.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="ending in .png"):
        report.plot(tmp_path / "errors.jpg")


def test_bad_input_gives_clear_errors(tmp_path):
    net = _net()
    with pytest.raises(ValueError, match=r"the sample inputs do not fit the model \(RuntimeError: .*64.*"):
        compare(net, "int8-weight-only", inputs=torch.randn(3, 60))
    with pytest.raises(ValueError, match="compare needs sample inputs for an nn.Module"):
        compare(net, "int8-weight-only")
    with pytest.raises(ValueError, match="inputs is an empty list"):
        compare(net, "int8-weight-only", inputs=[])
    with pytest.raises(ValueError, match=r"recipe int4-weight-only quantizes nothing in this model: all 2 linear "
                                         r"layers were kept \(int4-weight-only cannot take it: in_features="):
        with pytest.warns(UserWarning):
            compare(net, "int4-weight-only", inputs=torch.randn(3, 64))
    with pytest.raises(ValueError, match="quantizes nothing.*ignored by pattern"):
        compare(net, "int8-dynamic", inputs=torch.randn(3, 64), ignore=["0", "2"])
    with pytest.raises(ValueError, match="has no nn.Linear layers"):
        compare(nn.Sequential(nn.ReLU()), "int8-dynamic", inputs=torch.randn(3, 64))
    with pytest.raises(ValueError, match=r"needs calibration inputs.*compare: pass calibration="):
        compare(nn.Sequential(nn.Linear(128, 8)), Int4WeightOnly(rounding="gptq"), inputs=torch.randn(2, 128))
    with pytest.raises(quantkit.RecipeError, match="unknown recipe 'int9'"):
        compare(net, "int9", inputs=torch.randn(3, 64))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(ValueError, match="text file .*empty.txt is empty"):
        compare(tmp_path, "int8-dynamic", text=empty)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        compare(tmp_path, "int8-dynamic", text=tmp_path / "missing.txt")
    text = tmp_path / "t.txt"
    text.write_text("hello\n")
    with pytest.raises(FileNotFoundError, match="not a Hugging Face model directory"):
        compare(tmp_path, "int8-dynamic", text=text)
    with pytest.raises(ValueError, match="needs text="):
        compare(tmp_path, "int8-dynamic")


def test_calibrated_recipe_through_compare():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 32))
    for layer in (net[0], net[2]):
        nn.init.normal_(layer.weight, std=0.05)
    basis = torch.randn(16, 128)
    make = lambda m: torch.randn(m, 16) @ basis + 0.2 * torch.randn(m, 128)  # noqa: E731
    report = compare(net, [Int4WeightOnly(rounding="search"), Int4WeightOnly(rounding="gptq")],
                     inputs=[make(64), make(64)], calibration=[make(128) for _ in range(4)])
    search, gptq = report.results
    assert gptq.output.rel_error < 0.7 * search.output.rel_error


# --------------------------------------------------------------------------- Hugging Face directories
TEXT = ("Quantization stores each weight in fewer bits. The model then reads less memory for every token. "
        "A good recipe keeps the outputs close to the original ones. ") * 6


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    """A random 2-layer Llama with a word-level tokenizer over TEXT's words, saved like a hub model."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    path = tmp_path_factory.mktemp("tiny-llama")
    words = sorted(set(re.findall(r"\w+|[^\w\s]", TEXT)))
    vocab = {"[UNK]": 0, "<s>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>").save_pretrained(path)
    config = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path


def test_causal_lm_perplexity_and_top1_by_hand(tiny_llama_dir, tmp_path):
    import transformers

    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    report = compare(tiny_llama_dir, ["int8-weight-only"], text=text, max_length=48, batch_size=2, device="cpu")
    assert report.kind == "causal-lm"

    # by hand: the same windows of 48 tokens through the original and a quantized copy
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_llama_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama_dir).float().eval()
    ids = tokenizer(TEXT)["input_ids"]
    windows = [ids[i:i + 48] for i in range(0, len(ids), 48)]
    quantized = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama_dir).float().eval()
    quantkit.quantize_(quantized, "int8-weight-only")
    nll_ref = nll_q = 0.0
    tokens = agree = positions = 0
    with torch.no_grad():
        for w in windows:
            x = torch.tensor([w])
            ref, q = model(x).logits, quantized(x).logits
            nll_ref -= torch.log_softmax(ref[0, :-1], -1).gather(-1, x[0, 1:, None]).sum().item()
            nll_q -= torch.log_softmax(q[0, :-1], -1).gather(-1, x[0, 1:, None]).sum().item()
            tokens += len(w) - 1
            agree += (ref.argmax(-1) == q.argmax(-1)).sum().item()
            positions += len(w)
    assert report.rows == positions == len(ids)
    assert report.original_perplexity == pytest.approx(math.exp(nll_ref / tokens), rel=1e-5)
    result = report.results[0]
    assert result.output.perplexity == pytest.approx(math.exp(nll_q / tokens), rel=1e-5)
    assert result.output.top1_agreement == pytest.approx(agree / positions)
    assert 0.5 < result.output.top1_agreement <= 1.0
    assert result.linear_layers == 15  # 7 per decoder layer + lm_head
    assert "ppl" in report.table() and "top-1" in report.table()


def test_cli_compare_on_minilm_matches_direct_embeddings(tmp_path, capsys):
    from quantkit.cli import main

    from .minilm import embed, load_minilm, minilm_dir, tokenize
    from .sentences import EVAL

    sentences = EVAL[:10]
    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(sentences) + "\n\n")
    out_json, out_csv, out_png = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "r.png"
    status = main(["compare", str(minilm_dir()), "--text", str(text), "--recipe", "int8-weight-only",
                   "--recipe", "int8-dynamic", "--batch-size", "4", "--json", str(out_json), "--csv", str(out_csv),
                   "--plot", str(out_png), "--no-progress"])
    assert status == 0
    shown = capsys.readouterr().out
    assert "encoder.layer.5.output.dense" in shown and "10 sentences in 3 batches" in shown
    data = json.loads(out_json.read_text())
    assert data["kind"] == "embedding" and [r["label"] for r in data["results"]] == ["int8-weight-only", "int8-dynamic"]
    assert len(list(csv.DictReader(out_csv.open()))) == 2 * (1 + 37)
    assert out_png.read_bytes()[:4] == b"\x89PNG"

    model, tokenizer = load_minilm()
    batch = tokenize(tokenizer, sentences)
    reference = embed(model, batch)
    quantkit.quantize_(model, "int8-weight-only")
    cos = (embed(model, batch) * reference).sum(-1)
    got = data["results"][0]["output"]
    assert got["cosine_mean"] == pytest.approx(cos.mean().item(), abs=2e-6)
    assert got["cosine_min"] == pytest.approx(cos.min().item(), abs=2e-6)


def test_cli_errors(tmp_path, capsys):
    from quantkit.cli import main

    from .minilm import minilm_dir

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["compare", str(minilm_dir()), "--text", str(empty), "--no-progress"]) == 2
    assert "is empty" in capsys.readouterr().err
    text = tmp_path / "t.txt"
    text.write_text("A sentence.\n")
    assert main(["compare", str(tmp_path / "nope"), "--text", str(text)]) == 2
    assert "no such model directory" in capsys.readouterr().err
    assert main(["compare", str(minilm_dir()), "--text", str(text), "--recipe", "int4-weightonly"]) == 2
    assert "did you mean 'int4-weight-only'" in capsys.readouterr().err
    assert main(["compare", str(minilm_dir()), "--text", str(text), "--plot", str(tmp_path / "x.svg")]) == 2
    assert "ending in .png" in capsys.readouterr().err
    assert main(["compare", str(minilm_dir()), "--text", str(text), "--json", str(tmp_path / "no" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_output_and_device_errors_come_before_the_model_loads(tmp_path, monkeypatch, capsys):
    import importlib
    import sys

    from quantkit.cli import main

    compare_module = importlib.import_module("quantkit.accuracy.compare")

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(compare_module, "load_hf_model", no_load)
    text = tmp_path / "t.txt"
    text.write_text("A sentence.\n")
    model = str(tmp_path)  # never read: every call below fails first
    assert main(["compare", model, "--text", str(text), "--device", "gpu"]) == 2
    assert "--device gpu: expected cpu, cuda or cuda:N" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["compare", model, "--text", str(text), "--device", "cuda"]) == 2
        assert "--device cuda: torch" in capsys.readouterr().err
    assert main(["compare", model, "--text", str(text), "--json", str(tmp_path)]) == 2
    assert f"--json: {tmp_path} is a directory" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["compare", model, "--text", str(text), "--plot", str(tmp_path / "r.png")]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_layer_called_twice_per_forward_pairs_each_call():
    # one Linear applied twice in a forward (weight sharing): the layer's local run on the original's
    # input must not be taken for a call of the quantized model
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(64, 64)

        def forward(self, x):
            return self.a(torch.relu(self.a(x)))

    net = Twice()
    x = torch.randn(8, 64)
    layer = compare(net, "int8-weight-only", inputs=x).results[0].layers[0]
    q = quantkit.quantize_linear(net.a, Int8WeightOnly()).dequantize().double()
    w, b, xd = net.a.weight.detach().double(), net.a.bias.detach().double(), x.double()
    h = xd @ w.t() + b
    y = torch.relu(h) @ w.t() + b
    hq = xd @ q.t() + b
    y_local = torch.relu(h) @ q.t() + b
    yq = torch.relu(hq) @ q.t() + b
    signal = h.square().sum() + y.square().sum()
    assert layer.calls == 2
    local = ((hq - h).square().sum() + (y_local - y).square().sum()) / signal
    in_model = ((hq - h).square().sum() + (yq - y).square().sum()) / signal
    assert layer.rel_error == pytest.approx(local.sqrt().item(), rel=1e-4)
    assert layer.rel_error_in_model == pytest.approx(in_model.sqrt().item(), rel=1e-4)


def test_a_layer_called_with_its_input_as_a_keyword():
    class Keyword(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 32)

        def forward(self, x):
            return self.fc(input=x)

    net = Keyword()
    x = torch.randn(8, 64)
    layer = compare(net, "int8-weight-only", inputs=x).results[0].layers[0]
    q = quantkit.quantize_linear(net.fc, Int8WeightOnly()).dequantize().double()
    w, b = net.fc.weight.detach().double(), net.fc.bias.detach().double()
    y, yq = x.double() @ w.t() + b, x.double() @ q.t() + b
    assert layer.calls == 1
    assert layer.rel_error == pytest.approx(((yq - y).norm() / y.norm()).item(), rel=1e-4)


def test_compare_leaves_the_model_as_it_was():
    net = nn.Sequential(nn.Linear(128, 128), nn.Dropout(0.1), nn.BatchNorm1d(128), nn.Linear(128, 16))
    net.train()
    net[1].eval()  # a model in train mode with one submodule kept in eval mode
    modes = [m.training for m in net.modules()]
    state = {k: v.clone() for k, v in net.state_dict().items()}
    compare(net, ["int8-weight-only", Int4WeightOnly(rounding="gptq")], inputs=torch.randn(4, 128),
            calibration=[torch.randn(8, 128)])
    assert [m.training for m in net.modules()] == modes
    assert all(torch.equal(state[k], v) for k, v in net.state_dict().items())
    assert all(isinstance(net[i], nn.Linear) for i in (0, 3))


def test_calibration_generator_serves_every_recipe():
    net = nn.Sequential(nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 32))
    data = [torch.randn(16, 128) for _ in range(3)]
    x = torch.randn(4, 128)
    recipes = [Int4WeightOnly(rounding="gptq"), Int4WeightOnly(rounding="gptq", group_size=64)]
    from_list = compare(net, recipes, inputs=x, calibration=data)
    from_generator = compare(net, recipes, inputs=x, calibration=(item for item in data))
    for a, b in zip(from_list.results, from_generator.results):
        assert a.output.rel_error == b.output.rel_error


def test_rows_equal_in_both_models_have_cosine_one():
    # rows that are all zero in both models' outputs agree: cosine 1 (not 0, as 0/0 gave)
    net = nn.Sequential(nn.Linear(64, 64, bias=False), nn.ReLU())
    x = torch.randn(6, 64)
    x[3:] = 0.0
    report = compare(net, "int8-weight-only", inputs=x)
    out = report.results[0].output
    q = quantkit.quantize_linear(net[0], Int8WeightOnly()).dequantize().double()
    y, yq = torch.relu(x.double() @ net[0].weight.detach().double().t()), torch.relu(x.double() @ q.t())
    cos = torch.cat([torch.nn.functional.cosine_similarity(yq[:3], y[:3], dim=-1), torch.ones(3, dtype=torch.float64)])
    assert out.rows == 6
    assert out.cosine_mean == pytest.approx(cos.mean().item(), abs=1e-7)
    assert out.cosine_min == pytest.approx(cos.min().item(), abs=1e-7) and out.cosine_min > 0.99
    # a model whose outputs are all zero in both: identical, cosine 1
    with torch.no_grad():
        net[0].weight.zero_()
    out = compare(net, "int8-weight-only", inputs=x).results[0].output
    assert (out.cosine_mean, out.cosine_min, out.max_abs_diff, out.rel_error) == (1.0, 1.0, 0.0, 0.0)


def test_nan_in_the_quantized_output_shows_in_max_abs_diff():
    class NanOnceQuantized(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 8)

        def forward(self, x):
            y = self.fc(x)
            if not isinstance(self.fc, nn.Linear):
                y = y.clone()
                y[0, 0] = math.nan
            return y

    out = compare(NanOnceQuantized(), "int8-weight-only", inputs=torch.randn(4, 64)).results[0].output
    assert math.isnan(out.max_abs_diff) and math.isnan(out.rel_error) and math.isnan(out.cosine_min)


def test_embedding_max_length_is_capped_by_the_model(tmp_path):
    # --max-length beyond the encoder's 512 positions: sentences are cut at 512 tokens, as a causal LM's
    # windows are, instead of the run failing with "the sample inputs do not fit the model"
    from .minilm import minilm_dir

    text = tmp_path / "long.txt"
    text.write_text("word " * 700 + "\nA short sentence.\n")
    capped = compare(minilm_dir(), "int8-weight-only", text=text, max_length=4096, device="cpu")
    at_limit = compare(minilm_dir(), "int8-weight-only", text=text, max_length=512, device="cpu")
    assert capped.rows == 2
    assert capped.results[0].output.cosine_min == at_limit.results[0].output.cosine_min


def test_calibration_file_is_checked_before_the_model_loads(tmp_path, monkeypatch):
    import importlib

    compare_module = importlib.import_module("quantkit.accuracy.compare")

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the calibration file was checked")

    monkeypatch.setattr(compare_module, "load_hf_model", no_load)
    text = tmp_path / "t.txt"
    text.write_text("A sentence.\n")
    with pytest.raises(FileNotFoundError, match="missing.txt does not exist"):
        compare(tmp_path, Int4WeightOnly(rounding="gptq"), text=text, calibration=tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty.txt is empty"):
        compare(tmp_path, Int4WeightOnly(rounding="gptq"), text=text, calibration=empty)


def test_a_layer_that_never_ran_has_no_error_to_report():
    class WithUnused(nn.Module):
        def __init__(self):
            super().__init__()
            self.unused = nn.Linear(64, 64)
            self.fc = nn.Linear(64, 8)

        def forward(self, x):
            return self.fc(x)

    report = compare(WithUnused(), "int8-weight-only", inputs=torch.randn(4, 64))
    result = report.results[0]
    unused, fc = result.layers
    assert unused.name == "unused" and unused.calls == 0 and fc.calls == 1
    # not measured: NaN (null in JSON), not a perfect 0 error / infinite SQNR
    assert all(math.isnan(v) for v in (unused.sqnr_db, unused.rel_error, unused.sqnr_db_in_model,
                                       unused.rel_error_in_model))
    assert result.worst_layer is fc
    assert json.loads(report.to_json())["results"][0]["layers"][0]["rel_error"] is None
    row = next(line for line in report.table().splitlines() if line.startswith("unused"))
    assert "not run" in row and "inf" not in row


def test_lm_statistics_widen_the_logits_a_slice_at_a_time(monkeypatch):
    """An LM's logits are compared in their own dtype, without a whole float copy: the rows handed to the
    statistics are a view of the model's output, and the NLL's log-softmax runs over slices of positions
    with the same sum as over the whole tensor."""
    import importlib

    C = importlib.import_module("quantkit.accuracy.compare")  # (the package exports the function compare)

    logits = torch.randn(3, 11, 50, dtype=torch.bfloat16)
    rows = C._output_tensor({"logits": logits}, C.CAUSAL_LM, {})
    assert rows.dtype == torch.bfloat16 and rows.data_ptr() == logits.data_ptr() and rows.shape == (33, 50)
    ids = torch.randint(0, 50, (3, 11))
    whole = -torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).sum().item()
    assert C._nll(logits, ids) == pytest.approx(whole, rel=1e-6)
    monkeypatch.setattr(C, "_SLICE_VALUES", 120)  # slices of 2 positions, and a last one of 1
    assert C._nll(logits, ids) == pytest.approx(whole, rel=1e-6)
