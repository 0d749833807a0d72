"""The end-to-end benchmark runs whole on a tiny decoder on the CPU; on a GPU its CUDA-graph decode gives
the same tokens as eager decoding, for bf16 and every recipe."""
import copy

import pytest
import torch

from quantkit import quantize_
from quantkit.bench import common, e2e
from quantkit.bench.decoder import DecoderConfig, build_decoder, compiled_glue_error
from quantkit.bench.e2e import E2EConfig, Step, run_e2e, to_markdown
from tests.helpers import rel_error

RECIPES = ["fp8-block", "int8-dynamic", "int8-weight-only", "int4-weight-only"]
# Last-token logits vs bf16 over 2 layers + lm_head (see test_decoder's measured bounds, taken vs fp32).
LOGITS_BOUND = {"fp8-block": 0.12, "int8-dynamic": 0.04, "int8-weight-only": 0.03, "int4-weight-only": 0.35}


def _tiny(**overrides):
    kwargs = dict(preset="tiny", recipes=RECIPES, device="cpu", prefill_len=24, prefill_reps=2,
                  decode_batches=[1, 2], prompt_len=4, decode_steps=3)
    kwargs.update(overrides)
    return E2EConfig(**kwargs)


@pytest.fixture(scope="module")
def result():
    torch.set_num_threads(1)
    return run_e2e(_tiny(), log=lambda _: None, argv=["quantkit", "bench", "e2e", "--preset", "tiny"])


def test_rows(result):
    rows = result["rows"]
    assert [r["method"] for r in rows] == ["bf16", *RECIPES]
    base = rows[0]
    assert base["prefill_speedup"] == 1.0 and base["decode_b1_speedup"] == 1.0 and base["linear_ratio"] == 1.0
    n_linear = 7 * 2 + 1
    for r in rows:
        assert "error" not in r, r
        assert r["mode"] == "eager"  # no CUDA graphs on a CPU
        assert r["prefill_tok_s"] == pytest.approx(24 / (r["prefill_ms"] * 1e-3))
        for b in (1, 2):
            assert r[f"decode_b{b}_tok_s"] == pytest.approx(b / (r[f"decode_b{b}_ms_per_step"] * 1e-3))
            assert r[f"decode_b{b}_speedup"] == pytest.approx(r[f"decode_b{b}_tok_s"] / base[f"decode_b{b}_tok_s"])
        assert r["bf16_linear_bytes"] == base["linear_bytes"]
        if r["method"] != "bf16":
            assert r["backend"] == "reference" and r["quantized_modules"] == n_linear
            assert 0 < r["logits_rel_err"] < LOGITS_BOUND[r["method"]], r
    ratio = {r["method"]: r["linear_ratio"] for r in rows}
    # codes + scales: int4 0.5 + 3/128 bytes a weight, int8 1 + 4/128 (per-channel fp32 scale at K=128)
    assert ratio["int4-weight-only"] == pytest.approx((0.5 + 3 / 128) / 2, rel=0.02)
    assert ratio["int8-weight-only"] == pytest.approx(ratio["int8-dynamic"])
    assert 0.5 <= ratio["int8-weight-only"] < 0.52 and 0.5 <= ratio["fp8-block"] < 0.51


def test_keep_lm_head_in_bf16():
    out = run_e2e(_tiny(recipes=["int4-weight-only"], decode_batches=[1], decode_steps=2), log=lambda _: None)
    small = out["rows"][1]["linear_bytes"]
    out = run_e2e(_tiny(recipes=["int4-weight-only"], decode_batches=[1], decode_steps=2, quantize_lm_head=False),
                  log=lambda _: None)
    row = out["rows"][1]
    assert row["skipped_modules"] == ["lm_head"] and row["quantized_modules"] == 14
    cfg = DecoderConfig.preset("tiny")
    lm_head_bytes = cfg.hidden_size * cfg.vocab_size
    assert row["linear_bytes"] - small == pytest.approx(2 * lm_head_bytes - (0.5 + 3 / 128) * lm_head_bytes)


def test_markdown_json_and_plot(result, tmp_path):
    md = to_markdown(result)
    assert "- Command: `quantkit bench e2e --preset tiny`" in md
    assert "| method | backend | mode | prefill tok/s | × bf16 | decode b1 tok/s | × bf16 | decode b2 tok/s |" in md
    body = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| method")
            and not line.startswith("| ---")]
    assert [line.split(" | ")[0][2:] for line in body] == ["bf16", *RECIPES]
    assert all(line.count("|") == 15 for line in body)
    data = common.read_json(common.write_json(tmp_path / "e2e.json", result))
    assert data["kind"] == e2e.KIND and data["settings"]["config"]["n_layers"] == 2
    cols = e2e.ratio_columns(data)
    assert list(cols) == ["prefill 24 tok", "decode batch 1", "decode batch 2", "linear weight bytes"]
    pytest.importorskip("matplotlib")
    from quantkit.bench.plot import plot_result

    assert plot_result(data, tmp_path / "e2e.png").read_bytes()[:4] == b"\x89PNG"


