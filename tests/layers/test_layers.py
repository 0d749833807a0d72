"""The four quantized layers: numerics against float64, shapes, dtypes, moves, compile, input gradients."""
import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import quantkit
from quantkit import reference as R
from quantkit.layers import Fp8BlockLinear, Int4WeightOnlyLinear, Int8DynamicLinear, Int8WeightOnlyLinear
from tests.helpers import rel_error

# ‖y − y_ref‖/‖y_ref‖ for weights N(0, 0.02²), bias N(0, 0.02²), inputs N(0, 1), against float64
# F.linear of the original weights. Measured on the CPU over shapes 64×256×512, 5×123×123,
# 33×300×256, 5 seeds and the three activation dtypes: fp8-block 0.034–0.039, int8-dynamic
# 0.0087–0.0107, int8-weight-only 0.0062–0.0076, int4-weight-only (min-max, g128) 0.099–0.102.
# The upper bounds add ~15 % margin; the lower bounds prove the weights really were quantized
# (a layer that silently kept bf16 weights would land near 0.002). int4's lower bound leaves room
# for better-than-min-max rounding.
ERROR_BOUNDS = {
    "fp8-block": (0.025, 0.045),
    "int8-dynamic": (0.005, 0.0125),
    "int8-weight-only": (0.004, 0.0090),
    "int4-weight-only": (0.060, 0.117),
}
LAYER_CLASS = {
    "fp8-block": Fp8BlockLinear,
    "int8-dynamic": Int8DynamicLinear,
    "int8-weight-only": Int8WeightOnlyLinear,
    "int4-weight-only": Int4WeightOnlyLinear,
}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def make_linear(k, n, bias=True, dtype=torch.float32):
    lin = nn.Linear(k, n, bias=bias)
    nn.init.normal_(lin.weight, std=0.02)
    if bias:
        nn.init.normal_(lin.bias, std=0.02)
    return lin.to(dtype)


def quantized(lin, recipe):
    return quantkit.quantize_linear(lin, recipe)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mnk,bias", [((64, 256, 512), True), ((5, 123, 123), True), ((33, 300, 256), False),
                                      ((1, 128, 384), True)])
def test_layer_error_against_float64(recipe, dtype, mnk, bias):
    m, n, k = mnk
    if recipe == "int4-weight-only" and k % 128:
        pytest.skip("int4 needs K % group_size == 0 (tested in test_api as a skip)")
    lin = make_linear(k, n, bias, dtype)
    layer = quantized(lin, recipe)
    assert isinstance(layer, LAYER_CLASS[recipe])
    x = torch.randn(m, k, dtype=dtype)
    ref = F.linear(x.double(), lin.weight.double(), lin.bias.double() if bias else None)
    with torch.no_grad():
        y = layer(x)
    assert y.dtype == dtype and y.shape == (m, n)
    lo, hi = ERROR_BOUNDS[recipe]
    err = rel_error(y, ref)
    if m * n >= 2000:  # tiny outputs make the relative error itself noisy
        assert lo <= err <= hi, f"{recipe} {dtype} {mnk}: rel. error {err:.4f} outside [{lo}, {hi}]"
    else:
        assert err <= hi * 1.5


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_layer_equals_reference_function(recipe):
    """The layer is exactly the reference function of its buffers (same numerics, any leading shape)."""
    lin = make_linear(256, 130, dtype=torch.bfloat16)
    layer = quantized(lin, recipe)
    x = torch.randn(2, 3, 256, dtype=torch.bfloat16)
    x2 = x.reshape(-1, 256)
    if recipe == "fp8-block":
        expected = R.fp8_block_linear(x2, layer.weight, layer.weight_scale, layer.bias)
    elif recipe == "int8-dynamic":
        expected = R.int8_dynamic_linear(x2, layer.weight, layer.weight_scale, layer.bias)
    elif recipe == "int8-weight-only":
        expected = R.int8_weight_only_linear(x2, layer.weight, layer.weight_scale, layer.bias)
    else:
        expected = R.int4_weight_only_linear(x2, layer.weight_packed, layer.weight_scale, layer.weight_zero_point,
                                             layer.bias, 128)
    with torch.no_grad():
        y = layer(x)
    assert y.shape == (2, 3, 130)
    assert torch.equal(y.reshape(-1, 130), expected)
    # kernel_args() are the arguments after x of the family's linear (kernel module and reference alike)
    reference_linear = {"fp8-block": R.fp8_block_linear, "int8-dynamic": R.int8_dynamic_linear,
                        "int8-weight-only": R.int8_weight_only_linear,
                        "int4-weight-only": R.int4_weight_only_linear}[recipe]
    assert torch.equal(reference_linear(x2, *layer.kernel_args()), expected)
    # dequantize() is the weight the layer multiplies by
    w = layer.dequantize()
    if recipe in ("int8-weight-only", "int4-weight-only"):
        manual = (x2.float() @ w.t() + layer.bias.float()).to(torch.bfloat16)
        assert torch.equal(y.reshape(-1, 130), manual)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_input_shapes(recipe):
    layer = quantized(make_linear(128, 64), recipe)
    with torch.no_grad():
        assert layer(torch.randn(128)).shape == (64,)
        assert layer(torch.randn(4, 5, 6, 128)).shape == (4, 5, 6, 64)
        assert layer(torch.randn(0, 128)).shape == (0, 64)
        xt = torch.randn(128, 7).t()  # non-contiguous input
        assert torch.equal(layer(xt), layer(xt.contiguous()))


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_bad_inputs_name_the_module(recipe):
    model = nn.Sequential(nn.Linear(128, 64))
    model[0].weight.data.normal_(0, 0.02)
    quantkit.quantize_(model, recipe)
    with pytest.raises(ValueError, match=r"'0'.*last dimension 128.*\(3, 100\)"):
        model(torch.randn(3, 100))
    with pytest.raises(TypeError, match="bfloat16, float16 or float32"):
        model(torch.ones(3, 128, dtype=torch.float64))


