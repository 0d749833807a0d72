"""Per-format tables: how each quantized layer's buffers are named, packed and described on disk.

A *layout* is one on-disk representation of one quantized ``nn.Linear``: which tensors it has
(``<module>.<suffix>``), how they map to the buffers of our layer, and the recipe that layer
implements. Layouts written and read:

==================  ============================================  ==============================
layout              tensors (N = out_features, K = in_features)   our layer
==================  ============================================  ==============================
ct-fp8-block        weight e4m3 [N, K]; weight_scale [⌈N/128⌉,     Fp8BlockLinear
                    ⌈K/128⌉] (compressed-tensors float-quantized)
hf-fp8-block        weight e4m3 [N, K]; weight_scale_inv [⌈N/128⌉, Fp8BlockLinear
                    ⌈K/128⌉] (DeepSeek-V3 / Hugging Face "fp8")
ct-int8             weight int8 [N, K]; weight_scale [N, 1]        Int8DynamicLinear (int-quantized),
                                                                   Int8WeightOnlyLinear (read only)
ct-int8-packed      weight_packed int32 [N, ⌈K/4⌉]; weight_scale   Int8WeightOnlyLinear
                    [N, 1]; weight_shape int64 [2] (pack-quantized)
ct-int4-packed      weight_packed int32 [N, K/8]; weight_scale     Int4WeightOnlyLinear
                    [N, K/g]; weight_zero_point int32 [⌈N/8⌉, K/g]
                    (asymmetric only); weight_shape (pack-quantized)
gptq, awq           qweight / qzeros / scales (/ g_idx)            Int4WeightOnlyLinear (read only)
==================  ============================================  ==============================

Every scale is a multiplier. compressed-tensors stores each n-bit code ``c`` (signed, in
[-2^(n-1), 2^(n-1))) as the unsigned ``c + 2^(n-1)``, element i of a row at bits [i·n, (i+1)·n) of
its int32 word, least significant first; its zero-points get the same offset and are packed along
dim 0. Our int4 codes ``q`` are already unsigned with dequant ``(q - z)·s``, so the stored nibble is
``q`` itself and the stored zero-point nibble is ``z`` (theirs: ``(q-8) - (z-8)``, the same value).
Our int8 codes are signed, stored as ``q + 128``. The scales our layers keep in float32 (fp8 block,
int8) are stored in float32 so a save/load round trip is exact; the package and vLLM read any float
dtype (see notes/checkpoint.md).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from quantkit.layers import (
    Fp8BlockLinear,
    Int4WeightOnlyLinear,
    Int8DynamicLinear,
    Int8WeightOnlyLinear,
    QuantizedLinear,
)
from quantkit.recipes import INT4_GROUP_SIZES, Fp8Block, Int4WeightOnly, Int8Dynamic, Int8WeightOnly, Recipe
from quantkit.reference.common import ceil_div
from quantkit.reference.int4 import pack_int4, unpack_int4

from .storage import CheckpointError

CT_FORMAT = "compressed-tensors"
HF_FP8_FORMAT = "fp8"
FORMATS = (CT_FORMAT, HF_FP8_FORMAT)

FP8 = torch.float8_e4m3fn
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# AWQ GEMM packs the 8 columns of a word in the order 0, 2, 4, 6, 1, 3, 5, 7: nibble p holds column
# AWQ_ORDER[p], so column c sits at nibble AWQ_NIBBLE_OF_COLUMN[c].
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
AWQ_NIBBLE_OF_COLUMN = tuple(AWQ_ORDER.index(c) for c in range(8))


# -- bit packing (compressed-tensors pack-quantized convention) ----------------------------------
# With 4 or 8 bits an element never straddles a byte, so on a little-endian host a row of int32 words
# is exactly its bytes in order: packing is byte arithmetic and a reinterpreting view, with no
# temporary wider than the codes. Other widths or hosts take the word arithmetic.
_BYTE_PACKING = sys.byteorder == "little"


def pack_int32(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Unsigned ``values`` [R, C] (each < 2^bits) -> int32 [R, ⌈C·bits/32⌉]; element i of a row at bits
    [i·bits, (i+1)·bits) of the row's words, least significant first (bits must divide 32)."""
    per = 32 // bits
    rows, cols = values.shape
    words = ceil_div(cols, per)
    if _BYTE_PACKING and bits in (4, 8):
        v = torch.nn.functional.pad(values.to(torch.uint8), (0, words * per - cols))
        if bits == 4:
            v = v[:, 0::2] | (v[:, 1::2] << 4)
        # through 1-D: a size-1 dim may keep any stride and defeat a 2-D dtype view
        return v.contiguous().view(-1).view(torch.int32).view(rows, words)
    v = torch.nn.functional.pad(values.to(torch.int64), (0, words * per - cols)).view(rows, words, per)
    shifts = torch.arange(per, dtype=torch.int64, device=values.device) * bits
    packed = (v << shifts).sum(-1)
    # the words are unsigned 32-bit patterns; int32 holds them in two's complement
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def unpack_int32(words: torch.Tensor, bits: int, cols: int) -> torch.Tensor:
    """Inverse of :func:`pack_int32`: int32 [R, W] -> uint8 [R, cols] (bits <= 8)."""
    rows = words.shape[0]
    if _BYTE_PACKING and bits in (4, 8):
        v = words.contiguous().view(-1).view(torch.uint8).view(rows, -1)
        if bits == 4:
            v = torch.stack((v & 0xF, v >> 4), dim=-1).reshape(rows, -1)
        return v[:, :cols]
    per = 32 // bits
    shifts = torch.arange(per, dtype=torch.int64, device=words.device) * bits
    v = (words.to(torch.int64)[..., None] >> shifts) & ((1 << bits) - 1)
    return v.reshape(rows, -1)[:, :cols].to(torch.uint8)


