"""What a user waits for before the first token: the wall time of each step from building a Llama-3-8B-shaped
decoder to its second decode step, with one recipe, in a fresh process. Run it twice with the same
TRITON_CACHE_DIR: the first run (an empty directory) pays every Triton / Gluon compilation, the second loads
the compiled kernels from that directory, as a user's second session does.

Each step is timed with the device synchronized before and after (wall seconds):
  build     the bf16 decoder drawn on the GPU
  quantize  quantize_ (its quantization kernels compile on first use)
  prefill1  the first prefill of PREFILL tokens (compiles the large-M kernels, records launch plans)
  prefill2  the same call again
  decode1   the first decode step, batch 1 (M = 1 kernels)
  decode2   the same step again
  decodeB1 / decodeB2  the same for a decode step of batch BATCH (M = BATCH)

    PYTHONPATH=. python scripts/probe_cold_start.py RECIPE|bf16 [--layers 32] [--prefill 512] [--batch 16]
        [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch

from quantkit import quantize_
from quantkit.bench.decoder import DecoderConfig, build_decoder
from scripts.probe_decode_step_kernels import append_json


def _kernel_files(cache_dir: str | None) -> int:
    """Compiled kernels in the Triton cache (one .cubin each)."""
    if not cache_dir or not os.path.isdir(cache_dir):
        return 0
    return sum(name.endswith(".cubin") for _, _, names in os.walk(cache_dir) for name in names)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe", help="a registered recipe name, or bf16")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--json", default=None)
    ap.add_argument("--preset", default="llama3-8b")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda _device: None)
    cache_dir = os.environ.get("TRITON_CACHE_DIR")
    row: dict = {"recipe": args.recipe, "layers": args.layers, "prefill": args.prefill, "batch": args.batch,
                 "kernels_in_cache_before": _kernel_files(cache_dir)}

    def timed(name, fn):
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        row[name] = round(time.perf_counter() - t0, 3)
        return out

    cfg = DecoderConfig.preset(args.preset, n_layers=args.layers)
    model = timed("build", lambda: build_decoder(cfg, device, torch.bfloat16, seed=0))
    if args.recipe != "bf16":
        timed("quantize", lambda: quantize_(model, args.recipe))
    gen = torch.Generator(device="cpu").manual_seed(1)
    tokens = torch.randint(0, cfg.vocab_size, (1, args.prefill), generator=gen).to(device)
    with torch.no_grad():
        model.setup_cache(1, args.prefill + 64)
        timed("prefill1", lambda: model(tokens, None, True))
        timed("prefill2", lambda: model(tokens, None, True))
        pos = torch.tensor([args.prefill], device=device)
        step = tokens[:, :1]
        timed("decode1", lambda: model(step, pos))
        timed("decode2", lambda: model(step, pos))
        model.free_cache()
        model.setup_cache(args.batch, 128)
        batch_tokens = tokens[:, :1].expand(args.batch, 1).contiguous()
        pos = torch.tensor([8], device=device)
        timed("decodeB1", lambda: model(batch_tokens, pos))
        timed("decodeB2", lambda: model(batch_tokens, pos))
    row["kernels_in_cache_after"] = _kernel_files(cache_dir)
    print(json.dumps(row), flush=True)
    return append_json(args.json, row)


if __name__ == "__main__":
    main()
