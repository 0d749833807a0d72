"""quantkit.ops.dispatch: which implementation runs for a family and a device, and on which device."""
import types

import pytest

import torch

from quantkit.ops import dispatch


def test_triton_functions_run_with_their_device_current(monkeypatch):
    """Triton launches a kernel on the current device's stream, whatever device its tensors are on: a
    family's function resolved for cuda:1 runs with cuda:1 current when the caller left cuda:0 current (a
    model spread over GPUs), gives the caller's device back, and switches nothing where it is current."""
    current = [0]
    switches = []

    class Device:  # torch.cuda.device on a machine without two GPUs
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            switches.append(self.index)
            self.before, current[0] = current[0], self.index

        def __exit__(self, *exc):
            current[0] = self.before

    seen = []
    module = types.SimpleNamespace(quantize_weight=lambda w: seen.append(current[0]) or w,
                                   linear=lambda x, *buffers: seen.append(current[0]) or x)
    monkeypatch.setattr(dispatch, "_why_not_triton", lambda family, device, function: (module, ""))
    monkeypatch.setattr(dispatch, "_RESOLVED", {})
    monkeypatch.setattr(dispatch, "_REPORTED", {})
    monkeypatch.delenv("QUANTKIT_BACKEND", raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: current[0], raising=False)
    monkeypatch.setattr(torch.cuda, "device", Device)
    x = torch.zeros(2, 3)  # (a CPU tensor: the launch-plan wrapper passes it straight to linear)
    for function in ("quantize_weight", "linear"):
        impl = dispatch.resolve("int8_dynamic", function, torch.device("cuda", 1))
        seen.clear(), switches.clear()
        assert impl(x) is x
        assert seen == [1] and switches == [1] and current == [0], (function, seen, switches, current)
        current[0] = 1
        assert impl(x) is x
        assert seen == [1, 1] and switches == [1] and current == [1], (function, seen, switches, current)
        current[0] = 0


@pytest.mark.parametrize("capability,available", [((9, 0), {"fp8_block": True, "int4_weight_only": True}),
                                                  ((8, 0), {"fp8_block": False, "int4_weight_only": True}),
                                                  ((7, 5), {"fp8_block": False, "int4_weight_only": False})])
def test_grouped_moe_kernels_need_what_the_formats_kernels_need(monkeypatch, capability, available):
    """The grouped MoE kernels run where quantkit.kernels.moe and the experts' format run: fp8-block's e4m3 dots
    from sm_89, the others from sm_80 (a faked GPU; nothing is launched)."""
    pytest.importorskip("triton")
    monkeypatch.setattr(dispatch, "_capability", lambda index: capability)
    dispatch._grouped_moe.cache_clear()
    try:
        for family, expected in available.items():
            assert dispatch.grouped_moe_available(torch.device("cuda", 0), family) is expected
        assert not dispatch.grouped_moe_available(torch.device("cpu"), "int4_weight_only")
    finally:
        dispatch._grouped_moe.cache_clear()
        dispatch._REPORTED.pop(("moe.experts", "cuda:0"), None)
