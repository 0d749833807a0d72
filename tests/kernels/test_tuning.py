"""Config lookup: exact tuned entry, else the nearest tuned M bucket of the same regime, else the default."""
import json
import warnings

import pytest

from quantkit.kernels import tuning

TABLE = {
    "1,4096,4096": {"kernel": "gemv"},
    "16,4096,4096": {"kernel": "small"},
    "128,4096,4096": {"kernel": "mid"},
    "1024,4096,4096": {"kernel": "large-1024"},
    "4096,4096,4096": {"kernel": "large-4096"},
    "1024,14336,4096": {"kernel": "other-shape"},
}


@pytest.mark.parametrize("m,expected", [
    (1, "gemv"), (2, "small"), (9, "small"), (16, "small"),  # decode sizes stay decode configs
    (17, "mid"), (64, "mid"), (256, "mid"),                  # the mid range
    (257, "large-1024"), (2048, "large-1024"),               # a tie (1024 / 4096) takes the smaller bucket
    (3000, "large-4096"), (65536, "large-4096"),
])
def test_nearest_tuned_bucket_within_the_regime(m, expected):
    assert tuning.nearest_tuned(m, 4096, 4096, TABLE)["kernel"] == expected


def test_nearest_tuned_needs_the_same_shape_and_regime():
    assert tuning.nearest_tuned(2048, 4096, 8192, TABLE) is None
    assert tuning.nearest_tuned(16, 14336, 4096, TABLE) is None  # only a large-M entry for that shape


def test_get_config_prefers_exact_then_nearest_then_default(monkeypatch):
    class Module:
        @staticmethod
        def default_config(m, n, k):
            return {"kernel": "default"}

    monkeypatch.setattr(tuning, "_shipped_split", lambda family: (TABLE, {}, []))
    monkeypatch.setattr(tuning, "_read_user_cache", lambda: {"fam": {"2048,4096,4096": {"kernel": "user"}}})
    monkeypatch.setattr(tuning, "_MEMO", {})
    assert tuning.get_config("fam", 2048, 4096, 4096, Module)["kernel"] == "user"
    assert tuning.get_config("fam", 4000, 4096, 4096, Module)["kernel"] == "large-4096"
    assert tuning.get_config("fam", 8192, 4096, 4096, Module)["kernel"] == "large-4096"
    assert tuning.get_config("fam", 8192, 512, 4096, Module)["kernel"] == "default"


@pytest.mark.gpu
@pytest.mark.parametrize("recipe,bound", [("fp8-block", 0.045), ("int8-dynamic", 0.02),
                                          ("int8-weight-only", 0.012), ("int4-weight-only", 0.12)])
def test_off_bucket_sizes_run_the_nearest_tuned_config_gpu(recipe, bound):
    """M between the tuned buckets (3, 24, 300, 2048) takes a config tuned for another M of its range:
    the output stays as accurate as the format (errors measured at the tuned sizes: 0.037, 0.013,
    0.009, 0.095), for every shipped shape."""
    import torch
    import torch.nn.functional as F

    import quantkit

    torch.manual_seed(5)
    for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]:
        lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        torch.nn.init.normal_(lin.weight, std=0.02)
        layer = quantkit.quantize_linear(lin, recipe)
        for m in (3, 24, 300, 2048):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                y = layer(x)
            truth = F.linear(x.double(), lin.weight.double())
            err = ((y.double() - truth).norm() / truth.norm()).item()
            assert err < bound, f"{recipe} M={m} {n}x{k}: relative error {err:.4f}"


@pytest.mark.parametrize("shapes", ["4096", "4096x", "0x4096", "4096x4096x2", "ax4096"])
def test_sweep_cli_rejects_malformed_shapes(shapes, capsys):
    with pytest.raises(SystemExit):
        tuning.main(["--family", "int8_weight_only", "--out", "unused.json", "--shapes", shapes])
    assert "--shapes" in capsys.readouterr().err


# ----------------------------------------------------------------------------- tables of other GPUs
DEVICES = {
    "H100 SXM": {"capability": "9.0", "multiprocessors": 132},
    "H100 PCIe": {"capability": "9.0", "multiprocessors": 114},
    "L40S": {"capability": "8.9", "multiprocessors": 142},
}


def test_table_sources_same_capability_nearest_sm_count_last_own_table_on_top():
    tables = {name: {} for name in ("H100 SXM", "H100 PCIe", "L40S", "H200")}
    h200 = {"capability": "9.0", "multiprocessors": 132}
    assert tuning.table_sources("H200", h200, tables, DEVICES) == ["H100 PCIe", "H100 SXM", "H200"]
    # a GPU without a table of its own borrows; one of another generation never serves
    h800 = {"capability": "9.0", "multiprocessors": 132}
    assert tuning.table_sources("H800", h800, tables, DEVICES) == ["H100 PCIe", "H100 SXM"]
    ada = {"capability": "8.9", "multiprocessors": 128}
    assert tuning.table_sources("RTX 6000 Ada", ada, tables, DEVICES) == ["L40S"]
    assert tuning.table_sources("A100", {"capability": "8.0", "multiprocessors": 108}, tables, DEVICES) == []
    # a table whose GPU devices.json does not describe serves only that GPU
    assert tuning.table_sources("H200", h200, {"mystery": {}}, DEVICES) == []