def _input_gradient_check(layer, dtype, lead, device="cpu", with_bias=False):
    """Backward through ``layer``: x.grad against float64 grad_y @ W (W = layer.dequantize()), no worse
    than the same product by a plain F.linear holding W in ``dtype`` (a float model's own backward)."""
    w64 = layer.dequantize(torch.float64)
    x = torch.randn(*lead, layer.in_features, dtype=dtype, device=device, requires_grad=True)
    if with_bias:
        layer.bias.requires_grad_()
    y = layer(x)
    grad = torch.randn_like(y)
    y.backward(grad)
    want = grad.double() @ w64
    plain = x.detach().clone().requires_grad_()
    F.linear(plain, w64.to(dtype)).backward(grad)
    assert x.grad.dtype == dtype and x.grad.shape == x.shape
    err, floor = rel_error(x.grad, want), rel_error(plain.grad, want)
    assert err <= 1.5 * floor + 1e-7, f"input gradient rel. error {err:.3g}, a plain linear's {floor:.3g}"
    if with_bias:
        summed = grad.double().sum(tuple(range(len(lead))))
        assert layer.bias.grad.dtype == layer.bias.dtype and rel_error(layer.bias.grad, summed) < 4e-3
    assert all(b.grad is None and not b.requires_grad for b in layer.buffers() if b is not layer.bias or not with_bias)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_input_gradient_through_the_frozen_weight(recipe, dtype):
    """x gets grad_y @ W: exact for the weight-only formats, the straight-through estimator for those
    that quantize the activation too. N = 200 and M = 6 are no tile's multiples."""
    layer = quantized(make_linear(256, 200, dtype=dtype), recipe)
    _input_gradient_check(layer, dtype, (2, 3), with_bias=True)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_a_bias_that_requires_grad_gets_the_summed_gradient(recipe):
    layer = quantized(make_linear(128, 64, dtype=torch.bfloat16), recipe)
    layer.bias.requires_grad_()
    x = torch.randn(4, 5, 128, dtype=torch.bfloat16)  # x itself needs no gradient
    y = layer(x)
    grad = torch.randn_like(y)
    y.backward(grad)
    assert layer.bias.grad.dtype == torch.bfloat16
    assert torch.equal(layer.bias.grad, grad.float().sum((0, 1)).to(torch.bfloat16))


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_an_adapter_trains_through_a_quantized_model(recipe):
    """QLoRA's use: a float module in front of quantized ones gets the gradients it would get in a float
    model holding the dequantized weights (the quantized layers' outputs enter the loss linearly)."""
    model = nn.Sequential(make_linear(64, 256), make_linear(256, 384), make_linear(384, 96))
    quantkit.quantize_(model, recipe, ignore=["0"])
    dense = nn.Sequential(copy.deepcopy(model[0]), nn.Linear(256, 384), nn.Linear(384, 96))
    for i in (1, 2):
        dense[i].weight.data, dense[i].bias.data = model[i].dequantize(), model[i].bias.clone()
    x, c = torch.randn(8, 64), torch.randn(8, 96)
    (model(x) * c).sum().backward()
    (dense(x) * c).sum().backward()
    for name in ("weight", "bias"):
        got, want = getattr(model[0], name).grad, getattr(dense[0], name).grad
        assert rel_error(got, want) < 1e-5, name
    assert all(b.grad is None for b in model[1].buffers())


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
@pytest.mark.parametrize("compiled", [False, True])
def test_a_weight_buffer_that_requires_grad_is_a_clear_error(recipe, compiled):
    """The weight's buffers get no gradient in any path. One set to require grad would otherwise get none
    silently, or (the CPU reference, x not requiring grad) a gradient through the reference's arithmetic."""
    layer = quantized(make_linear(256, 96), recipe)
    run = torch.compile(layer, fullgraph=True, backend="aot_eager") if compiled else layer
    torch._dynamo.reset()
    float_buffers = [n for n in layer.quantized_buffers if getattr(layer, n).is_floating_point()]
    assert "weight_scale" in float_buffers
    for name in float_buffers:
        getattr(layer, name).requires_grad_()
        for x_requires_grad in (True, False):
            x = torch.randn(3, 256, requires_grad=x_requires_grad)
            with pytest.raises(RuntimeError, match=f"frozen.*{name}.*requires_grad_\\(False\\)"):
                run(x)
        with torch.no_grad():  # inference is unaffected
            assert run(torch.randn(3, 256)).shape == (3, 96)
        getattr(layer, name).requires_grad_(False)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_input_gradient_under_func_grad_and_checkpointing(recipe):
    """torch.func.grad and activation checkpointing (the forward recomputed in the backward) give the
    gradient that plain autograd gives."""
    from torch.utils.checkpoint import checkpoint

    layer = quantized(make_linear(256, 96), recipe)
    x = torch.randn(5, 256, requires_grad=True)
    layer(x).square().sum().backward()
    want, x.grad = x.grad, None
    assert torch.equal(torch.func.grad(lambda t: layer(t).square().sum())(x.detach()), want)
    checkpoint(layer, x, use_reentrant=False).square().sum().backward()
    assert torch.equal(x.grad, want)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_per_sample_gradients_and_jacobians_under_vmap(recipe):
    """vmap over grad (per-sample gradients of an adapter in front of the layer) and jacrev (vmap over the
    backward): the quantized layer is row-wise, so each sample gets what it gets alone."""
    layer = quantized(make_linear(256, 96), recipe)
    adapter = nn.Linear(64, 256)
    params = {k: v.detach() for k, v in adapter.named_parameters()}

    def loss(p, sample):
        return layer(torch.func.functional_call(adapter, p, (sample,))).square().sum()

    x = torch.randn(5, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # vmap's per-sample fallback ("performance drop") dequantizes B times
        per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, x)
    for i in range(len(x)):
        alone = torch.func.grad(loss)(params, x[i])
        for name in params:
            assert rel_error(per_sample[name][i], alone[name]) < 1e-6, name
    assert torch.equal(torch.func.vmap(layer)(x.new_ones(5, 3, 256)), layer(x.new_ones(5, 3, 256)))
    # the Jacobian of y = x W^T (+ b) in x is W, the dequantized weight (the straight-through estimator
    # for the formats that quantize x)
    w = layer.dequantize()
    assert rel_error(torch.func.jacrev(layer)(torch.randn(256)), w) < 1e-6
    assert rel_error(torch.func.jacrev(layer)(torch.randn(2, 256))[1, :, 1], w) < 1e-6


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_forward_mode_gradients_follow_the_dequantized_weight(recipe):
    """Forward-mode AD (torch.func.jvp, jacfwd, dual tensors) gives the backward's rule: the tangent of y is
    x's tangent times W^T, the straight-through estimator for the formats that quantize x (whose rounding
    would otherwise give a zero derivative)."""
    import torch.autograd.forward_ad as fwAD

    layer = quantized(make_linear(256, 96), recipe)
    w = layer.dequantize(torch.float64)
    x, tangent = torch.randn(2, 3, 256), torch.randn(2, 3, 256)
    want = tangent.double() @ w.t()
    y, y_tangent = torch.func.jvp(layer, (x,), (tangent,))
    assert torch.equal(y, layer(x)) and rel_error(y_tangent, want) < 1e-6
    with fwAD.dual_level():
        y_tangent = fwAD.unpack_dual(layer(fwAD.make_dual(x, tangent))).tangent
    assert y_tangent is not None and rel_error(y_tangent, want) < 1e-6
    assert rel_error(torch.func.jacfwd(layer)(torch.randn(256)), w) < 1e-6
    with pytest.raises(RuntimeError, match="second-order gradients"):
        torch.func.hessian(lambda t: layer(t).square().sum())(torch.randn(256))


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_eager_backward_through_the_input_gradient_op(recipe, monkeypatch):
    """Under a functorch transform the eager backward calls the input gradient's custom op (which unwraps
    functorch's tensors for the Triton kernels): the same gradient as the plain function's."""
    from quantkit.ops import linear

    layer = quantized(make_linear(256, 96, dtype=torch.bfloat16), recipe)
    x = torch.randn(2, 5, 256, dtype=torch.bfloat16, requires_grad=True)
    layer(x).float().square().sum().backward()
    want, x.grad = x.grad, None
    monkeypatch.setattr(linear, "_transforms_active", lambda: True)
    layer(x).float().square().sum().backward()
    assert torch.equal(x.grad, want)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_second_order_gradients_are_a_clear_error(recipe):
    layer = quantized(make_linear(128, 64), recipe)
    x = torch.randn(3, 128, requires_grad=True)
    (gx,) = torch.autograd.grad(layer(x).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="second-order gradients"):
        gx.sum().backward()


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_backward_compiles_fullgraph(recipe):
    model = nn.Sequential(make_linear(256, 128), nn.GELU(), make_linear(128, 64))
    quantkit.quantize_(model, recipe)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 7, 256, requires_grad=True)
    compiled(x).square().sum().backward()
    got, x.grad = x.grad, None
    model(x).square().sum().backward()
    assert torch.equal(got, x.grad)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_dtype_casts_keep_quantized_buffers(recipe):
    model = nn.Sequential(make_linear(256, 96))
    quantkit.quantize_(model, recipe)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 256)
    with torch.no_grad():
        y32 = model(x)
        model.to(torch.float16)
        y16 = model(x.half())
        model.bfloat16()
        model.float()
    layer = model[0]
    for name in layer.quantized_buffers:
        assert getattr(layer, name).dtype == before[f"0.{name}"].dtype
        assert torch.equal(getattr(layer, name), before[f"0.{name}"]), name
    assert layer.bias.dtype == torch.float32  # the bias follows the model's dtype
    assert y16.dtype == torch.float16
    # Weight-only layers see only fp16 rounding of x and y; dynamic ones re-quantize the rounded
    # activations, which moves some codes by one step.
    assert rel_error(y16, y32) < (2e-3 if "weight-only" in recipe else 2e-2)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_forward_takes_its_input_by_nn_linears_keyword(recipe):
    """A model that calls fc(input=x), as nn.Linear's signature allows, works the same after quantize_."""
    linear = make_linear(128, 64)
    x = torch.randn(3, 128)
    layer = quantized(linear, recipe)
    assert torch.equal(layer(input=x), layer(x))
    with pytest.raises(TypeError):
        layer(x=x)  # not a name nn.Linear takes