def _ct_pack_dim0(values: torch.Tensor, bits: int) -> torch.Tensor:
    return pack_int32(values.t(), bits).t().contiguous()


def _ct_unpack_dim0(words: torch.Tensor, bits: int, rows: int) -> torch.Tensor:
    return unpack_int32(words.t().contiguous(), bits, rows).t()


# -- layouts ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    kind: str
    recipe: Recipe
    #: extra decoding parameters (gptq: zero-point offset; ct: scheme name for messages)
    zero_offset: int = 0
    scheme: str = ""

    @property
    def primary(self) -> str:
        """The tensor suffix whose presence marks a module as stored in this layout."""
        return {"ct-int8-packed": "weight_packed", "ct-int4-packed": "weight_packed", "gptq": "qweight",
                "awq": "qweight"}.get(self.kind, "weight")

    def suffixes(self) -> tuple[str, ...]:
        """Every tensor suffix this layout may own (the bias is not one: it is an ordinary tensor)."""
        return {
            "ct-fp8-block": ("weight", "weight_scale"),
            "hf-fp8-block": ("weight", "weight_scale_inv"),
            "ct-int8": ("weight", "weight_scale"),
            "ct-int8-packed": ("weight_packed", "weight_scale", "weight_shape"),
            "ct-int4-packed": ("weight_packed", "weight_scale", "weight_shape", "weight_zero_point", "weight_g_idx"),
            "gptq": ("qweight", "qzeros", "scales", "g_idx"),
            "awq": ("qweight", "qzeros", "scales"),
        }[self.kind]


def recipe_of(layer: QuantizedLinear) -> Recipe:
    """The recipe a quantized layer implements (what its config group says)."""
    if isinstance(layer, Fp8BlockLinear):
        return Fp8Block(block_size=layer.block_size, scale_fmt=layer.scale_fmt)
    if isinstance(layer, Int8DynamicLinear):
        return Int8Dynamic()
    if isinstance(layer, Int8WeightOnlyLinear):
        return Int8WeightOnly()
    if isinstance(layer, Int4WeightOnlyLinear):
        return Int4WeightOnly(group_size=layer.group_size, symmetric=layer.symmetric)
    raise TypeError(f"no checkpoint layout for {type(layer).__name__}")


def layout_for_layer(layer: QuantizedLinear, fmt: str, name: str = "") -> Layout:
    recipe = recipe_of(layer)
    if fmt == HF_FP8_FORMAT:
        if not isinstance(layer, Fp8BlockLinear):
            raise ValueError(f"format 'fp8' (DeepSeek / Hugging Face) stores fp8-block layers only, but {name or 'a module'} "
                             f"is {recipe.name}; use format='compressed-tensors'")
        return Layout("hf-fp8-block", recipe)
    if fmt != CT_FORMAT:
        raise ValueError(f"unknown checkpoint format {fmt!r}; choose one of {', '.join(FORMATS)}")
    kind = {Fp8Block: "ct-fp8-block", Int8Dynamic: "ct-int8", Int8WeightOnly: "ct-int8-packed",
            Int4WeightOnly: "ct-int4-packed"}[type(recipe)]
    return Layout(kind, recipe)


