"""A Llama-3-8B-shaped decoder built from ``nn.Linear`` layers, with a static KV cache.

Shapes follow Llama-3-8B (hidden 4096, 32 query heads and 8 key/value heads of 128, SwiGLU MLP of
14336, RMSNorm, RoPE θ = 500000, vocabulary 128256, 32 layers) and module names follow Hugging Face's
``LlamaForCausalLM`` without the ``model.`` prefix (``layers.3.self_attn.q_proj``, ``lm_head``), so
``quantize_`` patterns written for real checkpoints apply unchanged. Weights are random — speed does
not depend on their values — and are drawn on the target device so an 8B model is ready in a second.

Two attention paths:

* ``forward(tokens)`` (``input_pos`` None) is a prefill from position 0: causal attention over the
  fresh keys/values (``is_causal=True``, so the flash kernel runs), written into the cache when one is
  set up. It never reads the cache, which makes it the reference the cached path is tested against.
* ``forward(tokens, input_pos)`` writes the new keys/values at ``input_pos`` (a [T] tensor, the same
  positions for every sequence of the batch) with ``index_copy_`` and attends over the whole static
  cache with a mask ``s <= input_pos[t]``. Shapes never depend on the position, so a decode step can be
  captured once in a CUDA graph and replayed with new contents in its input buffers. The G = heads /
  kv_heads query heads that share a key/value head are folded into the query-length dimension
  ([B, KV, G·T, D] against [B, KV, S, D]), so the cache is read once per key/value head and never
  repeated G times.

The elementwise work between the linear layers (RMSNorm with its residual add, RoPE, SiLU·up) goes through a
:class:`Glue` of plain functions; ``fuse_glue()`` swaps in their ``torch.compile``'d versions, so
that on a GPU a decode step is the linear layers, attention and a few fused kernels per layer.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import asdict, dataclass, replace
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class DecoderConfig:
    vocab_size: int = 128256
    hidden_size: int = 4096
    intermediate_size: int = 14336
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 8
    head_dim: int = 128
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 8192  # length of the RoPE tables

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "n_layers", "n_heads", "n_kv_heads",
                     "head_dim", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"DecoderConfig.{name} must be positive, got {getattr(self, name)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even (RoPE rotates pairs)")

    @classmethod
    def preset(cls, name: str, **overrides) -> "DecoderConfig":
        if name not in PRESETS:
            raise ValueError(f"unknown decoder preset {name!r}; choose one of {', '.join(PRESETS)}")
        return replace(PRESETS[name], **overrides)

    def to_dict(self) -> dict:
        return asdict(self)

    def linear_params(self) -> int:
        """Parameters in the nn.Linear layers (decoder layers + lm_head)."""
        d, h = self.hidden_size, self.head_dim
        attn = d * h * (2 * self.n_heads + 2 * self.n_kv_heads)
        mlp = 3 * d * self.intermediate_size
        return self.n_layers * (attn + mlp) + d * self.vocab_size


PRESETS = {
    "llama3-8b": DecoderConfig(),
    # Small enough for CPU tests; int4 group 128 still divides every in_features.
    "tiny": DecoderConfig(vocab_size=512, hidden_size=128, intermediate_size=256, n_layers=2, n_heads=4,
                          n_kv_heads=2, head_dim=32, max_seq_len=512),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, dtype=None, device=None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rope_tables(max_seq_len: int, head_dim: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin float32 [max_seq_len, head_dim] in the half-split layout (rotate_half), as Hugging Face's."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim))
    angles = torch.arange(max_seq_len, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, heads, D]; cos/sin [T, D]."""
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return (xf * cos[None, :, None, :] + rotated * sin[None, :, None, :]).to(x.dtype)


# ----------------------------------------------------------------------------- glue
# The elementwise work between the linear layers. Eager, each function is 5-10 small kernels; in a
# decode step (a few µs per kernel even inside a CUDA graph) that adds ~3 ms to every 8B decode step,
# as much as reading half the bf16 weights, and would hide what the quantized linears gain. So on a GPU
# each function is compiled once (torch.compile, one fused kernel each) and shared by every model and
# recipe; the linear layers themselves always run eagerly, as a user calls them.
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Hugging Face's LlamaRMSNorm: normalize in float32, cast back, then scale."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float):
    """(x + delta, rms_norm(x + delta)): a residual add and the norm that follows it."""
    h = x + delta
    return h, rms_norm(h, weight, eps)


def rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


@dataclass(frozen=True)
class Glue:
    rms_norm: Callable = rms_norm
    add_rms_norm: Callable = add_rms_norm
    rope_qk: Callable = rope_qk
    silu_mul: Callable = silu_mul


EAGER_GLUE = Glue()


@functools.lru_cache(maxsize=None)
def compiled_glue() -> Glue:
    """The glue functions under ``torch.compile`` (created once per process, so Inductor compiles each
    function for a static shape, then at most once more with dynamic shapes, for all models)."""
    # Each glue function sees ~6 shapes in a benchmark run (prefill 2048, prompt and decode at batch 1
    # and 16, with size-1 dims specialized by dynamo), more than dynamo's default of 8 recompiles
    # allows once the check call and both batch sizes are counted; a benchmark process may raise it.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return Glue(**{f.name: torch.compile(getattr(EAGER_GLUE, f.name), fullgraph=True)
                   for f in dataclasses.fields(Glue)})


