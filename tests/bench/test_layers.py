"""The per-layer harness runs end to end on the CPU (reference numerics, perf_counter timer), and its rows,
JSON, Markdown and PNG are complete and consistent."""
import copy
import importlib.util
import json
import sys
import time

import pytest
import torch

from quantkit.bench import common, layers
from quantkit.bench.layers import BF16, ERROR_BOUNDS, LayerBenchConfig, run_layers, to_markdown
from quantkit.recipes import RecipeError

SHAPES = [(256, 256), (96, 384)]  # 96: a partial fp8 block; 384: three int4 groups
MS = [1, 5]
RECIPES = ["fp8-block", "int8-dynamic", "int8-weight-only", "int4-weight-only"]
PEERS_INSTALLED = any(importlib.util.find_spec(p) for p in ("torchao", "gemlite"))


def _config(**overrides):
    kwargs = dict(shapes=SHAPES, ms=MS, recipes=RECIPES, device="cpu", warmup_ms=0, rep_ms=1, copy_bytes=2**20)
    kwargs.update(overrides)
    return LayerBenchConfig(**kwargs)


@pytest.fixture(scope="module")
def result():
    torch.set_num_threads(1)
    return run_layers(_config(), log=lambda _: None, argv=["quantkit", "bench", "layers", "--device", "cpu"])


def test_every_cell_has_every_method(result):
    rows = result["rows"]
    assert len(rows) == len(SHAPES) * len(MS) * (1 + len(RECIPES))
    for n, k in SHAPES:
        for m in MS:
            cell = {r["method"]: r for r in rows if (r["N"], r["K"], r["M"]) == (n, k, m)}
            assert list(cell) == [BF16, *RECIPES]
            assert cell[BF16]["speedup"] == 1.0 and cell[BF16]["backend"] == "torch"
            for name, r in cell.items():
                assert r["error"] is None and r["ms"] > 0 and r["us"] == pytest.approx(r["ms"] * 1e3)
                assert r["speedup"] == pytest.approx(cell[BF16]["ms"] / r["ms"])
                assert r["tflops"] == pytest.approx(2 * m * n * k / (r["ms"] * 1e-3) / 1e12)
                assert r["GBps"] == pytest.approx(r["bytes"] / (r["ms"] * 1e-3) / 1e9)
                assert r["pct_copy_bw"] == pytest.approx(100 * r["GBps"] / result["copy_bandwidth_GBps"])
                if name != BF16:
                    assert r["backend"] == "reference"  # CPU tensors never take the Triton path


def test_bytes_count_weight_activation_and_output(result):
    by = {(r["method"], r["N"], r["K"], r["M"]): r for r in result["rows"]}
    n, k, m = 96, 384, 5
    act_out = (m * k + m * n) * 2
    assert by[(BF16, n, k, m)]["bytes"] == n * k * 2 + act_out
    assert by[("int8-weight-only", n, k, m)]["bytes"] == n * k + n * 4 + act_out  # int8 codes + fp32 scales
    assert by[("fp8-block", n, k, m)]["bytes"] == n * k + 1 * 3 * 4 + act_out  # one 128x128 block row
    assert by[("int4-weight-only", n, k, m)]["bytes"] == n * k // 2 + n * 3 * (2 + 1) + act_out


def test_errors_within_bounds_and_ordered(result):
    errs = {}
    for r in result["rows"]:
        assert r["within_bound"] is True, f"{r['method']} {r['N']}x{r['K']} M={r['M']}: {r['rel_err']}"
        errs.setdefault(r["method"], []).append(r["rel_err"])
    worst = {name: max(v) for name, v in errs.items()}
    best = {name: min(v) for name, v in errs.items()}
    # Each format's error sits where its precision puts it (PERFORMANCE.md's ranges at full size).
    assert worst[BF16] < 0.003 < best["int8-weight-only"]
    assert worst["int8-weight-only"] < best["fp8-block"] and worst["int8-dynamic"] < best["fp8-block"]
    assert worst["fp8-block"] < best["int4-weight-only"]


def test_json_round_trip_and_environment(result, tmp_path):
    path = common.write_json(tmp_path / "layers.json", result)
    data = common.read_json(path)
    assert data == json.loads(json.dumps(data))
    assert data["kind"] == layers.KIND and data["rows"] == result["rows"]
    env = data["environment"]
    for key in ("device", "torch", "triton", "date", "command", "python"):
        assert env[key], key
    assert env["command"] == "quantkit bench layers --device cpu"
    assert data["settings"]["shapes"] == [list(s) for s in SHAPES] and data["settings"]["ms"] == MS