# -- encode: our layer's buffers -> file tensors (meta-safe, so plans can be made on meta) --------
def encode(layout: Layout, layer: QuantizedLinear) -> dict[str, torch.Tensor]:
    """File tensors (by suffix, bias excluded) for ``layer`` in ``layout``. Works on ``meta`` layers."""
    n, k = layer.out_features, layer.in_features
    kind = layout.kind
    if kind in ("ct-fp8-block", "hf-fp8-block"):
        scale_name = "weight_scale" if kind == "ct-fp8-block" else "weight_scale_inv"
        return {"weight": layer.weight, scale_name: layer.weight_scale}
    if kind == "ct-int8":
        return {"weight": layer.weight, "weight_scale": layer.weight_scale.reshape(n, 1)}
    shape = _shape_tensor(n, k, layer.weight_scale.device)
    if kind == "ct-int8-packed":
        unsigned = layer.weight.view(torch.uint8) ^ 0x80  # q + 128 (mod 256): the sign bit flipped
        return {"weight_packed": pack_int32(unsigned, 8), "weight_scale": layer.weight_scale.reshape(n, 1),
                "weight_shape": shape}
    if kind == "ct-int4-packed":
        codes = unpack_int4(layer.weight_packed)
        out = {"weight_packed": pack_int32(codes, 4), "weight_scale": layer.weight_scale, "weight_shape": shape}
        if not layer.symmetric:
            out["weight_zero_point"] = _ct_pack_dim0(layer.weight_zero_point, 4)
        return out
    raise ValueError(f"layout {kind} is read-only")


def _shape_tensor(n: int, k: int, device: torch.device) -> torch.Tensor:
    if device.type == "meta":
        return torch.empty(2, dtype=torch.int64, device="meta")
    return torch.tensor([n, k], dtype=torch.int64)


# -- decode: file tensors -> our layer's buffers --------------------------------------------------
Reader = Callable[[str], "torch.Tensor | None"]  # suffix -> tensor (None when absent)
Locator = Callable[[str], str]  # suffix -> "file: tensor" for messages


def infer_shape(layout: Layout, shape_of: Callable[[str], "tuple[int, ...] | None"], read: Reader,
                where: Locator) -> tuple[int, int]:
    """(out_features, in_features) of a stored module, from header shapes (and ``weight_shape``)."""
    primary = shape_of(layout.primary)
    if primary is None or len(primary) != 2:
        raise CheckpointError(f"{where(layout.primary)}: expected a 2-D tensor, got shape {primary}")
    if layout.kind in ("ct-fp8-block", "hf-fp8-block", "ct-int8"):
        return primary
    if layout.kind in ("ct-int8-packed", "ct-int4-packed"):
        stored = read("weight_shape")
        if stored is None:
            raise CheckpointError(f"{where('weight_shape')}: missing (pack-quantized weights need their shape)")
        values = [int(v) for v in stored.reshape(-1).tolist()]
        if len(values) != 2 or min(values) <= 0:
            raise CheckpointError(f"{where('weight_shape')}: {values} is not a weight shape [out_features, "
                                  f"in_features]")
        return values[0], values[1]
    if layout.kind == "gptq":
        return primary[1], primary[0] * 8
    if layout.kind == "awq":
        return primary[1] * 8, primary[0]
    raise ValueError(layout.kind)


def _need(read: Reader, where: Locator, suffix: str, what: str) -> torch.Tensor:
    t = read(suffix)
    if t is None:
        raise CheckpointError(f"{where(suffix)}: missing — {what}")
    return t


def _check(t: torch.Tensor, where: str, shape: tuple[int, ...] | None = None,
           dtypes: tuple[torch.dtype, ...] | None = None) -> torch.Tensor:
    if dtypes is not None and t.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise CheckpointError(f"{where}: dtype {str(t.dtype).replace('torch.', '')} does not match the model "
                              f"(expected {names})")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise CheckpointError(f"{where}: shape {list(t.shape)} does not match the model (expected {list(shape)})")
    return t


def _scale_to_float32(t: torch.Tensor, where: str) -> torch.Tensor:
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    if e8m0 is not None and t.dtype == e8m0:
        return t.float()  # powers of two: exact
    _check(t, where, dtypes=FLOAT_DTYPES)
    return t.float()  # bf16 and fp16 widen exactly