def _shipped_dir(tmp_path, monkeypatch, gpu, props, tables, devices=DEVICES):
    (tmp_path / "fam.json").write_text(json.dumps(tables))
    (tmp_path / "devices.json").write_text(json.dumps(devices))
    monkeypatch.setattr(tuning, "_SHIPPED_DIR", tmp_path)
    monkeypatch.setattr(tuning, "gpu_name", lambda index=None: gpu)
    monkeypatch.setattr(tuning, "device_props", lambda index=None: props)
    tuning._shipped_split_for.cache_clear()
    monkeypatch.setattr(tuning, "_MEMO", {})


def test_shipped_entries_complete_a_gpus_table_from_its_siblings(tmp_path, monkeypatch, caplog):
    tables = {
        "H100 SXM": {"1,4096,4096": {"kernel": "sxm-gemv"}, "16,4096,4096": {"kernel": "sxm-small"},
                     "4096,4096,4096": {"kernel": "sxm-large"}},
        "H100 PCIe": {"1,4096,4096": {"kernel": "pcie-gemv"}, "128,4096,4096": {"kernel": "pcie-mid"}},
        "L40S": {"1024,4096,4096": {"kernel": "ada-large"}},
        "H200": {"16,4096,4096": {"kernel": "h200-small"}},
    }
    _shipped_dir(tmp_path, monkeypatch, "H200", {"capability": "9.0", "multiprocessors": 132}, tables)
    with caplog.at_level("INFO", logger="quantkit"):
        merged = tuning._shipped("fam")
    assert merged == {"1,4096,4096": {"kernel": "sxm-gemv"}, "16,4096,4096": {"kernel": "h200-small"},
                      "4096,4096,4096": {"kernel": "sxm-large"}, "128,4096,4096": {"kernel": "pcie-mid"}}
    assert "H200" in caplog.text and "H100 SXM, H100 PCIe" in caplog.text

    class Module:
        @staticmethod
        def default_config(m, n, k):
            return {"kernel": "default"}

    monkeypatch.setattr(tuning, "_read_user_cache", lambda: {})
    assert tuning.get_config("fam", 16, 4096, 4096, Module)["kernel"] == "h200-small"
    assert tuning.get_config("fam", 4096, 4096, 4096, Module)["kernel"] == "sxm-large"
    assert tuning.get_config("fam", 1024, 4096, 4096, Module)["kernel"] == "sxm-large"  # nearest, not Ada's
    assert tuning.get_config("fam", 1024, 8192, 4096, Module)["kernel"] == "default"

    # QUANTKIT_AUTOTUNE=1 times this GPU's candidates before it borrows, never before its own table
    class Tunable(Module):
        @staticmethod
        def candidate_configs(m, n, k):
            return [{"kernel": "slow"}, {"kernel": "timed-here"}]

    written = {}
    monkeypatch.setattr(tuning, "_MEMO", {})
    monkeypatch.setenv("QUANTKIT_AUTOTUNE", "1")
    monkeypatch.setattr(tuning.torch.cuda, "is_current_stream_capturing", lambda: False)  # (no CUDA here)
    monkeypatch.setattr(tuning, "_write_user_cache", lambda family, key, config: written.update({key: config}))
    bench = lambda config: 1.0 if config["kernel"] == "slow" else 0.5  # noqa: E731
    assert tuning.get_config("fam", 4096, 4096, 4096, Tunable, bench)["kernel"] == "timed-here"
    assert tuning.get_config("fam", 16, 4096, 4096, Tunable, bench)["kernel"] == "h200-small"
    assert written == {"4096,4096,4096": {"kernel": "timed-here"}}


def test_shipped_entries_of_a_gpu_of_another_generation_are_never_used(tmp_path, monkeypatch):
    tables = {"H100 SXM": {"1,4096,4096": {"kernel": "sxm-gemv"}}}
    _shipped_dir(tmp_path, monkeypatch, "A100", {"capability": "8.0", "multiprocessors": 108}, tables)
    assert tuning._shipped("fam") == {}


def test_the_shipped_tables_gpus_are_described():
    """Every GPU with a shipped table is in devices.json, or its table would serve no other GPU."""
    devices = json.loads((tuning._SHIPPED_DIR / "devices.json").read_text())
    for path in tuning._SHIPPED_DIR.glob("*.json"):
        if path.name == "devices.json":
            continue
        for gpu in json.loads(path.read_text()):
            assert gpu in devices, f"{path.name}: {gpu!r} is not in devices.json"
            assert set(devices[gpu]) == {"capability", "multiprocessors"}


def test_shipped_cells_are_every_tuned_problem():
    cells = tuning.shipped_cells("int8_weight_only")
    assert (1, 4096, 4096) in cells and (4096, 14336, 4096) in cells and (2048, 128256, 4096) in cells
    assert len(cells) == len(set(cells)) >= 30
    assert cells == sorted(cells, key=lambda c: (c[1], c[2], c[0]))