def compiled_glue_error(device, dtype: torch.dtype = torch.bfloat16) -> str | None:
    """Run every compiled glue function once on small tensors; why they cannot run here, or None."""
    try:
        glue = compiled_glue()
        x = torch.randn(1, 2, 256, device=device, dtype=dtype)
        w = torch.ones(256, device=device, dtype=dtype)
        cos, sin = (t.to(device) for t in rope_tables(2, 64, 10000.0))
        glue.rms_norm(x, w, 1e-5)
        glue.add_rms_norm(x, x, w, 1e-5)
        glue.rope_qk(x.view(1, 2, 4, 64), x.view(1, 2, 4, 64), cos, sin)
        glue.silu_mul(x, x)
    except Exception as exc:  # noqa: BLE001 - Inductor missing or broken: the caller falls back to eager
        return f"{exc.__class__.__name__}: {str(exc)[:300]}"
    return None


class KVCache(nn.Module):
    """Keys and values of every position so far: [batch, kv_heads, max_seq, head_dim] each."""

    def __init__(self, batch: int, n_kv_heads: int, max_seq: int, head_dim: int, dtype, device) -> None:
        super().__init__()
        shape = (batch, n_kv_heads, max_seq, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)


class Attention(nn.Module):
    def __init__(self, cfg: DecoderConfig, dtype=None, device=None) -> None:
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, hd
        self.q_proj = nn.Linear(d, cfg.n_heads * hd, bias=False, dtype=dtype, device=device)
        self.k_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=False, dtype=dtype, device=device)
        self.v_proj = nn.Linear(d, cfg.n_kv_heads * hd, bias=False, dtype=dtype, device=device)
        self.o_proj = nn.Linear(cfg.n_heads * hd, d, bias=False, dtype=dtype, device=device)
        self.kv_cache: KVCache | None = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, input_pos: torch.Tensor | None,
                mask: torch.Tensor | None, glue: Glue = EAGER_GLUE) -> torch.Tensor:
        b, t, _ = x.shape
        h, kvh, hd = self.n_heads, self.n_kv_heads, self.head_dim
        q, k = glue.rope_qk(self.q_proj(x).view(b, t, h, hd), self.k_proj(x).view(b, t, kvh, hd), cos, sin)
        k = k.transpose(1, 2)
        v = self.v_proj(x).view(b, t, kvh, hd).transpose(1, 2)
        cache = self.kv_cache
        if input_pos is None:
            if cache is not None:
                _check_batch(cache, b)
                cache.k[:, :, :t].copy_(k)
                cache.v[:, :, :t].copy_(v)
            # Key/value head j serves query heads j*G .. j*G+G-1 (Hugging Face's repeat_kv); expanding the
            # T fresh positions (not the cache) keeps the flash kernel, which wants equal head counts.
            g = h // kvh
            k = k[:, :, None].expand(b, kvh, g, t, hd).reshape(b, h, t, hd)
            v = v[:, :, None].expand(b, kvh, g, t, hd).reshape(b, h, t, hd)
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, is_causal=True).transpose(1, 2)
        else:
            if cache is None:
                raise RuntimeError("Decoder: forward with input_pos needs a KV cache; call setup_cache() first")
            _check_batch(cache, b)
            cache.k.index_copy_(2, input_pos, k)
            cache.v.index_copy_(2, input_pos, v)
            g = h // kvh
            # [B, T, KV, G, D] -> [B, KV, G*T, D]: row g*T + t is query head kv*G + g at position t.
            qg = q.view(b, t, kvh, g, hd).permute(0, 2, 3, 1, 4).reshape(b, kvh, g * t, hd)
            out = F.scaled_dot_product_attention(qg, cache.k, cache.v, attn_mask=mask)
            out = out.view(b, kvh, g, t, hd).permute(0, 3, 1, 2, 4)
        return self.o_proj(out.reshape(b, t, h * hd))


def _check_batch(cache: KVCache, batch: int) -> None:
    if cache.k.shape[0] != batch:
        raise ValueError(f"Decoder: input batch {batch} does not match the KV cache's batch {cache.k.shape[0]}; "
                         f"call setup_cache(batch={batch}, ...)")


class MLP(nn.Module):
    def __init__(self, cfg: DecoderConfig, dtype=None, device=None) -> None:
        super().__init__()
        d, i = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(d, i, bias=False, dtype=dtype, device=device)
        self.up_proj = nn.Linear(d, i, bias=False, dtype=dtype, device=device)
        self.down_proj = nn.Linear(i, d, bias=False, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, glue: Glue = EAGER_GLUE) -> torch.Tensor:
        return self.down_proj(glue.silu_mul(self.gate_proj(x), self.up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig, dtype=None, device=None) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.norm_eps, dtype, device)
        self.self_attn = Attention(cfg, dtype, device)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.norm_eps, dtype, device)
        self.mlp = MLP(cfg, dtype, device)

    def forward(self, x, cos, sin, input_pos, mask, glue: Glue = EAGER_GLUE):
        norm1, norm2 = self.input_layernorm, self.post_attention_layernorm
        attn = self.self_attn(glue.rms_norm(x, norm1.weight, norm1.eps), cos, sin, input_pos, mask, glue)
        h, normed = glue.add_rms_norm(x, attn, norm2.weight, norm2.eps)
        return h + self.mlp(normed, glue)


