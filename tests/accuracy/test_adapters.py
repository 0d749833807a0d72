"""Adapters trained on a quantized all-MiniLM-L6-v2 (the reference path on the CPU): the frozen quantized
layers pass gradients through, as in QLoRA."""
import copy

import pytest
import torch
from torch import nn

import quantkit
from quantkit.accuracy.compare import sentence_embedding
from quantkit.layers.base import QuantizedLinear
from tests.accuracy.minilm import load_minilm, tokenize
from tests.accuracy.sentences import PARAPHRASE_PAIRS, UNRELATED_PAIRS
from tests.helpers import rel_error


class LoRA(nn.Module):
    """base(x) + B(A(x)), B starting at zero: the model's output is unchanged until B trains."""

    def __init__(self, base: nn.Module, rank: int = 4) -> None:
        super().__init__()
        self.base = base
        self.a = nn.Linear(base.in_features, rank, bias=False)
        self.b = nn.Linear(rank, base.out_features, bias=False)
        nn.init.zeros_(self.b.weight)

    def forward(self, x):
        return self.base(x) + self.b(self.a(x))


def _with_adapters(model: nn.Module) -> list[nn.Parameter]:
    model.requires_grad_(False)
    for block in model.encoder.layer:
        block.attention.self.query = LoRA(block.attention.self.query)
        block.attention.self.value = LoRA(block.attention.self.value)
    return [p for n, p in model.named_parameters() if ".a." in n or ".b." in n]


def _dequantized_copy(model: nn.Module) -> nn.Module:
    """The same model with every quantized layer replaced by an nn.Linear holding its dequantized weight."""
    dense = copy.deepcopy(model)
    for name, module in list(dense.named_modules()):
        if isinstance(module, QuantizedLinear):
            linear = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None)
            linear.weight.data = module.dequantize()
            if module.bias is not None:
                linear.bias.data = module.bias.float().clone()
            parent, _, child = name.rpartition(".")
            setattr(dense.get_submodule(parent), child, linear.requires_grad_(False))
    return dense


def _loss(model, batches) -> torch.Tensor:
    """Paraphrases pulled together, unrelated pairs pushed below a cosine of 0.1."""
    (left, right), (u_left, u_right) = batches
    emb = [sentence_embedding(model(**b).last_hidden_state, b["attention_mask"]) for b in (left, right, u_left, u_right)]
    para = (emb[0] * emb[1]).sum(-1)
    unrel = (emb[2] * emb[3]).sum(-1)
    return (1 - para).mean() + (unrel - 0.1).clamp_min(0).mean()


@pytest.mark.parametrize("recipe", ["int8-weight-only", "int4-weight-only", "fp8-block"])
def test_lora_trains_on_a_quantized_minilm(recipe):
    torch.manual_seed(0)
    model, tokenizer = load_minilm()
    quantkit.quantize_(model, recipe)
    buffers = {k: v.clone() for k, v in model.state_dict().items()}
    params = _with_adapters(model)
    batches = [tuple(tokenize(tokenizer, side) for side in zip(*pairs)) for pairs in (PARAPHRASE_PAIRS, UNRELATED_PAIRS)]

    # The first step's gradients, against the float model holding the dequantized weights: exact for the
    # weight-only formats; fp8-block's forward also quantizes activations (the straight-through estimator).
    model.train(False)
    dense = _dequantized_copy(model)
    _loss(model, batches).backward()
    _loss(dense, batches).backward()
    dense_params = [p for n, p in dense.named_parameters() if ".a." in n or ".b." in n]
    grads = [(p.grad, q.grad) for p, q in zip(params, dense_params) if q.grad is not None and q.grad.norm() > 0]
    assert len(grads) == 12  # every B; A's gradient is zero while B is
    bound = 1e-4 if recipe != "fp8-block" else 0.2  # measured: 2.4e-6, 1.9e-6, 0.12
    for got, want in grads:
        assert rel_error(got, want) < bound, rel_error(got, want)

    optimizer = torch.optim.AdamW(params, lr=2e-3)
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = _loss(model, batches)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses
    # the quantized base did not move
    state = model.state_dict()
    for key, before in buffers.items():
        name = key.replace("query.", "query.base.").replace("value.", "value.base.")
        assert torch.equal(state[name].view(torch.uint8), before.view(torch.uint8)), key