def test_install_ships_a_sweep_with_its_device(tmp_path, monkeypatch):
    (tmp_path / "fam.json").write_text(json.dumps({"H100 SXM": {"1,8,8": {"kernel": "old"}}}))
    (tmp_path / "devices.json").write_text(json.dumps({"H100 SXM": DEVICES["H100 SXM"]}))
    monkeypatch.setattr(tuning, "_SHIPPED_DIR", tmp_path)
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"gpu": "H200", "device": {"capability": "9.0", "multiprocessors": 132},
                                 "families": {"fam": {"1,8,8": {"config": {"kernel": "new"}, "ms": 0.01}}}}))
    tuning.install([str(sweep)], shipped=True)
    assert json.loads((tmp_path / "fam.json").read_text()) == {"H100 SXM": {"1,8,8": {"kernel": "old"}},
                                                               "H200": {"1,8,8": {"kernel": "new"}}}
    assert json.loads((tmp_path / "devices.json").read_text())["H200"] == {"capability": "9.0",
                                                                           "multiprocessors": 132}
    # a sweep of an older version (no device) is refused for a GPU devices.json does not know
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"gpu": "H800", "families": {"fam": {}}}))
    with pytest.raises(ValueError, match="H800"):
        tuning.install([str(old)], shipped=True)
    assert "H800" not in json.loads((tmp_path / "fam.json").read_text())


def test_ship_keeps_a_borrowed_entry_unless_the_sweep_beat_it_by_min_gain(tmp_path, monkeypatch):
    h100 = {"1,8,8": {"kernel": "a"}, "2,8,8": {"kernel": "b"}, "4,8,8": {"kernel": "c"}, "8,8,8": {"kernel": "d"}}
    (tmp_path / "fam.json").write_text(json.dumps({"H100 SXM": h100, "H200": {"2,8,8": {"kernel": "stale"}}}))
    (tmp_path / "devices.json").write_text(json.dumps({"H100 SXM": DEVICES["H100 SXM"]}))
    monkeypatch.setattr(tuning, "_SHIPPED_DIR", tmp_path)

    def row(best, best_ms, timings):
        return {"config": {"kernel": best}, "ms": best_ms,
                "timings": [{"ms": ms, "config": {"kernel": k}} for k, ms in timings.items()]}

    rows = {
        "1,8,8": row("a", 1.00, {"a": 1.00, "x": 1.01}),  # the same pick: borrowed
        "2,8,8": row("x", 0.98, {"b": 1.00, "x": 0.98}),  # its own entry already: replaced by the best
        "4,8,8": row("x", 0.90, {"c": 1.00, "x": 0.90}),  # 10 % faster: shipped
        "8,8,8": row("x", 0.50, {"x": 0.50}),             # the borrowed config not timed: shipped
        "16,8,8": row("y", 0.70, {"y": 0.70}),            # nothing to borrow: shipped
    }
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"gpu": "H200", "device": {"capability": "9.0", "multiprocessors": 132},
                                 "families": {"fam": rows}}))
    tuning.install([str(sweep)], shipped=True, min_gain=0.03)
    tables = json.loads((tmp_path / "fam.json").read_text())
    assert tables["H100 SXM"] == h100
    assert tables["H200"] == {"2,8,8": {"kernel": "x"}, "4,8,8": {"kernel": "x"}, "8,8,8": {"kernel": "x"},
                              "16,8,8": {"kernel": "y"}}
    # a 2 % gain where it had no entry of its own: it keeps borrowing
    rows = {"32,8,8": row("x", 0.98, {"z": 1.00, "x": 0.98})}
    tables["H100 SXM"]["32,8,8"] = {"kernel": "z"}
    (tmp_path / "fam.json").write_text(json.dumps(tables))
    sweep.write_text(json.dumps({"gpu": "H200", "device": {"capability": "9.0", "multiprocessors": 132},
                                 "families": {"fam": rows}}))
    tuning.install([str(sweep)], shipped=True, min_gain=0.03)
    assert "32,8,8" not in json.loads((tmp_path / "fam.json").read_text())["H200"]
    # the lender re-shipping its own sweep replaces its entries, whatever the H200 holds
    (tmp_path / "devices.json").write_text(json.dumps({"H100 SXM": DEVICES["H100 SXM"],
                                                       "H200": {"capability": "9.0", "multiprocessors": 132}}))
    sweep.write_text(json.dumps({"gpu": "H100 SXM", "device": DEVICES["H100 SXM"],
                                 "families": {"fam": {"4,8,8": row("c2", 1.00, {"c2": 1.00, "x": 1.01})}}}))
    tuning.install([str(sweep)], shipped=True, min_gain=0.03)
    assert json.loads((tmp_path / "fam.json").read_text())["H100 SXM"]["4,8,8"] == {"kernel": "c2"}


def test_sweep_cli_rejects_cells_with_explicit_problems(capsys):
    with pytest.raises(SystemExit):
        tuning.main(["--family", "int8_weight_only", "--out", "unused.json", "--cells", "shipped", "--m", "1"])
    assert "--cells" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("family,recipe,bound", [
    ("fp8_block", "fp8-block", 0.045), ("int8_dynamic", "int8-dynamic", 0.02),
    ("int8_weight_only", "int8-weight-only", 0.012), ("int4_weight_only", "int4-weight-only", 0.12)])
