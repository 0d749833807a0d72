"""What a Python autograd.Function costs in a backward on this host: torch.autograd.grad on a kept graph (µs a call,
200 back-to-back calls) for bf16 F.linear, for a Function whose backward is the same matmul, for one that also
dequantizes (fp8-block's Triton kernel), and for the quantized layer; 4096², M = 128.

    PYTHONPATH=. python scripts/probe_autograd_function.py
"""

import torch
import torch.nn.functional as F
from torch import nn

import quantkit
from quantkit.bench.common import synced_us_per_call as us
from quantkit.ops import linear as L




lin = nn.Linear(4096, 4096, bias=False, dtype=torch.bfloat16, device="cuda").requires_grad_(False)
layer = quantkit.quantize_linear(lin, "fp8-block")
wd = lin.weight


class MM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x @ wd.t()

    @staticmethod
    def backward(ctx, g):
        return g @ wd


class DQ(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x @ wd.t()

    @staticmethod
    def backward(ctx, g):
        return L._fp8_block_grad_input(g, layer.weight, layer.weight_scale, 128)


x = torch.randn(128, 4096, dtype=torch.bfloat16, device="cuda", requires_grad=True)
g = torch.randn(128, 4096, dtype=torch.bfloat16, device="cuda")
for name, f in (("bf16 F.linear", lambda x: F.linear(x, wd)), ("Function mm", MM.apply), ("Function dequant+mm", DQ.apply),
                ("fp8-block layer", layer)):
    y = f(x)
    t = us(lambda: torch.autograd.grad(y, x, g, retain_graph=True))
    t_direct = us(lambda: torch.autograd.grad(y, x, g, retain_graph=True), calls=50)
    print(f"{name}: autograd.grad {t:.1f} µs ({t_direct:.1f} on 50)", flush=True)
print("switch interval", __import__("sys").getswitchinterval())