class Decoder(nn.Module):
    """Token ids [B, T] -> logits [B, T, vocab] (or [B, 1, vocab] with ``last_only``)."""

    def __init__(self, cfg: DecoderConfig, dtype=None, device=None) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, dtype=dtype, device=device)
        self.layers = nn.ModuleList(DecoderLayer(cfg, dtype, device) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps, dtype, device)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, dtype=dtype, device=device)
        self.register_buffer("rope_cos", torch.empty(cfg.max_seq_len, cfg.head_dim, device=device), persistent=False)
        self.register_buffer("rope_sin", torch.empty(cfg.max_seq_len, cfg.head_dim, device=device), persistent=False)
        self.register_buffer("cache_positions", torch.empty(0, dtype=torch.long, device=device), persistent=False)
        self.glue = EAGER_GLUE
        if self.rope_cos.device.type != "meta":
            self.reset_rope()

    def fuse_glue(self, enabled: bool = True) -> "Decoder":
        """Run the elementwise work between linear layers as compiled, fused functions (see ``Glue``).
        Check :func:`compiled_glue_error` first where Inductor may be unavailable."""
        self.glue = compiled_glue() if enabled else EAGER_GLUE
        return self

    def reset_rope(self) -> None:
        cfg = self.config
        cos, sin = rope_tables(cfg.max_seq_len, cfg.head_dim, cfg.rope_theta, device=self.rope_cos.device)
        self.rope_cos, self.rope_sin = cos, sin

    @property
    def cache_len(self) -> int:
        return self.cache_positions.numel()

    def setup_cache(self, batch: int, max_seq: int, dtype: torch.dtype | None = None) -> None:
        """Allocate a zeroed static KV cache for ``batch`` sequences of up to ``max_seq`` tokens."""
        cfg = self.config
        if max_seq > cfg.max_seq_len:
            raise ValueError(f"max_seq={max_seq} exceeds the RoPE table length max_seq_len={cfg.max_seq_len}")
        device = self.rope_cos.device
        dtype = dtype or self.embed_tokens.weight.dtype
        for layer in self.layers:
            layer.self_attn.kv_cache = KVCache(batch, cfg.n_kv_heads, max_seq, cfg.head_dim, dtype, device)
        self.cache_positions = torch.arange(max_seq, device=device)

    def free_cache(self) -> None:
        for layer in self.layers:
            layer.self_attn.kv_cache = None
        self.cache_positions = self.cache_positions.new_empty(0)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None,
                last_only: bool = False) -> torch.Tensor:
        t = tokens.shape[1]
        if input_pos is None:
            if t > self.config.max_seq_len:
                raise ValueError(f"{t} tokens exceed max_seq_len={self.config.max_seq_len}")
            if self.cache_len and t > self.cache_len:
                raise ValueError(f"prefill of {t} tokens does not fit the KV cache of {self.cache_len}")
            cos, sin = self.rope_cos[:t], self.rope_sin[:t]
            mask = None
        else:
            if not self.cache_len:
                raise RuntimeError("Decoder: forward with input_pos needs a KV cache; call setup_cache() first")
            cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]
            g = self.config.n_heads // self.config.n_kv_heads
            # Additive, in the model dtype, built once per forward (a bool mask is converted in every layer).
            visible = (self.cache_positions[None, :] <= input_pos[:, None]).repeat(g, 1)
            mask = torch.zeros(visible.shape, dtype=self.embed_tokens.weight.dtype, device=tokens.device)
            mask.masked_fill_(~visible, -math.inf)
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, input_pos, mask, self.glue)
        x = self.glue.rms_norm(x, self.norm.weight, self.norm.eps)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(x)


def build_decoder(cfg: DecoderConfig, device="cpu", dtype: torch.dtype = torch.bfloat16, seed: int = 0,
                  std: float = 0.02) -> Decoder:
    """A decoder with weights ~ N(0, std²) drawn on ``device`` (norm weights 1); the same ``seed`` gives the
    same weights, so a model can be rebuilt instead of copied."""
    device = torch.device(device)
    with torch.device("meta"):
        model = Decoder(cfg, dtype=dtype)
    model.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "norm.weight":
                p.fill_(1.0)
            else:
                p.normal_(0.0, std, generator=generator)
    model.reset_rope()
    model.cache_positions = torch.empty(0, dtype=torch.long, device=device)
    return model.eval().requires_grad_(False)


def round_up(n: int, multiple: int) -> int:
    return int(math.ceil(n / multiple) * multiple)