def test_a_failing_recipe_keeps_the_others(monkeypatch):
    from quantkit.layers import Int8DynamicLinear

    def boom(self, x):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(Int8DynamicLinear, "forward", boom)
    out = run_e2e(_tiny(recipes=["int8-dynamic", "int8-weight-only"], decode_batches=[1], decode_steps=2),
                  log=lambda _: None)
    by = {r["method"]: r for r in out["rows"]}
    assert "kernel exploded" in by["int8-dynamic"]["error"] and by["int8-weight-only"]["decode_b1_tok_s"] > 0
    assert "failed" in to_markdown(out)


# --------------------------------------------------------------------------- GPU
def _greedy(model, prompt, steps, use_graph):
    """Prefill ``prompt``, then ``steps`` greedy decode steps through ``Step``; the tokens and last logits."""
    model.setup_cache(prompt.shape[0], 64)
    token = model(prompt, None, True)[:, -1].argmax(-1, keepdim=True)
    pos = torch.tensor([prompt.shape[1]], device=prompt.device)
    out = []

    def one_step():
        logits = model(token, pos)
        token.copy_(logits[:, -1].argmax(-1, keepdim=True))
        pos.add_(1)
        return logits

    # One warm-up step (on a side stream when capturing): kernels compile before, not during, capture.
    step = Step(one_step, prompt.device, use_graph, warmup=1)
    assert (step.graph is not None) == use_graph, step.graph_error
    for _ in range(steps):
        logits = step()
        out.append(token.clone())
    assert int(pos.item()) == prompt.shape[1] + 1 + steps
    return torch.cat(out, 1), logits.clone()


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", [None, *RECIPES])
@torch.no_grad()
def test_cuda_graph_decode_matches_eager(recipe):
    """What the benchmark times (compiled glue, quantized linears, one captured step) computes what eager
    calls compute."""
    base = build_decoder(DecoderConfig.preset("tiny"), "cuda", torch.bfloat16, seed=7)
    if recipe is not None:
        quantize_(base, recipe)
    graphed = copy.deepcopy(base).fuse_glue()
    base.fuse_glue()
    prompt = torch.randint(0, 512, (3, 5), device="cuda")
    eager_tokens, eager_logits = _greedy(base, prompt, 12, use_graph=False)
    graph_tokens, graph_logits = _greedy(graphed, prompt, 12, use_graph=True)
    assert torch.equal(eager_tokens, graph_tokens)
    assert torch.equal(eager_logits, graph_logits)  # the same kernels on the same data


@pytest.mark.gpu
@torch.no_grad()
def test_compiled_glue_matches_eager_glue():
    assert compiled_glue_error("cuda") is None
    model = build_decoder(DecoderConfig.preset("tiny"), "cuda", torch.bfloat16, seed=9)
    tokens = torch.randint(0, 512, (2, 33), device="cuda")
    eager = model(tokens)
    fused = model.fuse_glue()(tokens)
    assert rel_error(fused, eager) < 0.01  # bf16 roundings Inductor may keep in float32
    model.setup_cache(2, 64)
    model(tokens[:, :20])
    step = model(tokens[:, 20:21], torch.tensor([20], device="cuda"))
    assert rel_error(step, eager[:, 20:21]) < 0.02


@pytest.mark.gpu
def test_e2e_on_gpu_with_graphs():
    out = run_e2e(_tiny(device="cuda", prefill_len=128, decode_steps=16, decode_batches=[1, 4]),
                  log=lambda _: None)
    assert out["settings"]["glue_error"] is None
    for r in out["rows"]:
        assert "error" not in r and r["mode"] == "cuda-graph" and r["glue"] == "compiled", r
        assert r["peak_bytes"] >= r["resident_bytes"] > 0
    assert out["rows"][4]["linear_ratio"] < 0.3


@pytest.mark.gpu
@pytest.mark.slow
def test_e2e_on_gpu_compiled():
    out = run_e2e(_tiny(device="cuda", prefill_len=64, decode_steps=4, decode_batches=[2], compile=True,
                        recipes=["int8-weight-only"]), log=lambda _: None)
    for r in out["rows"]:
        assert "error" not in r and r["mode"] == "cuda-graph", r
    assert out["rows"][1]["logits_rel_err"] < LOGITS_BOUND["int8-weight-only"]


@torch.no_grad()
def test_greedy_steps_match_recomputing_everything():
    """The decode loop the benchmark times (in-place token and position buffers) on the CPU: each greedy
    token equals the argmax of a full, cache-free forward over everything generated so far."""
    model = build_decoder(DecoderConfig.preset("tiny"), "cpu", torch.float32, seed=8)
    prompt = torch.randint(0, 512, (2, 5))
    tokens, _ = _greedy(model, prompt, 6, use_graph=False)
    seq = prompt
    for i in range(8):
        nxt = model(seq)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    # the prefill made token 5 and the warm-up step token 6; the six timed steps made 7..12
    assert torch.equal(tokens, seq[:, 7:])
