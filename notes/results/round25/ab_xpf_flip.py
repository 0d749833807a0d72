"""Every H100 decode-kernel table entry that prefetches x a trip ahead (``XPF``), against the same config with x
loaded at use: five alternating rounds each (scripts/probe_ab_configs.py), GPU µs, L2 flushed.

    PYTHONPATH=. python notes/results/round25/ab_xpf_flip.py
"""
import json
import subprocess
import sys

GPU = "NVIDIA H100 80GB HBM3"
for family in ("int4_weight_only", "int8_weight_only"):
    table = json.load(open(f"quantkit/kernels/tuned/{family}.json"))[GPU]
    for key, cfg in table.items():
        if cfg.get("kernel") != "decode" or not cfg.get("XPF"):
            continue
        m, n, k = key.split(",")
        flipped = dict(cfg, XPF=False)
        subprocess.run([sys.executable, "scripts/probe_ab_configs.py", family, m, f"{n}x{k}", "5",
                        json.dumps(flipped)], check=False)