def test_extra_repr_names_the_format():
    reprs = {r: repr(quantized(make_linear(128, 64), r)) for r in ERROR_BOUNDS}
    assert "e4m3" in reprs["fp8-block"] and "128x128" in reprs["fp8-block"]
    assert "per token" in reprs["int8-dynamic"]
    assert "format=int8-weight-only" in reprs["int8-weight-only"]
    assert "group_size=128" in reprs["int4-weight-only"] and "asymmetric" in reprs["int4-weight-only"]


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_custom_ops_pass_opcheck(recipe):
    """torch.library.opcheck: the fake implementation agrees with the real one (shapes, strides,
    dtypes) and the op is registered correctly, which torch.compile relies on."""
    layer = quantized(make_linear(256, 64, dtype=torch.bfloat16), recipe)
    x = torch.randn(3, 5, 256, dtype=torch.bfloat16)
    if recipe == "fp8-block":
        op, args = torch.ops.quantkit.fp8_block_linear, (x, layer.weight, layer.weight_scale, layer.bias, 128, "")
    elif recipe == "int8-dynamic":
        op, args = torch.ops.quantkit.int8_dynamic_linear, (x, layer.weight, layer.weight_scale, layer.bias)
    elif recipe == "int8-weight-only":
        op, args = torch.ops.quantkit.int8_weight_only_linear, (x, layer.weight, layer.weight_scale, layer.bias)
    else:
        op, args = torch.ops.quantkit.int4_weight_only_linear, (
            x, layer.weight_packed, layer.weight_scale, layer.weight_zero_point, layer.bias, 128)
    checks = ("test_schema", "test_faketensor", "test_aot_dispatch_static")
    if recipe == "fp8-block":
        # opcheck's schema check compares inputs before/after with arithmetic that torch's CPU build
        # lacks for float8 ("mul_cpu_reduced_float"); the other two checks still cover the op.
        checks = checks[1:]
    torch.library.opcheck(op, args, test_utils=checks)
    # the input gradient's own op, as the backward calls it: a 2-D gradient and the weight's buffers
    grad = torch.randn(15, 64, dtype=torch.bfloat16)
    if recipe == "fp8-block":
        op, args = torch.ops.quantkit.fp8_block_linear_grad_input, (grad, layer.weight, layer.weight_scale, 128)
    elif recipe == "int4-weight-only":
        op, args = torch.ops.quantkit.int4_weight_only_linear_grad_input, (
            grad, layer.weight_packed, layer.weight_scale, layer.weight_zero_point, 128)
    else:
        op, args = torch.ops.quantkit.int8_linear_grad_input, (grad, layer.weight, layer.weight_scale)
    torch.library.opcheck(op, args, test_utils=checks)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_compiles_fullgraph(recipe):
    model = nn.Sequential(make_linear(256, 128), nn.GELU(), make_linear(128, 64))
    quantkit.quantize_(model, recipe)
    x = torch.randn(2, 7, 256)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))


