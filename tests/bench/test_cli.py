"""``quantkit bench`` and scripts/bench.py, end to end on the CPU."""
import json
import runpy
import sys
from pathlib import Path

import pytest
import torch

from quantkit.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_layers_command(tmp_path, capsys):
    rc = main(["bench", "layers", "--device", "cpu", "--shapes", "128x256", "--m", "1,3", "--recipes",
               "int8-weight-only", "int4-weight-only:group_size=64", "--warmup-ms", "0", "--rep-ms", "1",
               "--copy-mib", "1", "--rounds", "2", "--out", str(tmp_path), "--no-plot"])
    assert rc == 0
    data = json.loads((tmp_path / "layers.json").read_text())
    assert data["settings"]["rounds"] == 2 and all(len(r["rounds_us"]) == 2 for r in data["rows"])
    assert [r["method"] for r in data["rows"][:3]] == ["bf16", "int8-weight-only", "int4-weight-only:group_size=64"]
    assert len(data["rows"]) == 6 and all(r["ms"] for r in data["rows"])
    md = (tmp_path / "layers.md").read_text()
    assert md in capsys.readouterr().out and "| 128×256 | 3 |" in md
    assert not (tmp_path / "layers.png").exists()


def test_e2e_command_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r" / "e2e-tiny.json"
    rc = main(["bench", "e2e", "--device", "cpu", "--preset", "tiny", "--recipes", "int8-weight-only",
               "--prefill-len", "16", "--prefill-reps", "1", "--batches", "2", "--prompt-len", "3",
               "--decode-steps", "2", "--json", str(out)])
    assert rc == 0
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG" and out.with_suffix(".md").is_file()
    assert "| int8-weight-only | reference | eager |" in capsys.readouterr().out
    assert main(["bench", "plot", str(out), str(tmp_path / "again.png")]) == 0
    assert (tmp_path / "again.png").stat().st_size > 5_000


def test_plot_errors(tmp_path, monkeypatch, capsys):
    assert main(["bench", "plot", str(tmp_path / "missing.json"), str(tmp_path / "x.png")]) == 2
    (tmp_path / "bad.json").write_text("{}")
    assert main(["bench", "plot", str(tmp_path / "bad.json"), str(tmp_path / "x.png")]) == 2
    assert "not a quantkit bench result" in capsys.readouterr().err
    rc = main(["bench", "layers", "--device", "cpu", "--shapes", "128x128", "--m", "1", "--recipes",
               "int8-dynamic", "--rep-ms", "1", "--warmup-ms", "0", "--copy-mib", "1", "--out", str(tmp_path)])
    assert rc == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["bench", "plot", str(tmp_path / "layers.json"), str(tmp_path / "x.png")]) == 2
    assert "matplotlib is not installed" in capsys.readouterr().err
    # after a benchmark run, a missing matplotlib only skips the chart
    rc = main(["bench", "layers", "--device", "cpu", "--shapes", "128x128", "--m", "1", "--recipes",
               "int8-dynamic", "--rep-ms", "1", "--warmup-ms", "0", "--copy-mib", "1", "--json",
               str(tmp_path / "again.json")])
    assert rc == 0 and "no PNG: matplotlib is not installed" in capsys.readouterr().err
    assert (tmp_path / "again.json").is_file() and not (tmp_path / "again.png").exists()


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["bench", "layers", "--device", "cpu", "--shapes", "128by128", "--out", str(tmp_path)]) == 2
    assert "NxK" in capsys.readouterr().err
    assert main(["bench", "layers", "--device", "cpu", "--recipes", "int3", "--out", str(tmp_path)]) == 2
    assert "unknown recipe" in capsys.readouterr().err
    assert main(["bench", "layers", "--device", "cpu", "--rounds", "0", "--out", str(tmp_path)]) == 2
    assert "rounds must be" in capsys.readouterr().err


def test_script_wrapper(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(ROOT / "scripts" / "bench.py"), "--help"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(ROOT / "scripts" / "bench.py"), run_name="__main__")
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "quantkit bench" in out and "layers" in out and "e2e" in out and "plot" in out


def test_the_environment_says_where_borrowed_or_user_configs_came_from():
    from quantkit.bench.common import environment_lines

    env = {"device": "NVIDIA H200", "capability": "sm_90", "torch": "2.11", "triton": "3.6", "python": "3.12",
           "quantkit": "0.1.0", "date": "2026-11-23 04:31 UTC", "command": "quantkit bench layers"}
    own_only = {"fp8_block": {"own": 36, "borrowed": 0, "lenders": [], "user_cache": 0}}
    assert not any("Tuned" in line for line in environment_lines({**env, "tuned_tables": own_only}))
    tables = {"fp8_block": {"own": 4, "borrowed": 32, "lenders": ["NVIDIA H100 80GB HBM3"], "user_cache": 0},
              "int4_weight_only": {"own": 0, "borrowed": 34, "lenders": ["NVIDIA H100 80GB HBM3"], "user_cache": 2}}
    line = [line for line in environment_lines({**env, "tuned_tables": tables}) if "Tuned" in line]
    assert line == ["- Tuned configs: fp8_block 4 own + 32 borrowed from NVIDIA H100 80GB HBM3; int4_weight_only "
                    "0 own + 34 borrowed from NVIDIA H100 80GB HBM3, 2 in the user cache (these first)"]


def test_layers_no_floor_flag_reaches_the_config(tmp_path, monkeypatch):
    from quantkit.bench import layers

    seen = []

    def fake_run(config, **_):
        seen.append(config.floor)
        raise SystemExit(0)

    monkeypatch.setattr(layers, "run_layers", fake_run)
    for extra, want in (([], True), (["--no-floor"], False)):
        with pytest.raises(SystemExit):
            main(["bench", "layers", "--device", "cpu", "--out", str(tmp_path), *extra])
        assert seen[-1] is want


def test_device_errors_and_no_gpu_refusal_come_before_any_timing(tmp_path, monkeypatch, capsys):
    from quantkit.bench import e2e, layers

    def no_run(*args, **kwargs):
        raise AssertionError("the benchmark started")

    monkeypatch.setattr(layers, "run_layers", no_run)
    monkeypatch.setattr(e2e, "run_e2e", no_run)
    for what in ("layers", "e2e"):
        assert main(["bench", what, "--device", "gpu", "--out", str(tmp_path)]) == 2
        assert "--device gpu: expected cpu, cuda or cuda:N" in capsys.readouterr().err
        assert main(["bench", what, "--device", "cpu", "--json", str(tmp_path)]) == 2
        assert f"--json: {tmp_path} is a directory" in capsys.readouterr().err
        if not torch.cuda.is_available():
            assert main(["bench", what, "--device", "cuda", "--out", str(tmp_path)]) == 2
            assert "--device cuda: torch" in capsys.readouterr().err
            # the defaults are sized for a GPU: without one, only an explicit --device cpu runs
            assert main(["bench", what, "--out", str(tmp_path)]) == 2
            err = capsys.readouterr().err
            assert "no CUDA GPU" in err and "--device cpu" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv,message", [
    (["layers", "--m", "1,x"], "--m: expected a comma-separated list of positive integers, got '1,x'"),
    (["layers", "--m", "0"], "--m: expected a comma-separated list of positive integers, got '0'"),
    (["e2e", "--preset", "tiny", "--batches", "b1"], "--batches: expected a comma-separated list of positive"),
])
def test_bad_integer_lists_name_the_flag(argv, message, tmp_path, capsys):
    assert main(["bench", *argv, "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
