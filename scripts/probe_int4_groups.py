"""int4 weight-only at another group size than the tables were tuned at (128): the config that runs now against the
family's candidates and the same configs re-shaped for the group (the Gluon GEMM's ring deepened where its K step is
cut to the group, the small kernel's chunks multiplied where they are cut). GPU time as the sweep measures it
(CUDA-graph replay, L2 flushed), ROUNDS alternating rounds, median; bf16 ``F.linear`` beside it. Every config's output
is checked against the shipped config's (max |d|, which is 0 wherever both round the weight once the same way).

    PYTHONPATH=. python scripts/probe_int4_groups.py ROUNDS GROUP[,GROUP] M[,M ...] NxK[,NxK ...]
"""
import json
import statistics
import sys

import torch

from quantkit.kernels import int4_weight_only as i4
from quantkit.kernels import tuning
from quantkit.reference.int4 import quantize_weight_int4


def reshaped(config: dict, group: int) -> list[dict]:
    """The config re-shaped for a group smaller than its K step or chunk."""
    out = []
    kind = config["kernel"]
    if kind == "tma_wgmma" and config["BLOCK_K"] > group:
        cut = config["BLOCK_K"] // group
        for stages in sorted({min(8, config["num_stages"] * cut), min(8, config["num_stages"] + cut)}):
            out.append(dict(config, num_stages=stages))
    if kind == "small" and group < 128:
        for chunks in sorted({min(16, config["CHUNKS"] * 128 // group), min(16, config["CHUNKS"] * 2)}):
            out.append(dict(config, CHUNKS=chunks))
    return out


def main():
    rounds = int(sys.argv[1])
    groups = [int(v) for v in sys.argv[2].split(",")]
    ms = [int(v) for v in sys.argv[3].split(",")]
    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[4].split(",")]
    print(torch.cuda.get_device_name(), torch.__version__, f"median of {rounds} alternating rounds, GPU µs", flush=True)
    torch.manual_seed(0)
    for n, k in shapes:
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        dense = w.clone()
        for g in groups:
            packed, scale, zero = quantize_weight_int4(w, g, False, torch.bfloat16)
            for m in ms:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                shipped = tuning.get_config("int4_weight_only", m, n, k, module=i4)
                configs = [shipped] + [c for c in i4.candidate_configs(m, n, k) if c != shipped]
                configs += [r for c in list(configs) for r in reshaped(c, g) if r not in configs]
                ref = i4.linear(x, packed, scale, zero, None, g, config=shipped)
                runs = [("bf16", None, lambda x=x: torch.nn.functional.linear(x, dense))]
                for c in configs:
                    try:
                        d = (i4.linear(x, packed, scale, zero, None, g, config=c).float() - ref.float()).abs().max()
                    except Exception as exc:  # noqa: BLE001 - a config this group cannot take
                        print(f"  g{g} M={m} {n}x{k} {c}: {exc.__class__.__name__}", flush=True)
                        continue
                    runs.append((json.dumps(c, sort_keys=True), d.item(),
                                 lambda c=c, x=x: i4.linear(x, packed, scale, zero, None, g, config=c)))
                times = {name: [] for name, _, _ in runs}
                for r in range(rounds):
                    for name, _, fn in (runs if r % 2 == 0 else runs[::-1]):
                        times[name].append(tuning.gpu_time_ms(fn) * 1e3)
                med = {name: statistics.median(t) for name, t in times.items()}
                ship = json.dumps(shipped, sort_keys=True)
                best = min((name for name, _, _ in runs[1:]), key=med.get)
                print(f"g{g} M={m} {n}x{k}: bf16 {med['bf16']:.1f}  shipped {med[ship]:.1f} "
                      f"({med['bf16'] / med[ship]:.2f}x)  best {med[best]:.1f} ({med['bf16'] / med[best]:.2f}x, "
                      f"{med[best] / med[ship] - 1:+.1%}) {best}", flush=True)
                for name, d, _ in sorted(runs[1:], key=lambda r: med[r[0]]):
                    print(f"    {med[name]:8.1f}  max|d| {d:.3g}  {name}", flush=True)


if __name__ == "__main__":
    main()