def test_markdown_tables(result):
    md = to_markdown(result)
    assert "- Device: CPU" in md and "- Command: `quantkit bench layers --device cpu`" in md
    assert "| N×K | M | bf16 µs | fp8-block | int8-dynamic | int8-weight-only | int4-weight-only |" in md
    summary = [line for line in md.splitlines() if line.startswith("| 256×256 |") or line.startswith("| 96×384 |")]
    cells = len(SHAPES) * len(MS)
    assert len(summary) == cells + cells * (1 + len(RECIPES))  # speedup table + every-row table
    for line in summary:  # every row of both tables has as many cells as its header
        assert line.count("|") in (len(RECIPES) + 4, 13)
    assert "(err!)" not in md and "above bound" not in md
    spoiled = copy.deepcopy(result)
    row = next(r for r in spoiled["rows"] if r["method"] == "int4-weight-only")
    row["within_bound"] = False
    assert "(err!)" in to_markdown(spoiled) and "(above bound)" in to_markdown(spoiled)


def test_markdown_gpu_time_and_host_bound_mark(result):
    """On a GPU each row also has its CUDA-graph time and host µs per call: a second table, and an eager
    speedup more than HOST_BOUND_RATIO above the graph time is marked as the host's (CPU rows have neither)."""
    assert all(r.get("graph_us") is None and r.get("host_us") is None for r in result["rows"] if r.get("ms"))
    md = to_markdown(result)
    assert "CUDA graph" not in md and "ʰ" not in md
    timed = copy.deepcopy(result)
    for r in timed["rows"]:
        if r.get("ms") is not None:
            r["graph_us"], r["host_us"] = r["us"], 20.0
    cell = [r for r in timed["rows"] if (r["N"], r["K"], r["M"]) == (256, 256, 1) and r.get("ms") is not None]
    base = next(r for r in cell if r["method"] == BF16)
    slow = next(r for r in cell if r["method"] == "int8-dynamic")
    slow["host_us"], slow["graph_us"] = 123.0, slow["us"] / 2  # eager twice its GPU time: the host's
    for r in cell:
        r["graph_speedup"] = base["graph_us"] / r["graph_us"]
    md = to_markdown(timed)
    assert "### GPU time: the same forward replayed from a CUDA graph" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| 256×256 | 1 |"))
    assert f"{slow['speedup']:.2f}x ʰ" in line
    assert md.count("ʰ") == 2  # the mark and its footnote
    graph_line = [ln for ln in md.splitlines() if ln.startswith("| 256×256 | 1 |")][1]
    assert f"{base['graph_us'] / slow['graph_us']:.2f}x (123)" in graph_line