def decode(layout: Layout, layer: QuantizedLinear, read: Reader, where: Locator) -> dict[str, torch.Tensor]:
    """Buffers for ``layer`` (built by the layout's recipe, possibly on meta) from the stored tensors.

    Every tensor's dtype and shape is checked against the layer; messages name file and tensor.
    """
    n, k = layer.out_features, layer.in_features
    kind = layout.kind
    if kind in ("ct-fp8-block", "hf-fp8-block"):
        scale_name = "weight_scale" if kind == "ct-fp8-block" else "weight_scale_inv"
        w = _check(_need(read, where, "weight", "the fp8 weight"), where("weight"), (n, k), (FP8,))
        s = _need(read, where, scale_name, f"fp8 weight {where('weight')} has no scale")
        b = layer.block_size
        s = _check(_scale_to_float32(s, where(scale_name)), where(scale_name), (ceil_div(n, b), ceil_div(k, b)))
        return {"weight": w, "weight_scale": s}
    if kind == "ct-int8":
        w = _check(_need(read, where, "weight", "the int8 weight"), where("weight"), (n, k), (torch.int8,))
        s = _need(read, where, "weight_scale", f"int8 weight {where('weight')} has no scale")
        s = _scale_to_float32(s, where("weight_scale"))
        if tuple(s.shape) not in ((n, 1), (n,)):
            _check(s, where("weight_scale"), (n, 1))
        if read("weight_zero_point") is not None:
            raise CheckpointError(f"{where('weight_zero_point')}: asymmetric int8 weights are not supported "
                                  f"(quantkit's int8 layers are symmetric)")
        return {"weight": w, "weight_scale": s.reshape(n).contiguous()}
    if kind == "ct-int8-packed":
        packed = _check(_need(read, where, "weight_packed", "the packed weight"), where("weight_packed"),
                        (n, ceil_div(k, 4)), (torch.int32,))
        s = _scale_to_float32(_need(read, where, "weight_scale", "the weight scale"), where("weight_scale"))
        if tuple(s.shape) not in ((n, 1), (n,)):
            _check(s, where("weight_scale"), (n, 1))
        if read("weight_zero_point") is not None:
            raise CheckpointError(f"{where('weight_zero_point')}: asymmetric int8 weights are not supported")
        _check_shape_tensor(read, where, n, k)
        q = (unpack_int32(packed, 8, k) ^ 0x80).view(torch.int8)  # stored - 128
        return {"weight": q, "weight_scale": s.reshape(n).contiguous()}
    if kind == "ct-int4-packed":
        g = layer.group_size
        packed = _check(_need(read, where, "weight_packed", "the packed weight"), where("weight_packed"),
                        (n, k // 8), (torch.int32,))
        s = _check(_need(read, where, "weight_scale", "the group scales"), where("weight_scale"), (n, k // g),
                   FLOAT_DTYPES)
        _check_shape_tensor(read, where, n, k)
        codes = unpack_int32(packed, 4, k)
        zp = read("weight_zero_point")
        if layer.symmetric:
            if zp is not None:
                raise CheckpointError(f"{where('weight_zero_point')}: present but the config says symmetric")
            zero = torch.full((n, k // g), 8, dtype=torch.uint8, device=packed.device)
        else:
            if zp is None:
                raise CheckpointError(f"{where('weight_zero_point')}: missing — asymmetric int4 needs zero-points")
            zp = _check(zp, where("weight_zero_point"), (ceil_div(n, 8), k // g), (torch.int32,))
            zero = _ct_unpack_dim0(zp, 4, n).contiguous()
        _check_trivial_g_idx(read("weight_g_idx"), k, g, where("weight_g_idx"))
        return {"weight_packed": pack_int4(codes), "weight_scale": s.contiguous(), "weight_zero_point": zero}
    if kind in ("gptq", "awq"):
        return _decode_gptq_awq(layout, layer, read, where)
    raise ValueError(kind)


def _check_shape_tensor(read: Reader, where: Locator, n: int, k: int) -> None:
    stored = read("weight_shape")
    if stored is not None and [int(v) for v in stored.reshape(-1).tolist()] != [n, k]:
        raise CheckpointError(f"{where('weight_shape')}: {stored.tolist()} does not match the model (expected "
                              f"{[n, k]})")


def _check_trivial_g_idx(g_idx: torch.Tensor | None, k: int, g: int, where: str) -> None:
    if g_idx is None:
        return
    expected = torch.arange(k, device=g_idx.device) // g
    if tuple(g_idx.shape) != (k,) or not torch.equal(g_idx.to(torch.int64), expected):
        raise CheckpointError(f"{where}: activation-order group indices (act-order / desc_act) are not supported; "
                              f"quantkit's int4 layer needs group i to be columns [i·g, (i+1)·g)")


def _decode_gptq_awq(layout: Layout, layer: QuantizedLinear, read: Reader, where: Locator) -> dict[str, torch.Tensor]:
    n, k, g = layer.out_features, layer.in_features, layer.group_size
    groups = k // g
    scales = _check(_need(read, where, "scales", "the group scales"), where("scales"), (groups, n), FLOAT_DTYPES)
    qzeros = read("qzeros")
    if layout.kind == "gptq":
        qweight = _check(_need(read, where, "qweight", "the packed weight"), where("qweight"), (k // 8, n),
                         (torch.int32,))
        # word (r, c) holds rows 8r..8r+7 of column c: unpack along dim 0
        codes = _ct_unpack_dim0(qweight, 4, k).t()  # [n, k]
        _check_trivial_g_idx(read("g_idx"), k, g, where("g_idx"))
        if qzeros is None:
            raise CheckpointError(f"{where('qzeros')}: missing — GPTQ stores zero-points even when symmetric")
        qzeros = _check(qzeros, where("qzeros"), (groups, ceil_div(n, 8)), (torch.int32,))
        zero = unpack_int32(qzeros, 4, n).to(torch.int16) + layout.zero_offset  # [groups, n]
        if int(zero.max()) > 15:
            raise CheckpointError(f"{where('qzeros')}: a stored zero-point of 15 means 16 in the GPTQ v1 convention "
                                  f"(zero - 1 stored), which a 4-bit zero-point cannot hold")
    else:
        qweight = _check(_need(read, where, "qweight", "the packed weight"), where("qweight"), (k, n // 8),
                         (torch.int32,))
        order = torch.tensor(AWQ_NIBBLE_OF_COLUMN, device=qweight.device)
        col = torch.arange(n, device=qweight.device)
        perm = (col // 8) * 8 + order[col % 8]
        codes = unpack_int32(qweight, 4, n)[:, perm].t()  # [n, k]
        if qzeros is None:
            zero = torch.full((groups, n), 8, dtype=torch.int16, device=qweight.device)
        else:
            qzeros = _check(qzeros, where("qzeros"), (groups, n // 8), (torch.int32,))
            zero = unpack_int32(qzeros, 4, n)[:, perm].to(torch.int16)
    zero = zero.t().to(torch.uint8).contiguous()  # [n, groups]
    if layer.symmetric and not bool((zero == 8).all()):
        raise CheckpointError(f"{where('qzeros')}: the config says symmetric but the zero-points are not all 8")
    return {"weight_packed": pack_int4(codes.to(torch.uint8).contiguous()), "weight_scale": scales.t().contiguous(),
            "weight_zero_point": zero}


# -- quantization_config: write -----------------------------------------------------------------
def _ct_args(num_bits: int, type_: str, strategy: str, **extra: Any) -> dict[str, Any]:
    args = {"num_bits": num_bits, "type": type_, "symmetric": True, "group_size": None, "strategy": strategy,
            "block_structure": None, "dynamic": False, "actorder": None, "observer": None, "observer_kwargs": {}}
    args.update(extra)
    return args


def ct_scheme(recipe: Recipe) -> tuple[str, dict[str, Any]]:
    """(compression format, scheme without targets) for a recipe, as compressed-tensors writes them."""
    if isinstance(recipe, Fp8Block):
        weights = _ct_args(8, "float", "block", block_structure=[recipe.block_size, recipe.block_size])
        acts = _ct_args(8, "float", "group", group_size=recipe.block_size, dynamic=True)
        return "float-quantized", {"weights": weights, "input_activations": acts}
    if isinstance(recipe, Int8Dynamic):
        acts = _ct_args(8, "int", "token", dynamic=True)
        return "int-quantized", {"weights": _ct_args(8, "int", "channel"), "input_activations": acts}
    if isinstance(recipe, Int8WeightOnly):
        return "pack-quantized", {"weights": _ct_args(8, "int", "channel"), "input_activations": None}
    if isinstance(recipe, Int4WeightOnly):
        weights = _ct_args(4, "int", "group", group_size=recipe.group_size, symmetric=recipe.symmetric)
        return "pack-quantized", {"weights": weights, "input_activations": None}
    raise TypeError(f"no compressed-tensors scheme for {recipe}")


def build_quantization_config(fmt: str, modules: Mapping[str, Recipe], unquantized_linear: list[str],
                              class_target: bool) -> dict[str, Any] | None:
    """The ``quantization_config`` for a checkpoint whose quantized modules are ``modules``.

    ``unquantized_linear``: the Linear modules kept in high precision (compressed-tensors ``ignore``,
    DeepSeek / HF ``modules_to_not_convert``). ``class_target``: with one recipe, target the
    ``Linear`` class (as llm-compressor writes it) rather than listing every module by name.
    Returns None when nothing is quantized.
    """
    if not modules:
        return None
    fp8_formats = {r.scale_fmt for r in modules.values() if isinstance(r, Fp8Block)}
    if len(fp8_formats) > 1:
        raise ValueError("one checkpoint holds one fp8 scale_fmt; the model mixes ue8m0 and float scales")
    scale_fmt = next(iter(fp8_formats), None)
    ignore = sorted(unquantized_linear)
    if fmt == HF_FP8_FORMAT:
        bad = [name for name, r in modules.items() if not isinstance(r, Fp8Block)]
        if bad:
            raise ValueError(f"format 'fp8' stores fp8-block layers only, but {bad[0]} is {modules[bad[0]].name}; "
                             f"use format='compressed-tensors'")
        block = next(iter(modules.values())).block_size
        config = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                  "weight_block_size": [block, block], "modules_to_not_convert": ignore}
        if scale_fmt:
            config["scale_fmt"] = scale_fmt
        return config
    if fmt != CT_FORMAT:
        raise ValueError(f"unknown checkpoint format {fmt!r}; choose one of {', '.join(FORMATS)}")
    by_recipe: dict[Recipe, list[str]] = {}
    for name, recipe in modules.items():
        by_recipe.setdefault(recipe, []).append(name)
    groups: dict[str, Any] = {}
    formats = set()
    single = len(by_recipe) == 1
    for i, (recipe, names) in enumerate(sorted(by_recipe.items(), key=lambda kv: (str(kv[0]), kv[1]))):
        compression, scheme = ct_scheme(recipe)
        formats.add(compression)
        targets = ["Linear"] if single and class_target else sorted(names)
        groups[f"group_{i}"] = {"targets": targets, **scheme, "output_activations": None, "format": compression}
    config: dict[str, Any] = {
        "quant_method": "compressed-tensors",
        "format": formats.pop() if len(formats) == 1 else "mixed-precision",
        "quantization_status": "compressed",
        "config_groups": groups,
        "ignore": ignore,
        "kv_cache_scheme": None,
        "global_compression_ratio": None,
    }
    if scale_fmt:
        # compressed-tensors has no field for power-of-two scales; it ignores unknown top-level keys
        config["scale_fmt"] = scale_fmt
    return config


# -- quantization_config: read ------------------------------------------------------------------
SUPPORTED_METHODS = ("compressed-tensors", "fp8", "gptq", "awq")


class SchemeResolver:
    """Answers, for a module of a checkpoint, which layout (if any) its tensors are stored in."""

    def __init__(self, method: str | None, where: str) -> None:
        self.method = method
        self.where = where

    @staticmethod
    def from_config(qconfig: Mapping[str, Any] | None, where: str) -> "SchemeResolver":
        if not qconfig:
            return SchemeResolver(None, where)
        if not isinstance(qconfig, Mapping):
            raise CheckpointError(f"{where}: quantization_config must be an object")
        method = qconfig.get("quant_method")
        if method == "compressed-tensors":
            return _CTResolver(qconfig, where)
        if method == "fp8":
            return _HFFp8Resolver(qconfig, where)
        if method in ("gptq", "awq"):
            return _GptqAwqResolver(qconfig, where)
        raise CheckpointError(f"{where}: quantization_config.quant_method {method!r} is not one quantkit reads "
                              f"(supported: {', '.join(SUPPORTED_METHODS)})")

    @property
    def quantized(self) -> bool:
        return self.method is not None

    def layout_for(self, module: str, is_linear: bool, dtype_of: Callable[[str], "torch.dtype | None"],
                   where: Locator) -> Layout | None:
        """The layout ``module``'s tensors are in, or None for a high-precision (or absent) module.

        ``module`` is the model's name for it (what quantization_config's targets and ignore list match);
        ``dtype_of(suffix)`` gives the stored dtype of its tensor ``suffix`` (None if absent).
        """
        weight = dtype_of("weight")
        if weight in (FP8, torch.int8) and is_linear:
            raise CheckpointError(f"{where('weight')}: a {str(weight).replace('torch.', '')} weight but config.json "
                                  f"has no quantization_config that says how to read it")
        return None


def _strategy(args: Mapping[str, Any]) -> str:
    strategy = args.get("strategy")
    if strategy:
        return str(strategy).lower()
    group = args.get("group_size")
    return "tensor" if group is None else ("channel" if group == -1 else "group")


def _describe(args: Mapping[str, Any] | None) -> str:
    if not args:
        return "none"
    return (f"{args.get('type', 'int')}{args.get('num_bits', 8)} {_strategy(args)}"
            f"{' group_size=' + str(args.get('group_size')) if _strategy(args) == 'group' else ''}"
            f"{' dynamic' if args.get('dynamic') else ''}{'' if args.get('symmetric', True) else ' asymmetric'}")


class _CTResolver(SchemeResolver):
    def __init__(self, qconfig: Mapping[str, Any], where: str) -> None:
        super().__init__("compressed-tensors", where)
        top_format = qconfig.get("format", "dense")
        if qconfig.get("sparsity_config"):
            raise CheckpointError(f"{where}: sparse compressed-tensors checkpoints are not supported")
        scale_fmt = qconfig.get("scale_fmt")
        if scale_fmt not in (None, "float", "ue8m0"):
            raise CheckpointError(f"{where}: quantization_config.scale_fmt {scale_fmt!r} must be 'ue8m0' or absent")
        groups = qconfig.get("config_groups")
        if not isinstance(groups, Mapping) or not groups:
            raise CheckpointError(f"{where}: compressed-tensors quantization_config has no config_groups")
        self.ignore = list(qconfig.get("ignore") or [])
        self.groups: list[tuple[str, list[str], Layout | CheckpointError]] = []
        for name, scheme in groups.items():
            if not isinstance(scheme, Mapping) or "targets" not in scheme:
                raise CheckpointError(f"{where}: config group {name!r} must be an object with 'targets' (preset "
                                      f"names are not supported)")
            fmt = scheme.get("format") or top_format
            try:
                layout = self._layout(name, scheme, fmt, None if scale_fmt == "float" else scale_fmt)
            except CheckpointError as exc:
                layout = exc  # raised only if a module of the checkpoint uses this group
            self.groups.append((name, list(scheme["targets"]), layout))

    def _layout(self, group: str, scheme: Mapping[str, Any], fmt: str, scale_fmt: str | None) -> Layout:
        w, a = scheme.get("weights"), scheme.get("input_activations")
        if scheme.get("output_activations"):
            raise CheckpointError(f"{self.where}: config group {group!r} quantizes output activations, "
                                  f"which quantkit does not support")
        desc = f"config group {group!r} (weights {_describe(w)}, activations {_describe(a)}, format {fmt})"
        unsupported = CheckpointError(
            f"{self.where}: {desc} is not a scheme quantkit has a layer for (supported: fp8 128x128 block weights "
            f"with dynamic fp8 activations; int8 channel weights with dynamic int8 token activations or none; "
            f"int4 group weights (group_size {'/'.join(map(str, INT4_GROUP_SIZES))}) without activations)")
        if fmt == "dense":
            raise CheckpointError(f"{self.where}: {desc}: weights are stored unquantized (format 'dense'); load "
                                  f"the model with transformers, or convert it with quantkit convert")
        if not w:
            raise unsupported
        wtype, bits, strategy, sym = str(w.get("type", "int")).lower(), w.get("num_bits", 8), _strategy(w), \
            w.get("symmetric", True)
        if w.get("dynamic"):
            raise unsupported
        if wtype == "float" and bits == 8 and strategy == "block":
            block = w.get("block_structure")
            if isinstance(block, str):
                block = [int(x) for x in block.split("x")]
            if list(block or []) != [128, 128]:
                raise CheckpointError(f"{self.where}: {desc}: block_structure {block} — quantkit's fp8-block "
                                      f"layer uses 128x128 blocks")
            if not a or str(a.get("type", "int")).lower() != "float" or a.get("num_bits") != 8 or not a.get("dynamic"):
                raise unsupported
            if fmt not in ("float-quantized", "naive-quantized"):
                raise unsupported
            return Layout("ct-fp8-block", Fp8Block(scale_fmt=scale_fmt), scheme=group)
        if wtype == "int" and bits == 8 and strategy == "channel" and sym:
            if a:
                if (str(a.get("type", "int")).lower() != "int" or a.get("num_bits") != 8 or _strategy(a) != "token"
                        or not a.get("dynamic") or not a.get("symmetric", True)):
                    raise unsupported
                if fmt not in ("int-quantized", "naive-quantized"):
                    raise unsupported
                return Layout("ct-int8", Int8Dynamic(), scheme=group)
            if fmt == "pack-quantized":
                return Layout("ct-int8-packed", Int8WeightOnly(), scheme=group)
            if fmt in ("int-quantized", "naive-quantized"):
                return Layout("ct-int8", Int8WeightOnly(), scheme=group)
            raise unsupported
        if wtype == "int" and bits == 4 and strategy == "group" and not a and fmt == "pack-quantized":
            group_size = w.get("group_size")
            if group_size not in INT4_GROUP_SIZES:
                raise unsupported
            if w.get("actorder") not in (None, "weight", "static"):
                raise unsupported
            return Layout("ct-int4-packed", Int4WeightOnly(group_size=group_size, symmetric=bool(sym)), scheme=group)
        raise unsupported

    @staticmethod
    def _match(target: str, name: str, is_linear: bool) -> int:
        """0: no match; 3: exact name; 2: regex; 1: class name (only ``Linear`` is known here)."""
        if target.startswith("re:"):
            return 2 if re.match(target[3:], name) else 0
        if target == name:
            return 3
        return 1 if (target == "Linear" and is_linear) else 0

    def scheme_for(self, module: str, is_linear: bool) -> tuple[str, Layout | CheckpointError] | None:
        if any(self._match(t, module, is_linear) for t in self.ignore):
            return None
        best = None
        for name, targets, layout in self.groups:
            score = max((self._match(t, module, is_linear) for t in targets), default=0)
            if score and (best is None or score > best[0]):
                best = (score, name, layout)
        return None if best is None else (best[1], best[2])

    def layout_for(self, module, is_linear, dtype_of, where):
        found = self.scheme_for(module, is_linear)
        if found is None:
            return super().layout_for(module, is_linear, dtype_of, where)
        group, layout = found
        if isinstance(layout, CheckpointError):
            if dtype_of("weight") is None and dtype_of("weight_packed") is None:
                return None
            raise CheckpointError(f"{where('weight')}: {layout}")
        primary = dtype_of(layout.primary)
        if primary is None:
            weight = dtype_of("weight")
            if weight is None:
                return None  # no tensors at all: tied to another module, or reported as missing later
            raise CheckpointError(f"{where('weight')}: config group {group!r} says this module is stored as "
                                  f"{layout.kind} ({layout.primary}), but the file holds a {weight} weight")
        if layout.primary == "weight" and primary in FLOAT_DTYPES:
            scale = dtype_of("weight_scale")
            raise CheckpointError(f"{where('weight')}: config group {group!r} says this module is quantized, but its "
                                  f"weight is {primary}{'' if scale else ' and it has no weight_scale'}")
        return layout


class _HFFp8Resolver(SchemeResolver):
    def __init__(self, qconfig: Mapping[str, Any], where: str) -> None:
        super().__init__("fp8", where)
        block = qconfig.get("weight_block_size")
        if block is None or list(block) != [128, 128]:
            raise CheckpointError(f"{where}: fp8 quantization_config weight_block_size {block} — quantkit reads "
                                  f"block-wise fp8 with 128x128 blocks (per-tensor fp8 is not supported)")
        if str(qconfig.get("fmt", "e4m3")).lower() != "e4m3":
            raise CheckpointError(f"{where}: fp8 fmt {qconfig.get('fmt')!r} — only e4m3 weights are supported")
        if str(qconfig.get("activation_scheme", "dynamic")).lower() != "dynamic":
            raise CheckpointError(f"{where}: fp8 activation_scheme {qconfig.get('activation_scheme')!r} — only "
                                  f"dynamic activations are supported")
        scale_fmt = qconfig.get("scale_fmt")
        if scale_fmt not in (None, "float", "ue8m0"):
            raise CheckpointError(f"{where}: fp8 scale_fmt {scale_fmt!r} must be 'float' or 'ue8m0'")
        self.layout = Layout("hf-fp8-block", Fp8Block(scale_fmt="ue8m0" if scale_fmt == "ue8m0" else None))
        self.not_converted = list(qconfig.get("modules_to_not_convert") or qconfig.get("ignored_layers") or [])

    def layout_for(self, module, is_linear, dtype_of, where):
        weight = dtype_of("weight")
        if weight == FP8:
            if dtype_of("weight_scale_inv") is None:
                raise CheckpointError(f"{where('weight')}: fp8 weight without its scale {where('weight_scale_inv')}")
            return self.layout
        if dtype_of("weight_scale_inv") is not None and weight is not None:
            raise CheckpointError(f"{where('weight_scale_inv')}: a block scale for a {weight} weight (expected "
                                  f"float8_e4m3fn)")
        return None


class _GptqAwqResolver(SchemeResolver):
    def __init__(self, qconfig: Mapping[str, Any], where: str) -> None:
        method = qconfig["quant_method"]
        super().__init__(method, where)
        bits = qconfig.get("bits", qconfig.get("w_bit", 4))
        group = qconfig.get("group_size", qconfig.get("q_group_size", 128))
        if bits != 4:
            raise CheckpointError(f"{where}: {method} bits={bits} — only 4-bit {method} checkpoints are supported")
        if group not in INT4_GROUP_SIZES:
            raise CheckpointError(f"{where}: {method} group_size={group} — quantkit's int4 layer takes group sizes "
                                  f"{', '.join(map(str, INT4_GROUP_SIZES))}")
        if method == "gptq":
            fmt = qconfig.get("checkpoint_format", "gptq")
            if fmt not in ("gptq", "gptq_v2"):
                raise CheckpointError(f"{where}: gptq checkpoint_format {fmt!r} is not supported (gptq, gptq_v2)")
            # GPTQ v1 stores zero - 1 (a historical quirk); v2 stores the zero-point itself
            self.layout = Layout("gptq", Int4WeightOnly(group_size=group, symmetric=bool(qconfig.get("sym", True))),
                                 zero_offset=1 if fmt == "gptq" else 0)
        else:
            version = str(qconfig.get("version", "gemm")).lower()
            if version != "gemm":
                raise CheckpointError(f"{where}: awq version {version!r} — only the GEMM packing is supported")
            self.layout = Layout("awq", Int4WeightOnly(group_size=group,
                                                       symmetric=not qconfig.get("zero_point", True)))

    def layout_for(self, module, is_linear, dtype_of, where):
        if dtype_of("qweight") is not None:
            return self.layout
        return super().layout_for(module, is_linear, dtype_of, where)
