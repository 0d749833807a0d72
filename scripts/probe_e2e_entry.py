"""The end-to-end prefill with one tuned-table entry replaced, to judge an entry by the whole model rather than
its layer alone. Prints bf16's and the recipe's prefill ms, with CUDA graphs and eagerly.

    python scripts/probe_e2e_entry.py RECIPE [FAMILY M N K 'CFG_JSON' ...] [--prefill-len 2048] [--eager-only]

Overrides come in groups of five; without one the shipped table runs. Run each variant in its own process
(plans and memos are per process).
"""
import argparse
import json

from quantkit.bench.e2e import E2EConfig, run_e2e
from quantkit.kernels import tuning


def main():
    p = argparse.ArgumentParser()
    p.add_argument("recipe")
    p.add_argument("override", nargs="*", help="FAMILY M N K CFG_JSON")
    p.add_argument("--prefill-len", type=int, default=2048)
    p.add_argument("--eager-only", action="store_true")
    args = p.parse_intermixed_args()
    if len(args.override) % 5:
        p.error("overrides come in groups of FAMILY M N K CFG_JSON")
    label = "shipped table"
    cells = []
    for i in range(0, len(args.override), 5):
        family, m, n, k, cfg = args.override[i:i + 5]
        tuning._MEMO[(family, tuning.m_bucket(int(m)), int(n), int(k))] = json.loads(cfg)
        cells.append(f"{m},{n},{k}")
    if cells:
        label = f"{args.override[0]} {' '.join(cells)} -> {args.override[4]}"
    for graphs in ((False,) if args.eager_only else (True, False)):
        result = run_e2e(E2EConfig(recipes=[args.recipe], prefill_len=args.prefill_len, prefill_reps=5,
                                   decode_batches=[1], decode_steps=4, graphs=graphs), log=lambda s: None)
        ms = {row["method"]: row.get("prefill_ms") for row in result["rows"]}
        print(f"{label} | graphs={graphs} | prefill ms {ms}", flush=True)


if __name__ == "__main__":
    main()