def test_deepcopy_and_state_dict_round_trip():
    model = nn.Sequential(make_linear(256, 64), nn.ReLU(), make_linear(64, 32, bias=False))
    quantkit.quantize_(model, "int4-weight-only", ignore=["2"])
    clone = copy.deepcopy(model)
    x = torch.randn(3, 256)
    with torch.no_grad():
        assert torch.equal(clone(x), model(x))
    fresh = nn.Sequential(make_linear(256, 64), nn.ReLU(), make_linear(64, 32, bias=False))
    quantkit.quantize_(fresh, "int4-weight-only", ignore=["2"])
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(fresh(x), model(x))


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_model_to_cuda_gives_the_same_outputs(recipe):
    """Quantize on the CPU, move to the GPU: the kernels compute what the reference computed."""
    model = nn.Sequential(make_linear(512, 384, dtype=torch.bfloat16), nn.ReLU(),
                          make_linear(384, 256, dtype=torch.bfloat16))
    quantkit.quantize_(model, recipe)
    x = torch.randn(2, 9, 512, dtype=torch.bfloat16)
    with torch.no_grad():
        y_cpu = model(x)
        model.to("cuda")
        y_gpu = model(x.cuda()).cpu()
    assert rel_error(y_gpu, y_cpu) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_layer_on_a_second_gpu_runs_there_gpu(recipe):
    """A model spread over GPUs: a layer quantized and called on cuda:1 while cuda:0 is current runs its
    kernels on cuda:1 (Triton launches on the current device's stream), launch-plan replays included."""
    reference = {"fp8-block": R.fp8_block_linear, "int8-dynamic": R.int8_dynamic_linear,
                 "int8-weight-only": R.int8_weight_only_linear, "int4-weight-only": R.int4_weight_only_linear}[recipe]
    lin = make_linear(512, 384, dtype=torch.bfloat16)
    with torch.no_grad(), torch.cuda.device(0):
        # the same quantizer on cuda:0 (int4's search on a GPU is not bit-exact with the CPU's: near-ties)
        on_first = quantized(copy.deepcopy(lin).to("cuda:0"), recipe)
        layer = quantized(lin.to("cuda:1"), recipe)
        for name, buffer in on_first.state_dict().items():  # the quantizers ran on cuda:1, bit-exact
            assert torch.equal(layer.state_dict()[name].cpu().view(torch.uint8), buffer.cpu().view(torch.uint8)), name
        for m in (1, 33):
            x = torch.randn(m, 512, dtype=torch.bfloat16, device="cuda:1")
            want = reference(x, *layer.kernel_args())
            for _ in range(3):  # the first call, the recorded one, a replay
                y = layer(x)
                assert y.device == x.device and torch.cuda.current_device() == 0
                assert rel_error(y, want) < 1e-2, (recipe, m)
    # the input gradient on cuda:1 (the family's dequantizer launched there) while cuda:0 is current
    with torch.cuda.device(0):
        x = torch.randn(33, 512, dtype=torch.bfloat16, device="cuda:1", requires_grad=True)
        grad = torch.randn(33, 384, dtype=torch.bfloat16, device="cuda:1")
        layer(x).backward(grad)
        assert rel_error(x.grad, grad.double() @ layer.dequantize(torch.float64)) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_input_gradient_gpu(recipe, dtype):
    """The backward at a real width on the GPU, the weight dequantized by the family's Triton kernel (both
    int8 formats share int8 weight-only's)."""
    from quantkit.ops import backend_report

    layer = quantized(make_linear(4096, 1152, dtype=dtype).cuda(), recipe)
    _input_gradient_check(layer, dtype, (3, 100), device="cuda", with_bias=True)
    # torch.func.grad: functorch's backward hands wrapped tensors over; the op path unwraps them
    x = torch.randn(7, 4096, dtype=dtype, device="cuda", requires_grad=True)
    layer(x).float().square().sum().backward()
    assert torch.equal(torch.func.grad(lambda t: layer(t).float().square().sum())(x.detach()), x.grad)
    family = "int8_weight_only" if recipe == "int8-dynamic" else recipe.replace("-", "_")
    assert backend_report()[(f"{family}.dequantize_weight", "cuda:0")][0] == "triton"


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_func_transforms_gpu(recipe):
    """vmap over grad (per-sample gradients), jacrev, jvp and dual tensors on the GPU's kernels, which cannot
    read functorch's wrapped tensors: every transform must hand them plain ones."""
    import torch.autograd.forward_ad as fwAD

    layer = quantized(make_linear(1024, 384).cuda(), recipe)
    w = layer.dequantize()
    adapter = nn.Linear(64, 1024).cuda()
    params = {k: v.detach() for k, v in adapter.named_parameters()}

    def loss(p, sample):
        return layer(torch.func.functional_call(adapter, p, (sample,))).square().sum()

    x = torch.randn(6, 64, device="cuda")
    per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, x)
    for i in range(len(x)):
        alone = torch.func.grad(loss)(params, x[i])
        for name in params:
            assert rel_error(per_sample[name][i], alone[name]) < 1e-2, (name, i)
    assert rel_error(torch.func.jacrev(layer)(torch.randn(1024, device="cuda")), w) < 1e-2
    xs, tangent = torch.randn(3, 1024, device="cuda"), torch.randn(3, 1024, device="cuda")
    y, y_tangent = torch.func.jvp(layer, (xs,), (tangent,))
    assert rel_error(y_tangent, tangent @ w.t()) < 1e-2
    with fwAD.dual_level():
        dual_tangent = fwAD.unpack_dual(layer(fwAD.make_dual(xs, tangent))).tangent
    assert rel_error(dual_tangent, tangent @ w.t()) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_gpu(recipe, dtype):
    """Under CUDA autocast a float32 activation runs the kernels in the autocast dtype (the same bits as an
    explicit cast), eagerly and compiled, and its gradient comes back in float32."""
    layer = quantized(make_linear(1024, 384).cuda(), recipe)
    x = torch.randn(40, 1024, device="cuda", requires_grad=True)
    with torch.no_grad():
        want = layer(x.detach().to(dtype))
    with torch.autocast("cuda", dtype=dtype):
        y = layer(x)
        torch._dynamo.reset()
        y_compiled = torch.compile(layer, fullgraph=True)(x)
    assert y.dtype == dtype and torch.equal(y, want)
    assert y_compiled.dtype == dtype and rel_error(y_compiled, want) < 1e-2
    y.float().sum().backward()
    assert x.grad.dtype == torch.float32


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_backward_compiles_gpu(recipe):
    """Forward and backward under torch.compile's default backend (Inductor) on the GPU, as eager."""
    model = nn.Sequential(make_linear(512, 384, dtype=torch.bfloat16), nn.GELU(),
                          make_linear(384, 256, dtype=torch.bfloat16)).cuda()
    quantkit.quantize_(model, recipe)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(2, 33, 512, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    compiled(x).float().square().sum().backward()
    got, x.grad = x.grad, None
    model(x).float().square().sum().backward()
    assert rel_error(got, x.grad) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_input_layouts_gpu(recipe):
    """Inputs the TMA and vectorized paths cannot all take as they are: a view at an odd element offset
    (2-byte aligned rows), one broadcast over M (row stride 0) and one a row into a larger tensor, at the
    decode, the small-M and the large-M kernels; each call, the recorded one and the replays, as the
    reference on the same x."""
    reference = {"fp8-block": R.fp8_block_linear, "int8-dynamic": R.int8_dynamic_linear,
                 "int8-weight-only": R.int8_weight_only_linear, "int4-weight-only": R.int4_weight_only_linear}[recipe]
    layer = quantized(make_linear(256, 1152, dtype=torch.bfloat16), recipe).to("cuda")
    with torch.no_grad():
        for m in (1, 8, 300):
            big = torch.randn(m + 1, 256 + 16, dtype=torch.bfloat16, device="cuda")
            for name, x in (("odd offset", big[:m, 1:257]), ("broadcast", big[:1, :256].expand(m, 256)),
                            ("row offset", big[1:, 16:272])):
                want = reference(x.contiguous(), *layer.kernel_args())
                for _ in range(3):
                    assert rel_error(layer(x), want) < 1e-2, (recipe, m, name)


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_autocast_runs_the_layer_in_its_dtype(recipe):
    """Under torch.autocast a quantized layer computes as nn.Linear does: in the autocast dtype, with an output of
    that dtype, and the float32 input still gets its gradient."""
    lin = make_linear(256, 96)
    layer = quantized(copy.deepcopy(lin), recipe)
    x = torch.randn(3, 256, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
        assert lin(x).dtype == torch.bfloat16  # nn.Linear's policy, which the quantized layer follows
    assert y.dtype == torch.bfloat16
    with torch.no_grad():
        assert torch.equal(y, layer(x.detach().to(torch.bfloat16)))
    y.float().sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        assert layer(x).dtype == torch.float32


@pytest.mark.parametrize("recipe", list(ERROR_BOUNDS))
def test_meta_input_gives_the_output_shape(recipe):
    """A meta activation (shape propagation, a meta model's dry run) goes to the custom op's fake implementation;
    the autocast check had no meta device type and raised."""
    layer = quantized(make_linear(256, 64), recipe)
    y = layer(torch.empty(2, 3, 256, device="meta"))
    assert y.is_meta and y.shape == (2, 3, 64)
