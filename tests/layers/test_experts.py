"""Fused MoE experts (transformers 5's [E, 2I, H] / [E, H, I] parameters) split into one linear module per expert
projection and quantized: the forward against transformers' own, the report, patterns, GPTQ, meta models."""
import warnings

import pytest
import torch
from torch import nn

import quantkit
from quantkit.checkpoint.model import params_on_meta
from quantkit.layers import QuantizedLinear
from quantkit.layers.experts import DEFAULT_NAMES, Experts, split, split_fused_experts
from tests.helpers import rel_error

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("release_gpu_memory")


SMALL = dict(vocab_size=128, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
# (config class, model class, config fields, the names its checkpoints give an expert's gate / up / down)
MODELS = {
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(intermediate_size=256, num_local_experts=4, num_experts_per_tok=2), ("w1", "w3", "w2")),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(intermediate_size=256, moe_intermediate_size=256, num_experts=6, num_experts_per_tok=2,
                       head_dim=32), DEFAULT_NAMES),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(intermediate_size=256, moe_intermediate_size=128, shared_expert_intermediate_size=256,
                       num_experts=4, num_experts_per_tok=2), DEFAULT_NAMES),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM",
              dict(intermediate_size=256, num_experts=4, num_experts_per_tok=2), DEFAULT_NAMES),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    dict(intermediate_size=256, moe_intermediate_size=128, n_routed_experts=8, num_experts_per_tok=2,
                         n_shared_experts=1, n_group=2, topk_group=1, first_k_dense_replace=1, q_lora_rank=None,
                         kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=32), DEFAULT_NAMES),
}
INT4 = {"type": "int4-weight-only", "rounding": "minmax"}  # "search" costs seconds a layer on the CPU
RECIPES = ["fp8-block", "int8-dynamic", "int8-weight-only", INT4]


def tiny_moe(kind: str, dtype=torch.float32, seed: int = 0):
    config_cls, model_cls, fields, _ = MODELS[kind]
    config = getattr(transformers, config_cls)(**SMALL, **fields)
    torch.manual_seed(seed)
    return getattr(transformers, model_cls)._from_config(config, dtype=dtype).eval()


def fused_modules(model):
    return {name: m for name, m in model.named_modules() if hasattr(m, "gate_up_proj") and not isinstance(m, Experts)}


def routing(experts: int, tokens: int, k: int = 2, dtype=torch.float32):
    """Top-k routing that leaves the last expert without tokens (the loop must skip it)."""
    index = torch.stack([torch.randperm(experts - 1)[:k] for _ in range(tokens)])
    weights = torch.softmax(torch.randn(tokens, k), dim=-1).to(dtype)
    return index, weights


@pytest.mark.parametrize("kind", list(MODELS))
def test_split_forward_is_transformers_forward(kind):
    """Split but not quantized, the module computes what transformers' fused module computes, views not copies."""
    model = tiny_moe(kind)
    for name, fused in fused_modules(model).items():
        experts = split(fused, MODELS[kind][3])
        e, two_i, h = fused.gate_up_proj.shape
        storage = fused.gate_up_proj.untyped_storage().data_ptr()
        assert experts.expert(1).gate.weight.untyped_storage().data_ptr() == storage  # a view, nothing copied
        x = torch.randn(11, h)
        index, weights = routing(e, 11)
        with torch.no_grad():
            ours, theirs = experts(x, index, weights), fused(x, index, weights)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        assert ours.abs().sum() > 0


