"""What cuBLAS's block-scaled fp8 GEMM (``torch._scaled_mm`` with 1×128 / 128×128 scales) accepts on
this GPU and how it compares with the Triton GEMM on the same quantized operands.

    python scripts/probe_cublas_fp8.py
"""
import torch
import triton.testing

from quantkit.kernels import fp8_block
from quantkit.reference.common import ceil_div

bench = lambda f: triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median") * 1e3  # noqa: E731


def rel_err(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


def main():
    print("torch", torch.__version__, torch.cuda.get_device_name())
    torch.manual_seed(0)
    shapes = [(4096, 4096), (14336, 4096), (4096, 14336), (4000, 4096), (4096, 4000), (1000, 1152)]
    for n, k in shapes:
        w = (torch.randn(n, k, device="cuda") * 0.02).bfloat16()
        wq, ws = fp8_block.quantize_weight(w)
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for m in (1, 2, 3, 8, 16, 17, 100, 128, 1000, 1024, 4096):
            if (n, k) not in shapes[:3] and m not in (16, 17, 1024):
                continue
            for dtype in (torch.bfloat16, torch.float16, torch.float32):
                if dtype != torch.bfloat16 and m not in (17, 1024):
                    continue
                x = torch.randn(m, k, device="cuda", dtype=dtype)
                xq = torch.empty(m, k, dtype=torch.float8_e4m3fn, device="cuda")
                xs = torch.empty(ceil_div(k, 128), m, dtype=torch.float32, device="cuda")
                fp8_block._launch_act_quant(x, xq, xs, 1, m, 128, False)
                ref = torch.nn.functional.linear(x.double(), w.double())

                def cub(bias_arg=None):
                    return torch._scaled_mm(xq, wq.t(), xs.t(), ws.t(), out_dtype=dtype, bias=bias_arg)

                line = f"N={n:5d} K={k:5d} M={m:4d} {str(dtype)[6:]:8s}"
                try:
                    y = cub()
                    torch.cuda.synchronize()
                    ours = fp8_block.linear(x, wq, ws)
                    line += (f" cublas ok err {rel_err(y, ref):.4f} (triton {rel_err(ours, ref):.4f}, "
                             f"max|d| {(y.float() - ours.float()).abs().max().item():.3g})")
                    try:
                        yb = cub(bias)
                        line += f" bias ok {rel_err(yb, ref + bias.double()):.4f}"
                    except Exception as exc:  # noqa: BLE001
                        line += f" bias FAIL {str(exc)[:60]}"
                    if dtype == torch.bfloat16:
                        t_q = bench(lambda: fp8_block._launch_act_quant(x, xq, xs, 1, m, 128, False))
                        t_c = bench(cub)
                        t_ours = bench(lambda: fp8_block.linear(x, wq, ws))
                        t_bf16 = bench(lambda: torch.nn.functional.linear(x, w))
                        line += (f" | us: quant {t_q:.1f} cublas {t_c:.1f} sum {t_q + t_c:.1f} triton {t_ours:.1f} "
                                 f"bf16 {t_bf16:.1f} -> {t_bf16 / (t_q + t_c):.2f}x vs {t_bf16 / t_ours:.2f}x")
                except Exception as exc:  # noqa: BLE001
                    line += f" cublas FAIL {type(exc).__name__}: {str(exc)[:100]}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
