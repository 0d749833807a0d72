"""``quantkit tune``: its input errors on any machine, and a small sweep installed on a GPU."""
import json

import pytest
import torch

from quantkit.cli import main


@pytest.mark.parametrize("argv,message", [
    (["--recipes", "fp9"], "unknown recipe fp9"),
    (["--m", "1"], "give --shapes too"),
    (["--shapes", "4096"], "--shapes: expected NxK"),
    (["--shapes", "4096x0"], "--shapes: expected NxK"),
    (["--shapes", "4096x4096", "--m", "1,x"], "--m: expected M"),
])
def test_bad_arguments_are_named(argv, message, capsys):
    assert main(["tune", *argv]) == 2
    assert message in capsys.readouterr().err


def test_unwritable_outputs_are_named_before_any_sweep(tmp_path, monkeypatch, capsys):
    (tmp_path / "a_dir").mkdir()
    args = ["tune", "--shapes", "256x256", "--m", "1"]
    assert main([*args, "--out", str(tmp_path / "a_dir")]) == 2
    assert "--out: " in (err := capsys.readouterr().err) and "a_dir is a directory" in err
    assert main([*args, "--out", str(tmp_path / "missing" / "s.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("QUANTKIT_CACHE_DIR", str(tmp_path / "a_file" / "cache"))  # under a file: cannot be made
    assert main([*args, "--out", str(tmp_path / "s.json")]) == 2
    assert "user cache directory" in (err := capsys.readouterr().err) and "--no-install" in err
    assert not (tmp_path / "s.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_without_a_gpu_it_says_so(capsys):
    assert main(["tune"]) == 2
    assert "times kernels on a CUDA GPU, and none is visible" in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_tune_writes_and_installs(tmp_path, monkeypatch, capsys):
    from quantkit.kernels import tuning

    monkeypatch.setenv("QUANTKIT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "sweep.json"
    assert main(["tune", "--recipes", "int8-weight-only", "--shapes", "1024x4096", "--m", "1,16",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "int8-weight-only: 2 problems" in printed and "installed in" in printed
    rows = json.loads(out.read_text())["families"]["int8_weight_only"]
    cache = json.loads(tuning.user_cache_path().read_text())
    assert cache["int8_weight_only"] == {key: row["config"] for key, row in rows.items()}


def test_the_summary_compares_each_pick_with_what_ran_before_on_the_times_it_was_picked_on():
    """The printed summary (no GPU needed): a problem whose pick is what ran before does not count; a changed one
    gains by the pick's time against the old config's, re-timed where it was a finalist."""
    from quantkit import tune
    from quantkit.kernels import int8_weight_only

    default = int8_weight_only.default_config(16, 4096, 4096)
    other = {"kernel": "other"}
    rows = {"16,4096,4096": {"config": other, "ms": 0.9,
                             "timings": [{"ms": 0.8, "config": default}, {"ms": 0.9, "config": other}],
                             "retimed": [{"ms": [1.0, 1.0], "config": default}]},
            "1,4096,4096": {"config": {"kernel": "kept"}, "ms": 1.0, "timings": []}}
    text = tune._summary("int8-weight-only", "int8_weight_only", rows, {"1,4096,4096": {"kernel": "kept"}})
    assert text == ("int8-weight-only: 2 problems; 1 now run another config than before "
                    "(by the sweep's GPU times +10.0 % median, +10.0 % at most)")


def test_a_path_error_is_one_line_with_exit_2(monkeypatch, capsys):
    import quantkit.tune

    def denied(args):
        raise PermissionError(13, "Permission denied", "/somewhere/tuned.json")

    monkeypatch.setattr(quantkit.tune, "run", denied)
    assert main(["tune"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "quantkit tune: error: [Errno 13] Permission denied: '/somewhere/tuned.json'"


def test_an_m_between_powers_of_two_is_tuned_as_its_bucket(tmp_path, monkeypatch, capsys):
    """Configs are kept per power-of-two M: --m 3,4 would have timed M = 3 for the M = 4 entry and skipped
    M = 4 without a word. Each M is tuned as its bucket, once, and the CLI says so."""
    from quantkit.kernels import tuning

    monkeypatch.setattr(tuning.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tuning, "gpu_name", lambda index=None: "GPU A")
    monkeypatch.setattr(tuning, "_shipped", lambda family: {})
    swept = {}

    def sweep_to_file(families, out, shapes, ms, **kw):
        swept["ms"] = ms
        return {"families": {}}

    monkeypatch.setattr(tuning, "sweep_to_file", sweep_to_file)
    assert main(["tune", "--recipes", "int8-weight-only", "--shapes", "64x64", "--m", "3,4,5,1",
                 "--out", str(tmp_path / "s.json"), "--no-install"]) == 0
    out = capsys.readouterr().out
    assert "M = 3 is tuned as M = 4" in out and "M = 5 is tuned as M = 8" in out and "M = 1 is" not in out
    assert swept["ms"] == (4, 8, 1)
