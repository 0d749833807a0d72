"""How much of the int4 decode kernel's time is its conversion? The shipped bf16 conversion of a packed word
is 13 instructions (a shift, then per output register a ``prmt``, a ``lop3`` and a ``sub``). This probe
swaps the PTX of ``wo_decode_sm90._ASM_BF16`` for cheaper sequences, compiles the shipped decode configs
with it and times them (GPU time from graph replay, L2 flushed, as the sweep measures):

    shipped  13 instructions a word (the kernel as it is)
    shift    11: the nibble split of a layout whose register pairs are nibbles (j, j + 4) of a word
             (three shifts, four ``lop3``, four ``sub``): what a re-packed layout would run
    lop      4: one ``lop3`` a register, no shift, no zero-point (a bound, not a conversion)

Only ``shipped`` computes the layer; the others' outputs are wrong by design and only their time counts.
Each variant runs in its own process and Triton cache (the PTX is a global the kernel is compiled with),
the variants alternate over ROUNDS rounds, and each cell's median is printed.

    PYTHONPATH=. python scripts/probe_decode_convert.py ROUNDS [M:NxK[:CONFIG_JSON] ...]
"""
import json
import os
import subprocess
import sys
import tempfile

VARIANTS = ("shipped", "shift", "lop")
DEFAULT_CELLS = ("1:14336x4096", "1:4096x14336", "16:14336x4096", "16:4096x14336",
                 '16:4096x4096:{"DK": 128, "MT": 1, "SUB": 1, "WK": 4, "WM": 1, "XPF": false, "kernel": "decode"}')


def variant_ptx(name: str) -> str | None:
    magic = "0x43004300"
    if name == "shipped":
        return None
    lines = ["{", ".reg .b32 u, t, zz;", "mov.b32 zz, {$9, $9};"]
    for j in range(4):
        if name == "shift":
            src = "$8" if j == 0 else "u"
            if j > 0:
                lines.append(f"shr.b32 u, $8, {4 * j};")
            lines += [f"lop3.b32 t, {src}, 0x000f000f, {magic}, 0xea;", "sub.rn.bf16x2 t, t, zz;"]
        else:  # lop
            mask = f"0x{(0x000f000f << (4 * j)) & 0xffffffff:08x}"
            lines.append(f"lop3.b32 t, $8, {mask}, {magic}, 0xea;")
        lines.append(f"mov.b32 {{${2 * j}, ${2 * j + 1}}}, t;")
    lines.append("}")
    return "\n".join(lines)


def child(variant: str, cells: list[str]) -> None:
    import torch
    from triton.experimental.gluon import language as gl

    from quantkit.kernels import int4_weight_only as mod
    from quantkit.kernels import tuning, wo_decode_sm90

    ptx = variant_ptx(variant)
    if ptx is not None:
        wo_decode_sm90._ASM_BF16 = gl.constexpr(ptx)
    torch.manual_seed(0)
    out = {}
    for cell in cells:
        m, shape, *cfg = cell.split(":", 2)
        n, k = (int(v) for v in shape.split("x"))
        inputs = mod.make_bench_inputs(n, k, torch.bfloat16)
        x = torch.randn(int(m), k, device="cuda", dtype=torch.bfloat16)
        config = json.loads(cfg[0]) if cfg else tuning.get_config("int4_weight_only", int(m), n, k, module=mod)
        fn = lambda: mod.linear(x, *inputs, config=config)  # noqa: E731
        out[cell] = tuning.gpu_time_ms(fn) * 1e3
    print(json.dumps(out))


def main() -> None:
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3:])
        return
    rounds = int(sys.argv[1])
    cells = sys.argv[2:] or list(DEFAULT_CELLS)
    import torch
    print(torch.cuda.get_device_name(), torch.__version__, f"int4 decode conversion variants, {rounds} rounds",
          flush=True)
    caches = {v: tempfile.mkdtemp(prefix=f"tc_{v}_") for v in VARIANTS}
    times = {v: {c: [] for c in cells} for v in VARIANTS}
    for r in range(rounds):
        for v in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
            env = dict(os.environ, TRITON_CACHE_DIR=caches[v])
            res = subprocess.run([sys.executable, __file__, "--child", v, *cells], env=env, capture_output=True,
                                 text=True)
            if res.returncode != 0:
                print(f"{v}: failed\n{res.stderr[-3000:]}", flush=True)
                continue
            for c, t in json.loads(res.stdout.strip().splitlines()[-1]).items():
                times[v][c].append(t)
    for c in cells:
        base = sorted(times["shipped"][c])[len(times["shipped"][c]) // 2] if times["shipped"][c] else float("nan")
        parts = []
        for v in VARIANTS:
            ts = sorted(times[v][c])
            if not ts:
                parts.append(f"{v} -")
                continue
            med = ts[len(ts) // 2]
            parts.append(f"{v} {med:.2f} ({100 * (med / base - 1):+.1f} %) [{' '.join(f'{t:.1f}' for t in times[v][c])}]")
        print(f"{c}: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()