@pytest.mark.parametrize("kind", list(MODELS))
def test_checkpoint_names_come_from_transformers(kind):
    model = tiny_moe(kind)
    replaced, kept = split_fused_experts(model)
    assert replaced and not kept
    for experts in (new for _, new in replaced.values()):
        assert experts.expert(0).names == MODELS[kind][3]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r if isinstance(r, str) else "int4")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantized_experts_compute_with_their_dequantized_weights(recipe, dtype):
    """Each quantized expert multiplies by its dequantized weight: the fused module given those weights agrees."""
    model = tiny_moe("qwen3_moe", dtype=dtype)
    fused = dict(fused_modules(model))
    report = quantkit.quantize_(model, recipe)
    assert not report.skipped
    for name, original in fused.items():
        experts = model.get_submodule(name)
        assert isinstance(experts, Experts)
        layers = [experts.expert(e) for e in range(experts.num_experts)]
        assert all(isinstance(m, QuantizedLinear) for ex in layers for m in (ex.gate, ex.up, ex.down))
        with torch.no_grad():
            original.gate_up_proj.copy_(torch.stack([torch.cat([ex.gate.dequantize(dtype), ex.up.dequantize(dtype)])
                                                     for ex in layers]))
            original.down_proj.copy_(torch.stack([ex.down.dequantize(dtype) for ex in layers]))
            x = torch.randn(9, original.gate_up_proj.shape[-1], dtype=dtype)
            index, weights = routing(experts.num_experts, 9, dtype=dtype)
            ours, theirs = experts(x, index, weights), original(x, index, weights)
        # The weight-only formats multiply by the same dense weights: float32 measured 4e-8-5e-7 (summation order),
        # bf16 0.0052-0.0053 (bf16 rounding of the projections' outputs). fp8-block and int8-dynamic also quantize x:
        # 0.042-0.045 and 0.015-0.016 (CPU, two runs); the lower bounds show x really was quantized.
        key = recipe if isinstance(recipe, str) else "int4"
        low, high = {"fp8-block": (0.02, 0.06), "int8-dynamic": (0.008, 0.022)}.get(
            key, (0.0, 2e-6 if dtype == torch.float32 else 0.008))
        assert low <= rel_error(ours, theirs) < high, name


def test_report_patterns_and_restore():
    model = tiny_moe("mixtral")
    fused = fused_modules(model)
    report = quantkit.quantize_(model, "int8-weight-only", ignore=["*.experts.*"])
    for name, module in fused.items():  # every expert ignored: the fused module is back, untouched
        assert model.get_submodule(name) is module
    assert len(report.quantized) == 9  # attention and lm_head
    text = str(report)
    assert "model.layers.0.mlp.experts.*.w1 (4 experts)" in text and "ignored by pattern '*.experts.*'" in text

    model = tiny_moe("mixtral")
    report = quantkit.quantize_(model, "int8-weight-only",
                                overrides={"model.layers.1.mlp.experts.0.*": "skip",
                                           "*.experts.*.w2": {"type": "int8-dynamic"}})
    experts = model.get_submodule("model.layers.1.mlp.experts")
    kept = experts.expert(0).gate
    assert type(kept) is nn.Linear
    # kept experts hold their own weights, so the fused parameters can be freed
    assert kept.weight.untyped_storage().size() == kept.weight.numel() * kept.weight.element_size()
    assert type(experts.expert(0).down).__name__ == "Linear"
    assert type(experts.expert(1).down).__name__ == "Int8DynamicLinear"
    assert type(experts.expert(1).gate).__name__ == "Int8WeightOnlyLinear"
    by_name = {m.name: m for m in report.modules}
    assert by_name["model.layers.0.mlp.experts.3.w2"].recipe == "int8-dynamic"
    assert by_name["model.layers.1.mlp.experts.0.w1"].status == "skipped"
    assert by_name["model.layers.1.mlp.experts.0.w1"].experts == "model.layers.1.mlp.experts"
    assert report.bytes_after < 0.4 * report.bytes_before  # 1 of 8 experts kept in float32


def test_one_warning_per_experts_module_and_reason():
    """int4 at group 256 cannot take the 128-wide inputs: one warning per block, not one per expert."""
    model = tiny_moe("qwen3_moe")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = quantkit.quantize_(model, {"type": "int4-weight-only", "group_size": 256, "rounding": "minmax"})
    texts = [str(w.message) for w in caught if "expert projection" in str(w.message)]
    assert len(texts) == 2, texts  # two blocks; the 6 gate and 6 up projections of each have K = 128
    assert "kept 12 expert projections of model.layers.0.mlp.experts (0.gate_proj, 0.up_proj, 1.gate_proj, ...)" \
        in texts[0]
    assert {m.name.rpartition(".")[2] for m in report.quantized if m.experts} == {"down_proj"}  # K = 256


def test_unsupported_fused_layout_is_kept_with_a_warning():
    """gpt-oss's experts (transposed, interleaved gate/up, biases, their own gating) are not split."""
    config = transformers.GptOssConfig(**SMALL, intermediate_size=128, num_local_experts=4, num_experts_per_tok=2,
                                       head_dim=32, layer_types=["full_attention"] * 2)
    model = transformers.GptOssForCausalLM._from_config(config, dtype=torch.float32).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = quantkit.quantize_(model, "int8-weight-only")
    texts = [str(w.message) for w in caught if "fused experts" in str(w.message)]
    assert len(texts) == 2 and "model.layers.0.mlp.experts" in texts[0] and "is_concatenated=False" in texts[0]
    entry = {m.name: m for m in report.modules}["model.layers.0.mlp.experts"]
    assert entry.status == "skipped" and entry.bytes_before == entry.bytes_after > 0
    assert type(model.model.layers[0].mlp.experts).__name__ == "GptOssExperts"