def test_gpu_every_shipped_entry_of_this_gpu_is_accurate(family, recipe, bound):
    """Each entry the shipped tables give this GPU (its own, completed from its siblings'), run by a
    layer on its own problem (M = the bucket, so the layer looks up exactly that entry): as accurate as
    the format (the bounds of the off-bucket test above)."""
    import torch
    import torch.nn.functional as F

    import quantkit

    torch.manual_seed(11)
    cells = sorted((tuple(int(v) for v in key.split(",")) for key in tuning._shipped(family)),
                   key=lambda c: (c[1], c[2], c[0]))
    assert cells, f"no shipped {family} entries for {tuning.gpu_name()}"
    layer, shape = None, None
    for m, n, k in cells:
        if shape != (n, k):
            layer = lin = None
            torch.cuda.empty_cache()
            lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
            torch.nn.init.normal_(lin.weight, std=0.02)
            w64, layer, shape = lin.weight.double(), quantkit.quantize_linear(lin, recipe), (n, k)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            y = layer(x)
        truth = F.linear(x.double(), w64)
        err = ((y.double() - truth).norm() / truth.norm()).item()
        assert err < bound, f"{family} M={m} {n}x{k} {tuning._shipped(family)[f'{m},{n},{k}']}: error {err:.4f}"


def test_tables_in_use_counts_own_borrowed_and_user_entries(tmp_path, monkeypatch):
    tables = {"H100 SXM": {"1,8,8": {"kernel": "a"}, "2,8,8": {"kernel": "b"}, "4,8,8": {"kernel": "c"}},
              "H200": {"2,8,8": {"kernel": "own"}}}
    _shipped_dir(tmp_path, monkeypatch, "H200", {"capability": "9.0", "multiprocessors": 132}, tables)
    monkeypatch.setattr(tuning, "_read_user_cache", lambda: {"fam": {"8,8,8": {"kernel": "mine"}}})
    assert tuning.tables_in_use() == {"fam": {"own": 1, "borrowed": 2, "lenders": ["H100 SXM"], "user_cache": 1}}


def test_pick_config_breaks_gpu_time_ties_by_eager_time():
    a, b, c = {"kernel": "cublas"}, {"kernel": "gluon"}, {"kernel": "slow"}
    eager = {"cublas": 0.069, "gluon": 0.039, "slow": 0.010}
    calls = []

    def eager_ms(config):
        calls.append(config["kernel"])
        return eager[config["kernel"]]

    # cuBLAS 0.2 % faster on the GPU, twice as slow eagerly: a tie, and the eager time decides
    ms, config, timed = tuning.pick_config([(0.0386, a), (0.0387, b), (0.0500, c)], eager_ms, tie=0.03)
    assert config == b and ms == 0.0387 and sorted(calls) == ["cublas", "gluon"]  # the slow one not timed
    assert set(timed) == {'{"kernel": "cublas"}', '{"kernel": "gluon"}'}
    # a real GPU-time lead is kept whatever the eager time
    calls.clear()
    assert tuning.pick_config([(0.030, a), (0.0387, b)], eager_ms, tie=0.03)[1] == a and calls == []
    # no eager timer, or one candidate (timed twice, as the default is): GPU time alone
    assert tuning.pick_config([(0.0386, a), (0.0387, b)], None)[1] == a
    assert tuning.pick_config([(0.0386, a), (0.0390, a)], eager_ms)[:2] == (0.0386, a) and calls == []


def test_the_default_reuses_its_candidate_time():
    """A default that is one of the candidates takes that candidate's time (not a second timing after the others)."""
    a, b = {"kernel": "a", "X": 1}, {"kernel": "b"}
    assert tuning.candidate_time({"X": 1, "kernel": "a"}, [(0.02, b), (0.01, a)]) == 0.01
    assert tuning.candidate_time({"kernel": "c"}, [(0.02, b), (0.01, a)]) is None


def test_finalists_are_retimed_in_alternating_order_and_picked_on_those_times():
    """The first pass's two fastest configs and the default are timed again, last first then first first; a config
    the first pass read slow only because it came late (a warm GPU) can win on the re-timings."""
    a, b, c, d = ({"kernel": k} for k in "abcd")
    first = [(0.010, a), (0.011, b), (0.013, c), (0.012, d)]  # c is the default, timed last and read slow
    drift = iter([0.0, 0.001, 0.002, 0.003, 0.004, 0.005])  # every timing a little slower than the one before
    true = {"a": 0.0110, "b": 0.0105, "c": 0.0100, "d": 0.0090}
    calls = []

    def bench(config):
        calls.append(config["kernel"])
        return true[config["kernel"]] + next(drift)

    finalists, retimed = tuning.retime_finalists(first, c, bench)
    assert calls == ["c", "b", "a", "a", "b", "c"]  # d (fourth on the first pass) is not a finalist
    means = {cfg["kernel"]: ms for ms, cfg in finalists}
    assert means == pytest.approx({"c": 0.0125, "b": 0.013, "a": 0.0135})  # each mean carries the same drift
    assert {cfg["kernel"]: r for r, cfg in retimed}["c"] == pytest.approx([0.010, 0.015])
    assert tuning.pick_config(finalists, None)[1] == c  # picked on the re-timings, not on the first pass
    # the default among the two fastest is not timed twice; one that fails on a re-timing is dropped
    calls.clear()
    drift = iter([0.0] * 8)

    def flaky(config):
        calls.append(config["kernel"])
        if config["kernel"] == "b":
            raise RuntimeError("out of resources")
        return true[config["kernel"]]

    finalists, _ = tuning.retime_finalists(first, a, flaky)
    assert calls == ["b", "a", "a"] and finalists == [(0.011, a)]
    # a default that did not run on the first pass is not re-timed; no rounds: the first pass decides
    assert [cfg for _, cfg in tuning.retime_finalists(first, {"kernel": "e"}, lambda cfg: 1.0)[0]] == [a, b]
    assert tuning.retime_finalists(first, a, bench, rounds=0) == (first, [])