def test_markdown_read_floor(result):
    """At M <= FLOOR_MAX_M on a GPU each row has the read floor of its bytes and bf16's time over it: a table
    of measured / possible speedups with the layer's time over its floor, and a column of the every-row
    table (CPU rows have none, and no such table)."""
    assert all(r.get("floor_us") is None and r.get("floor_speedup") is None for r in result["rows"] if r.get("ms"))
    assert result["settings"]["floor"] is False and "Against the read floor" not in to_markdown(result)
    floored = copy.deepcopy(result)
    cell = [r for r in floored["rows"] if (r["N"], r["K"], r["M"]) == (96, 384, 5) and r.get("ms") is not None]
    base = next(r for r in cell if r["method"] == BF16)
    for i, r in enumerate(cell):
        r["floor_us"] = r["us"] / (1.5 + i)
        r["floor_speedup"] = base["us"] / r["floor_us"]
    md = to_markdown(floored)
    assert f"### Against the read floor (M ≤ {layers.FLOOR_MAX_M})" in md
    section = md.split("### Against the read floor")[1].split("###")[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| 96×384 |")]
    assert len(lines) == 1  # only the cell with floors
    int4 = next(r for r in cell if r["method"] == "int4-weight-only")
    assert f"{int4['speedup']:.2f}x / {int4['floor_speedup']:.2f}x ({int4['us'] / int4['floor_us']:.2f})" in lines[0]
    assert lines[0].startswith(f"| 96×384 | 5 | {base['us']:.1f} | {base['floor_us']:.1f} |")
    every = [ln for ln in md.split("### Every row")[1].splitlines() if ln.startswith("| 96×384 | 5 | int4")]
    assert f"| {int4['floor_us']:.1f} |" in every[0]


def test_markdown_against_the_fastest_peer_of_the_format(result):
    """Each recipe row is set beside the fastest peer row of its weight format in the same cell (not a
    faster peer of another format, not a peer of another cell); without peer rows there is no such table."""
    assert all(r["format"] == r["method"] for r in result["rows"] if r["kind"] == "recipe" and r.get("ms"))
    assert layers.against_peers(result) == [] and "fastest peer" not in to_markdown(result)
    spiked = copy.deepcopy(result)
    cell = [r for r in spiked["rows"] if (r["N"], r["K"], r["M"]) == (256, 256, 5) and r.get("ms") is not None]
    int4 = next(r for r in cell if r["method"] == "int4-weight-only")
    fp8 = next(r for r in cell if r["method"] == "fp8-block")

    def peer(name, fmt, speedup, m=5):
        return {**int4, "method": name, "kind": "peer", "format": fmt, "speedup": speedup, "M": m}

    spiked["rows"] += [peer("slow int4", "int4-weight-only", int4["speedup"] / 3),
                       peer("fast int4", "int4-weight-only", int4["speedup"] / 2),
                       peer("fastest int4 elsewhere", "int4-weight-only", 100.0, m=1),
                       peer("an fp8 peer", "fp8-block", fp8["speedup"] * 2),
                       peer("int8 peer, any speed", "int8-weight-only", 100.0)]
    against = {a["recipe"]: a for a in layers.against_peers(spiked) if (a["N"], a["K"], a["M"]) == (256, 256, 5)}
    assert set(against) == {"int4-weight-only", "fp8-block", "int8-weight-only"}
    assert against["int4-weight-only"]["peer"] == "fast int4" and against["int4-weight-only"]["ahead"]
    assert against["fp8-block"]["peer"] == "an fp8 peer" and not against["fp8-block"]["ahead"]
    m1 = [a for a in layers.against_peers(spiked) if a["M"] == 1]
    assert [(a["recipe"], a["ahead"]) for a in m1] == [("int4-weight-only", False)]
    md = to_markdown(spiked)
    section = md.split("### Against the fastest peer of the same weight format")[1].split("###")[0]
    line = next(ln for ln in section.splitlines() if ln.startswith("| 256×256 | 5 |"))
    assert f"{int4['speedup']:.2f}x vs {int4['speedup'] / 2:.2f}x fast int4 |" in line
    assert f"{fp8['speedup']:.2f}x vs {fp8['speedup'] * 2:.2f}x an fp8 peer (behind)" in line
    assert "Ahead in 1 of 4 recipe cells." in section  # int4 at M = 5; behind at M = 1, fp8 and int8
    assert not any(ln.startswith("| 96×384 |") for ln in section.splitlines())  # no peer rows there


def test_wrong_kernel_is_flagged(monkeypatch):
    """A layer that returns a wrong answer fast must show up as above its error bound."""
    from quantkit.layers import Int8WeightOnlyLinear

    right = Int8WeightOnlyLinear.forward
    monkeypatch.setattr(Int8WeightOnlyLinear, "forward", lambda self, x: right(self, x) * 1.05)
    out = run_layers(_config(shapes=[(128, 128)], ms=[3], recipes=["int8-weight-only"]), log=lambda _: None)
    row = next(r for r in out["rows"] if r["method"] == "int8-weight-only")
    assert row["rel_err"] > ERROR_BOUNDS["int8-weight-only"] and row["within_bound"] is False


def test_failures_become_rows(monkeypatch):
    out = run_layers(_config(shapes=[(128, 128)], ms=[2], recipes=["int4-weight-only:group_size=256"]),
                     log=lambda _: None)
    row = next(r for r in out["rows"] if r["method"] == "int4-weight-only:group_size=256")
    assert row["ms"] is None and "group_size=256" in row["error"]
    assert "failed" in to_markdown(out)

    def boom(self, x):
        raise RuntimeError("kernel exploded")

    from quantkit.layers import Int8DynamicLinear

    monkeypatch.setattr(Int8DynamicLinear, "forward", boom)
    out = run_layers(_config(shapes=[(128, 128)], ms=[2], recipes=["int8-dynamic", "int8-weight-only"]),
                     log=lambda _: None)
    by = {r["method"]: r for r in out["rows"]}
    assert "kernel exploded" in by["int8-dynamic"]["error"] and by["int8-weight-only"]["ms"] > 0


def test_png(result, tmp_path):
    pytest.importorskip("matplotlib")
    from quantkit.bench.plot import plot_result

    path = plot_result(result, tmp_path / "layers.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_png_without_matplotlib(result, tmp_path, monkeypatch):
    from quantkit.bench.plot import PlotUnavailable, plot_result

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(PlotUnavailable, match="quantkit bench plot"):
        plot_result(result, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.skipif(PEERS_INSTALLED, reason="a peer is installed")
def test_peers_skip_with_a_note_when_absent(result):
    from quantkit.bench.peers import build_peers

    peers, notes = build_peers(torch.zeros(128, 128, dtype=torch.bfloat16))
    assert peers == [] and any("torchao" in n for n in notes) and any("gemlite" in n for n in notes)
    assert any("torchao" in n for n in result["notes"])
    assert "skipped torchao" in to_markdown(result)


@pytest.mark.gpu
def test_peers_on_gpu_when_installed():
    pytest.importorskip("torchao")
    out = run_layers(LayerBenchConfig(shapes=[(4096, 4096)], ms=[16], recipes=[], device="cuda", rep_ms=20),
                     log=lambda _: None)
    peers = [r for r in out["rows"] if r["kind"] == "peer" and r["ms"]]
    assert peers and all(r["rel_err"] < 0.15 for r in peers)
    assert {r["format"] for r in peers} <= set(ERROR_BOUNDS) - {BF16}


def test_cpu_timer_and_copy_bandwidth():
    ms = common.measure_ms(lambda: time.sleep(0.002), "cpu", warmup_ms=0, rep_ms=10)
    assert 1.9 < ms < 50
    assert common.copy_bandwidth_gbps("cpu", 2**20, warmup_ms=0, rep_ms=5) > 0.1


def test_parsers():
    assert common.parse_shapes("4096x4096, 14336×4096") == [(4096, 4096), (14336, 4096)]
    assert common.parse_int_list("1,16,128") == [1, 16, 128]
    assert common.parse_recipe("int8-dynamic") == ("int8-dynamic", "int8-dynamic")
    label, spec = common.parse_recipe("int4-weight-only:group_size=64,symmetric=true")
    assert spec == {"type": "int4-weight-only", "group_size": 64, "symmetric": True}
    for bad in ("4096", "4096x", "0x5"):
        with pytest.raises(ValueError, match="NxK"):
            common.parse_shapes(bad)
    with pytest.raises(ValueError):
        common.parse_int_list("1,-2")
    with pytest.raises(RecipeError, match="unknown recipe"):
        common.parse_recipe("int3")
    with pytest.raises(RecipeError, match="group_size"):
        common.parse_recipe("int4-weight-only:group_size=48")


@pytest.mark.gpu
def test_layers_on_gpu():
    """The real thing at one shape: Triton (or the reference, if a family has no kernel yet) within bounds."""
    out = run_layers(LayerBenchConfig(shapes=[(4096, 4096)], ms=[1, 128], device="cuda", rep_ms=20, peers=False),
                     log=lambda _: None)
    for r in out["rows"]:
        assert r["error"] is None and r["within_bound"] is True, r
        assert r["graph_us"] > 0 and r["host_us"] > 0, r  # every row captures in a CUDA graph
        assert r["graph_speedup"] > 0 or r["method"] == BF16, r
    assert out["environment"]["capability"].startswith("sm_")
    assert out["copy_bandwidth_GBps"] > 100
    base = {r["M"]: r for r in out["rows"] if r["method"] == BF16}
    for r in out["rows"]:  # the read floor at M = 1 only, under the bytes' own time
        if r["M"] == 1:
            assert 0 < r["floor_us"] < r["us"] * 1.05, r
            assert r["floor_speedup"] == pytest.approx(base[1]["us"] / r["floor_us"]), r
        else:
            assert r["floor_us"] is None and r["floor_speedup"] is None, r
    assert "Against the read floor" in to_markdown(out)


def test_rounds_time_every_row_again_and_keep_the_median():
    """--rounds N: every row timed N times (the methods' order reversed every other round), its time the
    median of those, its speedup from bf16's median; the Markdown says so. Fewer than one round is refused."""
    out = run_layers(_config(shapes=[(96, 384)], ms=[5], recipes=["int8-weight-only", "int4-weight-only"],
                             rounds=3), log=lambda _: None)
    rows = [r for r in out["rows"] if r.get("ms") is not None]
    assert len(rows) == 3 and out["settings"]["rounds"] == 3
    base = next(r for r in rows if r["method"] == BF16)
    for r in rows:
        assert len(r["rounds_us"]) == 3 and all(t > 0 for t in r["rounds_us"])
        assert r["us"] == pytest.approx(sorted(r["rounds_us"])[1])
        assert r["speedup"] == pytest.approx(base["ms"] / r["ms"])
    assert "median of 3 rounds a row" in to_markdown(out)
    single = run_layers(_config(shapes=[(96, 384)], ms=[1], recipes=["int8-weight-only"]), log=lambda _: None)
    assert all(r["rounds_us"] is None for r in single["rows"] if r.get("ms") is not None)
    assert "rounds a row" not in to_markdown(single)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="rounds"):
            run_layers(_config(rounds=bad), log=lambda _: None)