def test_gptq_calibrates_each_expert_it_reaches():
    """The calibration hooks sit on each expert's projections; experts no token reached fall back to search."""
    model = tiny_moe("qwen3_moe")
    calibration = [torch.randint(0, 128, (1, 3))]  # 3 tokens, top-2 of 6 experts: some experts see nothing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = quantkit.quantize_(model, {"type": "int4-weight-only", "rounding": "gptq"}, calibration=calibration)
    fallback = [m for m in report.quantized if "no calibration input reached it" in m.reason]
    calibrated = [m for m in report.quantized if m.experts and not m.reason]
    assert fallback and calibrated
    assert all(m.experts for m in fallback)
    assert any("never reached" in str(w.message) for w in caught)


def test_meta_model_quantizes_and_loads_per_expert_state():
    model = tiny_moe("mixtral", dtype=torch.bfloat16)
    quantkit.quantize_(model, "int8-weight-only")
    state = model.state_dict()
    with params_on_meta():  # buffers (rotary inv_freq) stay real, as load_quantized builds models
        skeleton = transformers.MixtralForCausalLM._from_config(model.config, dtype=torch.bfloat16).eval()
    quantkit.quantize_(skeleton, "int8-weight-only")
    assert all(t.is_meta for k, t in skeleton.state_dict().items() if "experts" in k)
    assert set(skeleton.state_dict()) == set(state)
    skeleton.load_state_dict(state, assign=True)
    ids = torch.randint(0, 128, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(skeleton(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_compare_lists_each_expert_and_leaves_the_model_as_it_was():
    model = tiny_moe("mixtral")
    fused = fused_modules(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    report = quantkit.compare(model, ["int8-weight-only"], inputs=[torch.randint(0, 128, (1, 12))])
    rows = {layer.name: layer for layer in report.results[0].layers}
    ran = [r for n, r in rows.items() if ".experts." in n and r.calls]
    assert ran and all(r.format == "int8-weight-only" and 0.003 < r.rel_error < 0.012 for r in ran)
    assert all(r.rel_error_in_model != r.rel_error_in_model for n, r in rows.items() if ".experts." in n)  # NaN
    assert rows["model.layers.1.self_attn.o_proj"].rel_error_in_model > 0
    assert sum(1 for n in rows if ".experts." in n) == 2 * 4 * 3
    for name, module in fused.items():
        assert model.get_submodule(name) is module
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items()) and state.keys() == model.state_dict().keys()


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["fp8-block", "int8-dynamic", "int8-weight-only", "int4-weight-only"])
def test_experts_run_the_kernels_gpu(recipe):
    """A Qwen3-30B-A3B-sized block (2048 -> 768 -> 2048) with 16 experts: quantized on the GPU, run there through the
    grouped Triton kernels (each expert gets its own rows, from none to all tokens), against the same codes through
    the CPU reference loop."""
    from quantkit.ops.dispatch import backend_report

    config = transformers.Qwen3MoeConfig(hidden_size=2048, moe_intermediate_size=768, num_experts=16,
                                         num_experts_per_tok=4)
    torch.manual_seed(0)
    fused = transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeExperts(config)
    nn.init.normal_(fused.gate_up_proj, std=0.02)
    nn.init.normal_(fused.down_proj, std=0.02)
    holder = nn.Sequential()
    holder.add_module("experts", fused.to("cuda", torch.bfloat16))
    report = quantkit.quantize_(holder, recipe)
    assert len(report.quantized) == 48
    experts = holder.experts
    index = torch.stack([torch.randperm(15)[:4] for _ in range(300)])  # expert 15: no token
    index[:7] = torch.tensor([0, 1, 2, 3])  # expert 0..3 get more tokens than the others
    weights = torch.softmax(torch.randn(300, 4), dim=-1)
    x = torch.randn(300, 2048)
    with torch.no_grad():
        y = experts(x.cuda().bfloat16(), index.cuda(), weights.cuda().bfloat16()).float().cpu()
        assert experts._stack_state is not None and experts._stack_state[0][0] == recipe  # the grouped kernels
        ref = experts.cpu()(x.bfloat16(), index, weights.bfloat16()).float()
    assert any(fn == "moe.experts" and dev.startswith("cuda") and backend == "triton"
               for (fn, dev), (backend, _) in backend_report().items())
    assert rel_error(y, ref) < 1e-2


def quantized_and_dequantized_block():
    """A tiny Qwen3-MoE's first experts block quantized (int8 weight-only), and its fused module given the
    dequantized weights."""
    model = tiny_moe("qwen3_moe")
    name, original = next(iter(fused_modules(model).items()))
    quantkit.quantize_(model, "int8-weight-only")
    experts = model.get_submodule(name)
    with torch.no_grad():
        original.gate_up_proj.copy_(torch.stack([torch.cat([experts.expert(e).gate.dequantize(),
                                                            experts.expert(e).up.dequantize()])
                                                 for e in range(experts.num_experts)]))
        original.down_proj.copy_(torch.stack([experts.expert(e).down.dequantize()
                                              for e in range(experts.num_experts)]))
    return experts, original


def test_input_gradient_through_quantized_experts():
    """Adapters before a quantized MoE block train: x's gradient is that of the block with the dequantized weights."""
    experts, original = quantized_and_dequantized_block()
    x = torch.randn(7, 128, requires_grad=True)
    index, weights = routing(experts.num_experts, 7)
    (grad_ours,) = torch.autograd.grad(experts(x, index, weights).square().sum(), x)
    (grad_theirs,) = torch.autograd.grad(original(x, index, weights).square().sum(), x)
    assert rel_error(grad_ours, grad_theirs) < 1e-5


def test_convolutions_and_other_3d_parameters_are_not_experts():
    """A convolution's 3-D / 4-D weight, or any 3-D parameter not named as experts' are, is no MoE block."""
    model = nn.Sequential(nn.Conv1d(4, 8, 3), nn.Conv2d(8, 8, 3), nn.Linear(8, 8))
    model.register_parameter("table", nn.Parameter(torch.randn(2, 3, 4)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = quantkit.quantize_(model, "int8-weight-only")
    assert [m.name for m in report.modules] == ["2"] and not caught
    assert split_fused_experts(model) == ({}, {})


# ------------------------------------------------------------------ the experts operator: compile, meta, autograd
@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe"])
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r if isinstance(r, str) else "int4")
def test_quantized_moe_model_compiles_fullgraph(kind, recipe):
    """torch.compile(fullgraph=True) of a whole quantized MoE model: the experts are one operator with a fake
    implementation (the loop's host synchronization stays inside it), so nothing breaks the graph; the same logits
    as eager."""
    model = tiny_moe(kind)
    quantkit.quantize_(model, recipe)
    ids = torch.randint(0, 128, (2, 9))
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert torch.equal(compiled(ids).logits, model(ids).logits)


def test_stacks_are_current_after_quantize_load_and_move(tmp_path):
    """A compiled forward takes the stacked buffers without checking them: quantize_, load_quantized,
    load_state_dict(assign=True) and a move stack them again."""
    from quantkit.checkpoint import load_quantized, save_quantized

    model = tiny_moe("mixtral")
    quantkit.quantize_(model, "int8-weight-only")
    blocks = [m for m in model.modules() if isinstance(m, Experts)]

    def current(block):
        stacks = block._stack_state[1]
        return stacks is not None and all(
            block.expert(e).down.weight.data_ptr() == stacks["down"][0][e].data_ptr() for e in range(block.num_experts))

    assert blocks and all(current(b) for b in blocks)
    model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)
    assert all(current(b) for b in blocks)
    model.to(torch.float64)  # a move: every buffer a tensor of its own again (codes keep their dtype)
    assert all(current(b) for b in blocks)
    save_quantized(model.to(torch.float32), tmp_path / "q")
    loaded = load_quantized(tmp_path / "q")
    assert all(current(b) for b in loaded.modules() if isinstance(b, Experts))
    ids = torch.randint(0, 128, (1, 7))
    torch._dynamo.reset()
    with torch.no_grad():
        assert torch.equal(torch.compile(loaded, fullgraph=True, backend="aot_eager")(ids).logits, model(ids).logits)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r if isinstance(r, str) else "int4")
def test_experts_operator_passes_opcheck(recipe):
    from quantkit.layers.experts import _is_silu  # noqa: F401 (the operator assumes SiLU experts)

    model = tiny_moe("qwen3_moe", dtype=torch.bfloat16)
    quantkit.quantize_(model, recipe)
    block = next(m for m in model.modules() if isinstance(m, Experts))
    (fmt, group, scale_fmt), stacks = block._grouped()
    x = torch.randn(7, 128, dtype=torch.bfloat16)
    index, weights = routing(block.num_experts, 7, dtype=torch.bfloat16)
    args = (x, index, weights, *stacks["gate"], *stacks["up"], *stacks["down"], fmt, group, scale_fmt or "")
    checks = ("test_schema", "test_faketensor", "test_aot_dispatch_static")
    if fmt == "fp8-block":
        checks = checks[1:]  # (as for the fp8 linear op: the schema check's arithmetic lacks float8 on the CPU)
    torch.library.opcheck(torch.ops.quantkit.moe_experts, args, test_utils=checks)
    with torch.no_grad():
        assert torch.equal(torch.ops.quantkit.moe_experts(*args), block(x, index, weights))
        assert torch.equal(block(x, index, weights), block.forward_loop(x, index, weights))


def test_meta_experts_give_the_output_shape():
    with params_on_meta():
        model = transformers.Qwen3MoeForCausalLM._from_config(tiny_moe("qwen3_moe").config).eval()
    quantkit.quantize_(model, "int4-weight-only")
    block = next(m for m in model.modules() if isinstance(m, Experts))
    x = torch.empty(5, 3, 128, device="meta")
    index = torch.empty(5, 3, 2, dtype=torch.long, device="meta")
    y = block(x, index, torch.empty(5, 3, 2, device="meta"))
    assert y.is_meta and y.shape == x.shape


def test_router_weights_get_their_gradient():
    """A trainable router (its weights require grad) with a frozen input: the experts take the autograd path, and
    the routing weights' gradient is that of the fused module with the dequantized weights."""
    experts, original = quantized_and_dequantized_block()
    x = torch.randn(7, 128)
    index, weights = routing(experts.num_experts, 7)
    weights.requires_grad_(True)
    (ours,) = torch.autograd.grad(experts(x, index, weights).square().sum(), weights)
    (theirs,) = torch.autograd.grad(original(x, index, weights).square().sum(), weights)
    assert rel_error(ours, theirs) < 1e-5


def test_autocast_runs_the_experts_in_its_dtype():
    model = tiny_moe("qwen3_moe")
    quantkit.quantize_(model, "int8-weight-only")
    block = next(m for m in model.modules() if isinstance(m, Experts))
    x = torch.randn(6, 128)
    index, weights = routing(block.num_experts, 6)
    with torch.no_grad():
        want = block(x.bfloat16(), index, weights)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = block(x, index, weights)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_compiled_model_follows_a_load_of_new_weights():
    """The compiled graph reads the stacks at each call: after load_state_dict(assign=True) of another model's
    quantized state it computes with the new weights."""
    model, other = tiny_moe("qwen3_moe", seed=0), tiny_moe("qwen3_moe", seed=1)
    quantkit.quantize_(model, "int8-weight-only")
    quantkit.quantize_(other, "int8-weight-only")
    ids = torch.randint(0, 128, (1, 9))
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        before = compiled(ids).logits
        model.load_state_dict({k: v.clone() for k, v in other.state_dict().items()}, assign=True)
        after = compiled(ids).logits
        assert torch.equal(after, other(ids).logits) and not torch.equal(after, before)


def test_bad_inputs_name_the_block():
    """The experts operator reads the stacks by x's sizes: a wrong hidden size, routing of another shape, float
    indices or another dtype are refused with the block's name, before any kernel runs."""
    model = tiny_moe("qwen3_moe")
    quantkit.quantize_(model, "int4-weight-only")
    block = next(m for m in model.modules() if isinstance(m, Experts))
    index, weights = routing(block.num_experts, 5)
    with pytest.raises(ValueError, match=r"Experts 'model.layers.0.mlp.experts'.*last dimension 128.*\(5, 96\)"):
        block(torch.randn(5, 96), index, weights)
    with pytest.raises(ValueError, match="top_k_index"):
        block(torch.randn(5, 128), index[:4], weights[:4])
    with pytest.raises(TypeError, match="integer expert indices"):
        block(torch.randn(5, 128), index.float(), weights)
    with pytest.raises(TypeError, match="bfloat16, float16 or float32"):
        block(torch.randn(5, 128).double(), index, weights)