def test_a_rows_time_for_a_config_is_its_retimed_mean_else_its_first_pass_time():
    row = {"timings": [{"ms": 1.0, "config": {"kernel": "a"}}, {"ms": 2.0, "config": {"kernel": "b"}}],
           "retimed": [{"ms": [1.2, 1.4], "config": {"kernel": "a"}}]}
    assert tuning.row_config_ms(row, {"kernel": "a"}) == pytest.approx(1.3)
    assert tuning.row_config_ms(row, {"kernel": "b"}) == 2.0
    assert tuning.row_config_ms(row, {"kernel": "c"}) is None


@pytest.mark.gpu
def test_gpu_sweep_writes_as_it_goes_and_resumes(tmp_path):
    """The sweep CLI on a small problem: the output records the GPU, its capability and SM count, a best
    config per problem among the timed candidates (eager times where GPU times tied); ``--resume``
    keeps what the file holds and times only the rest."""
    out = tmp_path / "sweep.json"
    tuning.main(["--family", "int8_weight_only", "--shapes", "1024x4096", "--m", "1", "--out", str(out)])
    first = json.loads(out.read_text())
    assert first["gpu"] == tuning.gpu_name() and first["device"] == tuning.device_props()
    rows = first["families"]["int8_weight_only"]
    assert list(rows) == ["1,1024,4096"]
    row = rows["1,1024,4096"]
    timed = [t["config"] for t in row["timings"]]
    retimed = {json.dumps(t["config"], sort_keys=True): sum(t["ms"]) / len(t["ms"]) for t in row["retimed"]}
    assert all(len(t["ms"]) == tuning.RETIME_ROUNDS and t["config"] in timed for t in row["retimed"])
    # the pick is among the finalists, on their re-timed means, the default among them
    assert json.dumps(row["config"], sort_keys=True) in retimed
    assert row["ms"] <= min(retimed.values()) * (1 + tuning.EAGER_TIE)
    assert row["default_ms"] == pytest.approx(retimed[json.dumps(row["default"], sort_keys=True)])
    assert 0 < row["dense_ms"] < 1  # the bf16 F.linear beside it, timed
    from quantkit.kernels import int8_weight_only

    listed = int8_weight_only.candidate_configs(1, 1024, 4096)
    assert sum(t["config"] == row["default"] for t in row["timings"]) == max(1, listed.count(row["default"]))
    tuning.main(["--family", "int8_weight_only", "--shapes", "1024x4096", "--m", "1,16", "--resume",
                 "--out", str(out)])
    second = json.loads(out.read_text())["families"]["int8_weight_only"]
    assert second["1,1024,4096"] == row and "16,1024,4096" in second


def test_config_key_check_names_the_family_and_the_fault():
    from quantkit.kernels.configs import check_keys, is_pow2, key_sets

    keys, pow2 = key_sets({"a": ("X", "Y")}, {"a": ("extra",)}), {"a": ("X",)}
    assert check_keys("fam", {"kernel": "a", "X": 8, "Y": 3, "extra": 1}, keys, pow2) == "a"
    with pytest.raises(ValueError, match=r"fam config: 'kernel' must be one of \['a'\], got \{'kernel': 'b'\}"):
        check_keys("fam", {"kernel": "b"}, keys, pow2)
    with pytest.raises(ValueError, match=r"fam config: 'kernel' must be one of"):
        check_keys("fam", None, keys, pow2)
    with pytest.raises(ValueError, match=r"fam a config .* lacks \['Y'\]"):
        check_keys("fam", {"kernel": "a", "X": 8}, keys, pow2)
    with pytest.raises(ValueError, match=r"fam a config .* has keys it does not take: \['Z'\] \(it takes \['X', 'Y', "
                                         r"'extra'\]\)"):
        check_keys("fam", {"kernel": "a", "X": 8, "Y": 3, "Z": 1}, keys, pow2)
    with pytest.raises(ValueError, match="fam a config: X must be a power of two"):
        check_keys("fam", {"kernel": "a", "X": 12, "Y": 1}, keys, pow2)
    assert [is_pow2(v) for v in (1, 2, 64, 0, -4, 3, True, 2.0)] == [True, True, True, False, False, False, False,
                                                                      False]


def test_a_user_cache_entry_this_version_cannot_run_is_skipped_with_a_warning(monkeypatch):
    """A user-cache entry from another version (a key this one no longer takes) must not break the calls that
    would use it: it is skipped, once named in a warning, and the shipped table's entry runs."""
    from quantkit.kernels import int8_weight_only as k

    good = k._gemv_config(16, 512, 4, 3)
    stale = dict(good, NUM_STAGES=3)
    monkeypatch.setattr(tuning, "_shipped_split", lambda family: ({"1,4096,4096": good}, {}, []))
    monkeypatch.setattr(tuning, "_read_user_cache",
                        lambda: {"int8_weight_only": {"1,4096,4096": stale, "1,1024,4096": good}})
    monkeypatch.setattr(tuning, "_MEMO", {})
    monkeypatch.setattr(tuning, "_WARNED", set())
    monkeypatch.setattr(tuning, "user_cache_path", lambda: "/home/u/.cache/quantkit/tuned-gpu.json")
    with pytest.warns(UserWarning, match=r"ignoring the int8_weight_only config for \(M, N, K\) = \(1,4096,4096\) in "
                                         r"/home/u/.cache/quantkit/tuned-gpu.json: .*NUM_STAGES"):
        assert tuning.get_config("int8_weight_only", 1, 4096, 4096, k) == good
    assert tuning.get_config("int8_weight_only", 1, 1024, 4096, k) == good  # a valid entry is used as before
    with pytest.raises(ValueError, match=r"int8_weight_only gemv config .* has keys it does not take: \['NUM_STAGES'\]"):
        k._check_config(stale)


