"""Config lookup: exact tuned entry, else the nearest tuned M bucket of the same regime, else the default."""
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

    monkeypatch.setattr(tuning, "_shipped", lambda family: TABLE)
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
