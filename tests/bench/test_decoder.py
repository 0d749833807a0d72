"""The benchmark decoder: Llama's numerics, a KV cache that gives the same logits as a full forward, and
every recipe within its measured error bound."""
import copy

import pytest
import torch

from quantkit import quantize_
from quantkit.bench.decoder import Decoder, DecoderConfig, build_decoder
from tests.helpers import rel_error

TINY = DecoderConfig.preset("tiny")
RECIPES = ["fp8-block", "int8-dynamic", "int8-weight-only", "int4-weight-only"]

# ‖logits − fp32 logits‖/‖fp32 logits‖ of the tiny bf16 decoder (2 layers + lm_head, all quantized),
# worst over 12 seeds: bf16 0.0056, fp8-block 0.073, int8-dynamic 0.020, int8-weight-only 0.015,
# int4-weight-only 0.226. Bounds are ~1.4x that.
MODEL_ERROR_BOUND = {None: 0.008, "fp8-block": 0.10, "int8-dynamic": 0.03, "int8-weight-only": 0.022,
                     "int4-weight-only": 0.32}
# Cached decode vs full forward of the same bf16 model, worst over 8 seeds: 0.0045 (bf16 and weight-only);
# dynamic activation quantization turns the two attention paths' bf16 rounding into code flips:
# int8-dynamic 0.012, fp8-block 0.033. A wrong cache gives errors of order 1.
CACHE_BOUND = {None: 0.01, "fp8-block": 0.06, "int8-dynamic": 0.025, "int8-weight-only": 0.01,
               "int4-weight-only": 0.01}


def _decode_logits(model: Decoder, tokens: torch.Tensor, prefill: int) -> torch.Tensor:
    """Prefill tokens[:, :prefill], then one cached decode step per remaining token."""
    model.setup_cache(tokens.shape[0], 64)
    model(tokens[:, :prefill])
    steps = [model(tokens[:, i:i + 1], torch.tensor([i]))[:, 0] for i in range(prefill, tokens.shape[1])]
    return torch.stack(steps, dim=1)


@torch.no_grad()
def test_cached_decode_matches_full_forward_fp32():
    model = build_decoder(TINY, dtype=torch.float32, seed=3)
    tokens = torch.randint(0, TINY.vocab_size, (2, 16))
    full = model(tokens)
    decoded = _decode_logits(model, tokens, prefill=7)
    assert rel_error(decoded, full[:, 7:]) < 1e-5
    # A chunk of several tokens at a non-zero position takes the masked path too.
    model.setup_cache(2, 64)
    model(tokens[:, :5])
    chunk = model(tokens[:, 5:11], torch.arange(5, 11))
    assert rel_error(chunk, full[:, 5:11]) < 1e-5
    last = model(tokens[:, 11:], torch.arange(11, 16), last_only=True)
    assert last.shape == (2, 1, TINY.vocab_size)
    assert rel_error(last, full[:, -1:]) < 1e-5


@torch.no_grad()
def test_decode_reads_the_cache():
    """The equality above must come from the cache: spoil one layer's cached keys and it breaks."""
    model = build_decoder(TINY, dtype=torch.float32, seed=4)
    tokens = torch.randint(0, TINY.vocab_size, (1, 10))
    full = model(tokens)
    model.setup_cache(1, 64)
    model(tokens[:, :9])
    model.layers[0].self_attn.kv_cache.k[:, :, 3].normal_()
    spoiled = model(tokens[:, 9:], torch.tensor([9]))
    assert rel_error(spoiled, full[:, 9:]) > 1e-2


@pytest.mark.slow
@torch.no_grad()
def test_matches_transformers_llama():
    """Same weights, same logits as Hugging Face's LlamaForCausalLM: RoPE, GQA head order, RMSNorm, SwiGLU."""
    transformers = pytest.importorskip("transformers")
    cfg = TINY
    hf_config = transformers.LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim, rope_theta=cfg.rope_theta, rms_norm_eps=cfg.norm_eps,
        max_position_embeddings=cfg.max_seq_len, tie_word_embeddings=False)
    hf = transformers.LlamaForCausalLM(hf_config).float().eval()
    model = build_decoder(cfg, dtype=torch.float32, seed=5)
    state = {(k if k.startswith("lm_head") else "model." + k): v for k, v in model.state_dict().items()}
    hf.load_state_dict(state, strict=True)
    tokens = torch.randint(0, cfg.vocab_size, (2, 12))
    assert rel_error(model(tokens), hf(tokens).logits) < 1e-5


@pytest.mark.parametrize("recipe", [None, *RECIPES])
@torch.no_grad()
def test_recipe_within_bound_and_cache_consistent(recipe):
    base = build_decoder(TINY, dtype=torch.bfloat16, seed=6)
    tokens = torch.randint(0, TINY.vocab_size, (2, 16))
    reference = copy.deepcopy(base).float()(tokens)
    model = base
    if recipe is not None:
        report = quantize_(model, recipe)
        assert len(report.quantized) == 7 * TINY.n_layers + 1  # every projection and the lm_head
    full = model(tokens)
    err = rel_error(full, reference)
    assert err < MODEL_ERROR_BOUND[recipe], f"{recipe}: error {err:.4f} vs fp32"
    if recipe is not None:
        assert err > MODEL_ERROR_BOUND[None] / 4, "the quantized model is as exact as bf16: did it quantize?"
    decoded = _decode_logits(model, tokens, prefill=8)
    assert rel_error(decoded, full[:, 8:]) < CACHE_BOUND[recipe]


def test_build_is_seeded_and_scaled():
    a = build_decoder(TINY, dtype=torch.float32, seed=1)
    b = build_decoder(TINY, dtype=torch.float32, seed=1)
    c = build_decoder(TINY, dtype=torch.float32, seed=2)
    wa, wb, wc = (m.layers[1].mlp.down_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    assert abs(wa.std().item() - 0.02) < 0.002
    assert torch.equal(a.norm.weight, torch.ones(TINY.hidden_size))
    assert not any(p.requires_grad for p in a.parameters())


def test_llama3_8b_shapes():
    cfg = DecoderConfig.preset("llama3-8b")
    with torch.device("meta"):
        model = Decoder(cfg, dtype=torch.bfloat16)
    attn, mlp = model.layers[0].self_attn, model.layers[0].mlp
    assert (attn.q_proj.out_features, attn.k_proj.out_features, attn.o_proj.in_features) == (4096, 1024, 4096)
    assert (mlp.gate_proj.out_features, mlp.down_proj.in_features) == (14336, 14336)
    assert len(model.layers) == 32 and model.lm_head.out_features == 128256
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert linear == cfg.linear_params() == 7_504_658_432


@torch.no_grad()
def test_errors_name_the_problem():
    model = build_decoder(TINY, dtype=torch.float32)
    with pytest.raises(RuntimeError, match="setup_cache"):
        model(torch.zeros(1, 1, dtype=torch.long), torch.tensor([0]))
    model.setup_cache(2, 64)
    with pytest.raises(ValueError, match="batch"):
        model(torch.zeros(1, 1, dtype=torch.long), torch.tensor([0]))
    with pytest.raises(ValueError, match="KV cache"):
        model(torch.zeros(2, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="max_seq_len"):
        model.setup_cache(1, TINY.max_seq_len + 1)
    with pytest.raises(ValueError, match="n_kv_heads"):
        DecoderConfig.preset("tiny", n_kv_heads=3)