def test_a_user_cache_entry_for_tiled_weights_is_skipped_with_a_warning(monkeypatch):
    """A TILED decode config passes the family's key check (``linear(config=...)`` takes it, for weights
    rearranged by ``wo_decode_sm90.tile_weight``), but the layers' weights are row-major: from the user cache it
    would read the wrong bytes without an error. It is skipped, named in a warning, like an entry that cannot run."""
    from quantkit.kernels import int8_weight_only as k

    good = k._decode_config(1, 4)
    tiled = dict(good, TILED=True)
    k.check_config_entry(tiled)  # (a config the kernel runs)
    monkeypatch.setattr(tuning, "_shipped_split", lambda family: ({"4,4096,4096": good}, {}, []))
    monkeypatch.setattr(tuning, "_read_user_cache", lambda: {"int8_weight_only": {"4,4096,4096": tiled}})
    monkeypatch.setattr(tuning, "_MEMO", {})
    monkeypatch.setattr(tuning, "_WARNED", set())
    monkeypatch.setattr(tuning, "user_cache_path", lambda: "/home/u/.cache/quantkit/tuned-gpu.json")
    with pytest.warns(UserWarning, match=r"ignoring the int8_weight_only config for \(M, N, K\) = \(4,4096,4096\).*"
                                         r"TILED .*row-major"):
        assert tuning.get_config("int8_weight_only", 4, 4096, 4096, k) == good


@pytest.mark.parametrize("family", ["fp8_block", "int8_dynamic", "int8_weight_only", "int4_weight_only"])
def test_every_offered_default_and_shipped_config_passes_its_family_check(family):
    """The checks that reject unknown keys must accept everything the library itself offers or ships (M from 1
    to 8192 on the benchmark shapes, the lm_head, an odd shape; every GPU's table)."""
    import importlib
    import json

    mod = importlib.import_module(f"quantkit.kernels.{family}")
    configs = []
    for m in (1, 2, 3, 4, 8, 16, 17, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
        for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096), (128256, 4096), (1001, 320)):
            configs += mod.candidate_configs(m, n, k) + [mod.default_config(m, n, k)]
    tables = json.loads((tuning._SHIPPED_DIR / f"{family}.json").read_text())
    configs += [c for table in tables.values() if isinstance(table, dict) for c in table.values()]
    for c in configs:
        mod.check_config_entry(c)


# ----------------------------------------------------------------------------- the user cache file
class _Fam:
    """A kernel family for the user-cache tests: every config with a "kernel" key runs."""

    @staticmethod
    def default_config(m, n, k):
        return {"kernel": "default"}

    @staticmethod
    def candidate_configs(m, n, k):
        return [{"kernel": "a"}, {"kernel": "b"}]

    @staticmethod
    def check_config_entry(config):
        if not isinstance(config, dict) or "kernel" not in config:
            raise ValueError(f"not a config: {config!r}")


def _user_cache(tmp_path, monkeypatch, gpu="Fake GPU"):
    """An empty shipped directory, a GPU named ``gpu`` and the user cache under ``tmp_path / "cache"``."""
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    _shipped_dir(shipped, monkeypatch, gpu, {"capability": "9.0", "multiprocessors": 132}, {})
    monkeypatch.setenv("QUANTKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tuning, "_WARNED", set())
    monkeypatch.delenv("QUANTKIT_AUTOTUNE", raising=False)
    return tuning.user_cache_path()


@pytest.mark.parametrize("text", ['{"fam": {"1,64,64": {"kernel": "a"}', "[]", '{"fam": []}', '{"fam": "x"}',
                                  '"just a string"'])
def test_a_user_cache_that_is_not_a_cache_is_ignored_with_a_warning_naming_it(tmp_path, monkeypatch, text):
    """A truncated file, or JSON of another shape, must not break the layers' forwards: it reads as empty, one
    warning names the file, and the default runs."""
    path = _user_cache(tmp_path, monkeypatch)
    path.parent.mkdir()
    path.write_text(text)
    with pytest.warns(UserWarning, match=str(path)):
        assert tuning.get_config("fam", 1, 64, 64, _Fam) == {"kernel": "default"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        assert tuning.get_config("fam", 16, 64, 64, _Fam) == {"kernel": "default"}


def test_a_user_cache_entry_with_a_malformed_key_is_skipped_with_a_warning(tmp_path, monkeypatch):
    """A key that is not "M,N,K" (edited by hand, or another version's format) is skipped and named; the entries
    beside it still serve, exactly and as the nearest M bucket."""
    path = _user_cache(tmp_path, monkeypatch)
    path.parent.mkdir()
    path.write_text(json.dumps({"fam": {"abc": {"kernel": "x"}, "1,64": {"kernel": "y"}, "16,64,64,1": {"kernel": "z"},
                                        "16,64,64": {"kernel": "mine"}}, "newer_family": {"v2:1": {}}}))
    with pytest.warns(UserWarning) as record:
        assert tuning.get_config("fam", 16, 64, 64, _Fam) == {"kernel": "mine"}
    assert sorted(str(w.message) for w in record) == [
        f"quantkit: ignoring the fam config for (M, N, K) = ({key}) in {path}: the key is not M,N,K"
        for key in ("1,64", "16,64,64,1", "abc")]
    assert tuning.get_config("fam", 8, 64, 64, _Fam) == {"kernel": "mine"}  # (nearest_tuned reads every key)


def _autotune_on(monkeypatch):
    monkeypatch.setenv("QUANTKIT_AUTOTUNE", "1")
    monkeypatch.setattr(tuning.torch.cuda, "is_current_stream_capturing", lambda: False)  # (no CUDA here)


def test_autotuning_saves_its_pick_in_the_user_cache(tmp_path, monkeypatch):
    path = _user_cache(tmp_path, monkeypatch)
    _autotune_on(monkeypatch)
    times = {"a": 2.0, "b": 1.0}
    assert tuning.get_config("fam", 16, 64, 64, _Fam, bench=lambda c: times[c["kernel"]]) == {"kernel": "b"}
    assert json.loads(path.read_text()) == {"fam": {"16,64,64": {"kernel": "b"}}}


def test_autotuning_where_the_cache_cannot_be_written_still_runs_its_pick(tmp_path, monkeypatch):
    """A read-only or impossible cache directory costs the saving, with a warning naming it, not the forward."""
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(tuning, "user_cache_path", lambda: tmp_path / "file" / "cache" / "tuned-gpu.json")
    _user_cache(tmp_path, monkeypatch)
    _autotune_on(monkeypatch)
    with pytest.warns(UserWarning) as record:
        assert tuning.get_config("fam", 16, 64, 64, _Fam, bench=lambda c: 1.0) == {"kernel": "a"}
    assert any(str(w.message).startswith("quantkit: the fam config autotuned for (M, N, K) = (16,64,64) is not saved")
               and str(tmp_path / "file") in str(w.message) for w in record)


def test_autotuning_where_every_candidate_fails_runs_the_fallback_with_a_warning(tmp_path, monkeypatch):
    """Candidates that fail to compile or launch are skipped; where none runs, the forward goes on with what it
    would have run without autotuning (the nearest tuned entry, else the default), and a warning says so."""
    path = _user_cache(tmp_path, monkeypatch)
    _autotune_on(monkeypatch)

    def bench(config):
        raise RuntimeError("out of resource: shared memory")

    with pytest.warns(UserWarning, match=r"autotuning the fam configs for \(M, N, K\) = \(16,64,64\): every candidate "
                                         r"failed"):
        assert tuning.get_config("fam", 16, 64, 64, _Fam, bench=bench) == {"kernel": "default"}
    assert not path.exists()
    times = {"a": float("nan"), "b": float("inf")}  # (timings that are not times count as failures)
    with pytest.warns(UserWarning, match="every candidate failed"):
        assert tuning.get_config("fam", 1, 64, 64, _Fam, bench=lambda c: times[c["kernel"]]) == {"kernel": "default"}


def test_autotuning_does_not_replace_a_user_cache_it_cannot_read(tmp_path, monkeypatch):
    """A cache file that is not JSON (a hand edit with a trailing comma) holds the user's sweep: autotuning must not
    write a one-entry file over it. The pick runs, unsaved, and the warnings name the file."""
    path = _user_cache(tmp_path, monkeypatch)
    path.parent.mkdir()
    text = '{"fam": {"1024,64,64": {"kernel": "swept"},}}'
    path.write_text(text)
    _autotune_on(monkeypatch)
    with pytest.warns(UserWarning) as record:
        assert tuning.get_config("fam", 16, 64, 64, _Fam, bench=lambda c: 1.0) == {"kernel": "a"}
    assert path.read_text() == text
    assert any("is not saved" in str(w.message) and str(path) in str(w.message) for w in record)


def test_concurrent_writers_of_the_user_cache_keep_each_others_entries(tmp_path, monkeypatch):
    """Two processes autotuning (or installing) at once each read the cache, add their entry and replace the file:
    without a lock, one replaces the other's entries."""
    import threading

    path = _user_cache(tmp_path, monkeypatch)

    def write(family):
        for i in range(1, 61):
            tuning._write_user_cache(family, f"{i},64,64", {"kernel": family})

    threads = [threading.Thread(target=write, args=(family,)) for family in ("fam", "other")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = json.loads(path.read_text())
    assert {family: len(entries) for family, entries in data.items()} == {"fam": 60, "other": 60}


def test_install_puts_a_sweep_of_this_gpu_in_its_user_cache_in_one_write(tmp_path, monkeypatch):
    path = _user_cache(tmp_path, monkeypatch, gpu="GPU A")
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"gpu": "GPU A", "families": {"fam": {"1,64,64": {"config": {"kernel": "a"}},
                                                                      "16,64,64": {"config": {"kernel": "b"}}}}}))
    writes = []
    write_json = tuning._write_json
    monkeypatch.setattr(tuning, "_write_json", lambda p, data: (writes.append(p), write_json(p, data)))
    tuning.install([sweep])
    assert json.loads(path.read_text()) == {"fam": {"1,64,64": {"kernel": "a"}, "16,64,64": {"kernel": "b"}}}
    assert writes == [path]


@pytest.mark.parametrize("sweep,message", [
    ({"gpu": "GPU B", "families": {"fam": {"1,64,64": {"config": {"kernel": "a"}}}}},
     "was swept on 'GPU B', this is 'GPU A'"),
    ({"gpu": "GPU A", "families": {"fam": {"1,64,64": {"config": {"kernel": "a"}}, "16,64,64": {"ms": 1.0}}}},
     "not a sweep"),
    ("{truncated", "not a sweep"),
])
def test_install_refuses_a_sweep_of_another_gpu_or_a_malformed_one_and_writes_nothing(tmp_path, monkeypatch,
                                                                                      sweep, message):
    """The user cache is this GPU's: another GPU's configs (another capability: configs that do not compile here)
    are refused, naming the file; so is a file that is not a sweep, before anything is written."""
    path = _user_cache(tmp_path, monkeypatch, gpu="GPU A")
    file = tmp_path / "sweep.json"
    file.write_text(sweep if isinstance(sweep, str) else json.dumps(sweep))
    with pytest.raises(ValueError, match=str(file)) as info:
        tuning.install([file])
    assert message in str(info.value)
    assert not path.exists()


def test_resume_names_a_sweep_file_it_cannot_read(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning, "gpu_name", lambda index=None: "GPU A")
    out = tmp_path / "sweep.json"
    for text in ("{trunc", "[]"):
        out.write_text(text)
        with pytest.raises(ValueError, match=f"--resume: {out}"):
            tuning.resumed_families(out)


@pytest.mark.parametrize("m", ["1,x", "0", "1,,16", "-4"])
def test_sweep_cli_rejects_malformed_m(m, capsys):
    with pytest.raises(SystemExit):
        tuning.main(["--family", "int8_weight_only", "--out", "unused.json", "--m", m])
    assert "--m: expected M[,M...] with positive counts" in capsys.readouterr().err


def test_the_sweep_counts_a_time_that_is_not_a_number_as_a_failure(monkeypatch):
    """A candidate timed nan or inf (a timer that read nothing) must neither be picked nor crowd out the finalists:
    it is skipped like one that raised."""
    import sys
    import types

    times = {"nan": float("nan"), "inf": float("inf"), "slow": 2.0, "fast": 1.0}
    fam = types.SimpleNamespace(
        make_bench_inputs=lambda n, k, dtype: (),
        candidate_configs=lambda m, n, k: [{"kernel": name} for name in times],
        default_config=lambda m, n, k: {"kernel": "slow"},
        linear=lambda x, config: times[config["kernel"]])
    monkeypatch.setitem(sys.modules, "quantkit.kernels.fakefam", fam)
    randn = tuning.torch.randn
    monkeypatch.setattr(tuning.torch, "randn", lambda *shape, device=None, dtype=None: randn(*shape, dtype=dtype))
    monkeypatch.setattr(tuning, "gpu_time_ms", lambda fn: t if isinstance(t := fn(), float) else 0.5)  # (F.linear)
    row = tuning.sweep("fakefam", shapes=((64, 64),), ms=(16,), verbose=False, eager_tie=None)["16,64,64"]
    assert row["config"] == {"kernel": "fast"} and row["ms"] == 1.0
    assert sorted(t["config"]["kernel"] for t in row["timings"]) == ["fast", "slow"]


def test_the_user_cache_directory_expands_home_and_ignores_an_empty_setting(monkeypatch, tmp_path):
    from pathlib import Path

    from quantkit.kernels import tuning

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("QUANTKIT_CACHE_DIR", "~/tuned")
    assert tuning.user_cache_dir() == tmp_path / "tuned"
    monkeypatch.setenv("QUANTKIT_CACHE_DIR", "")  # empty: the default, not the current directory
    assert tuning.user_cache_dir() == Path.home() / ".cache" / "quantkit"
    monkeypatch.setenv("QUANTKIT_CACHE_DIR", "rel")
    assert tuning.user_cache_dir() == Path.cwd() / "rel"


def test_a_process_with_two_kinds_of_gpu_reads_each_ones_configs(tmp_path, monkeypatch):
    """A model spread over an H100 and an L40S: each layer's config comes from the table of the GPU it runs on
    (the current device, which the layers set), not from that of the first GPU used (sm_90 configs on the
    sm_89 GPU)."""
    tables = {"H100 SXM": {"16,4096,4096": {"kernel": "h100"}}, "L40S": {"16,4096,4096": {"kernel": "l40s"}}}
    (tmp_path / "fam.json").write_text(json.dumps(tables))
    (tmp_path / "devices.json").write_text(json.dumps(DEVICES))
    monkeypatch.setattr(tuning, "_SHIPPED_DIR", tmp_path)
    names = {0: "H100 SXM", 1: "L40S"}
    current = {"index": 0}
    monkeypatch.setattr(tuning, "_current_device", lambda: current["index"])
    monkeypatch.setattr(tuning, "_gpu_name", lambda index: names[index])
    monkeypatch.setattr(tuning, "_device_props", lambda index: tuple(DEVICES[names[index]].items()))
    monkeypatch.setattr(tuning, "_read_user_cache", lambda: {})
    monkeypatch.setattr(tuning, "_MEMO", {})
    tuning._shipped_split_for.cache_clear()

    class Module:
        @staticmethod
        def default_config(m, n, k):
            return {"kernel": "default"}

    for index, want in ((0, "h100"), (1, "l40s"), (0, "h100")):
        current["index"] = index
        assert tuning.get_config("fam", 16, 4096, 4096, Module)["kernel"] == want, index
