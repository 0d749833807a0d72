"""Mixture-of-experts blocks whose experts are stored fused, split into one linear module per expert projection.

transformers 5 keeps a block's experts as two 3-D parameters: ``gate_up_proj`` [E, 2I, H] (each expert's gate rows,
then its up rows) and ``down_proj`` [E, H, I]. No ``nn.Linear`` is involved, so a walk over ``nn.Linear`` modules
would leave most of a Mixtral, Qwen3-MoE or DeepSeek-V3 in bf16. :func:`split_fused_experts` replaces each such module
by :class:`Experts`, which holds expert ``e``'s three projections as ordinary linear modules (``"{e}.gate_proj"``, ...,
named as the model's checkpoints name them) made from views of the fused parameters: nothing is copied. Everything
that works per linear module then works per expert: recipes, ``ignore`` / ``overrides`` patterns, GPTQ's calibration
hooks, the report, and the checkpoint code, whose files store experts one tensor per expert projection anyway.

:class:`Experts` computes what transformers' eager experts forward computes (the loop over the experts that tokens were
routed to): ``down(act(gate(x)) * up(x))`` per expert, weighted by the routing weight, summed into the output. Each
projection is one call of its layer, so a quantized expert runs the same Triton kernels as any quantized linear.
"""
from __future__ import annotations

import warnings
from typing import Iterable

import torch
from torch import nn

from quantkit.ops.linear import _records_grad
from quantkit.ops.moe import moe_experts, routed_loop

#: the names of one expert's projections in most MoE checkpoints (Qwen-MoE, DeepSeek, OLMoE, ...)
DEFAULT_NAMES = ("gate_proj", "up_proj", "down_proj")


class Expert(nn.Module):
    """One expert's three projections, registered under the checkpoint's names for them."""

    def __init__(self, gate: nn.Module, up: nn.Module, down: nn.Module,
                 names: tuple[str, str, str] = DEFAULT_NAMES) -> None:
        super().__init__()
        if len(set(names)) != 3:
            raise ValueError(f"an expert's three projections need three distinct names, got {names}")
        self.names = tuple(names)
        for name, module in zip(self.names, (gate, up, down)):
            self.add_module(name, module)

    @property
    def gate(self) -> nn.Module:
        return self._modules[self.names[0]]

    @property
    def up(self) -> nn.Module:
        return self._modules[self.names[1]]

    @property
    def down(self) -> nn.Module:
        return self._modules[self.names[2]]


class Experts(nn.Module):
    """A drop-in for transformers' fused experts modules: ``forward(hidden_states [T, H], top_k_index [T, k],
    top_k_weights [T, k]) -> [T, H]``, with expert ``e`` registered as child ``"{e}"`` (an :class:`Expert`)."""

    def __init__(self, experts: Iterable[Expert], act_fn: nn.Module, fused_class: str = "") -> None:
        super().__init__()
        experts = list(experts)
        if not experts:
            raise ValueError("Experts needs at least one expert")
        for index, expert in enumerate(experts):
            self.add_module(str(index), expert)
        self.num_experts = len(experts)
        self.act_fn = act_fn
        self._stack_state = None  # (format, stacks, probe): see _stacks
        self.register_load_state_dict_post_hook(_restack_after_load)
        #: the transformers class this module replaced (for repr and error messages)
        self.fused_class = fused_class

    def expert(self, index: int) -> Expert:
        return self._modules[str(index)]

    # ------------------------------------------------------------------ the grouped kernels' stacked buffers
    def _grouped_format(self) -> tuple[str, int, str | None] | None:
        """(format, int4's group size, fp8-block's scale format) when every expert projection is a quantized layer
        of one format and parameters, without bias, and the activation is SiLU: what ``quantkit.kernels.moe``
        computes. None otherwise."""
        from quantkit.layers import Fp8BlockLinear, Int4WeightOnlyLinear, Int8DynamicLinear, Int8WeightOnlyLinear

        if not _is_silu(self.act_fn):
            return None
        first = self.expert(0)
        kind = type(first.gate)
        if kind not in (Int8WeightOnlyLinear, Int4WeightOnlyLinear, Int8DynamicLinear, Fp8BlockLinear):
            return None
        params = (getattr(first.gate, "group_size", 0), getattr(first.gate, "block_size", 128),
                  getattr(first.gate, "scale_fmt", None))
        if params[1] != 128:
            return None
        shapes = [(m.out_features, m.in_features) for m in (first.gate, first.up, first.down)]
        for index in range(self.num_experts):
            ex = self.expert(index)
            for module, shape in zip((ex.gate, ex.up, ex.down), shapes):
                if type(module) is not kind or module.bias is not None or (module.out_features, module.in_features) \
                        != shape or (getattr(module, "group_size", 0), getattr(module, "block_size", 128),
                                     getattr(module, "scale_fmt", None)) != params:
                    return None
        if shapes[0] != shapes[1] or shapes[2] != (shapes[0][1], shapes[0][0]):
            return None
        return kind.format_name, params[0], params[2]

    def _stacks(self) -> dict[str, tuple] | None:
        """{"gate" | "up" | "down": (codes, scale, zero-point or None)}, each the role's buffers stacked over the
        experts, the experts' own buffers being views into them (no second copy); None when the experts are not
        what the grouped operator takes. Decided again when a layer's buffers were replaced (a move to another
        device, ``load_state_dict(assign=True)``): the last expert's buffer addresses are the probe."""
        probe = self._probe(self.expert(self.num_experts - 1))
        if self._stack_state is not None and self._stack_state[2] == probe:
            return self._stack_state[1]
        fmt = self._grouped_format()
        if fmt is None:
            self._stack_state = (None, None, probe)
            return None
        names = ("weight_packed", "weight_scale", "weight_zero_point") if fmt[0] == "int4-weight-only" else \
            ("weight", "weight_scale")
        layers = {role: [getattr(self.expert(i), role) for i in range(self.num_experts)]
                  for role in ("gate", "up", "down")}
        if len({layer._buffers[name].device for group in layers.values() for layer in group for name in names}) > 1:
            self._stack_state = (None, None, probe)  # experts spread over devices, or partly loaded (meta)
            return None
        stacks = {}
        with torch.no_grad():
            for role, group in layers.items():
                stacked = []
                for name in names:
                    tensor = torch.stack([layer._buffers[name] for layer in group])
                    # CUDA graphs of torch.compile (mode="reduce-overhead") then read the stacks where they are
                    # instead of copying them into the graph's own input buffers at every replay
                    torch._dynamo.mark_static_address(tensor)
                    for index, layer in enumerate(group):
                        layer._buffers[name] = tensor[index]
                    stacked.append(tensor)
                stacks[role] = (stacked[0], stacked[1], stacked[2] if len(stacked) == 3 else None)
        self._stack_state = (fmt, stacks, self._probe(self.expert(self.num_experts - 1)))
        return stacks

    def restack(self) -> None:
        """Stack the experts' buffers now (see :meth:`_stacks`), so that a compiled forward, which cannot check
        them, finds them current: after quantization, a load and a move."""
        self._stack_state = None
        self._stacks()

    @staticmethod
    def _probe(expert: Expert) -> tuple:
        # (_buffers, not buffers(): the generator cost ~25 µs a block call on the H100 host, round 38 call 1)
        return tuple(t.data_ptr() for m in (expert.gate, expert.up, expert.down) for t in m._buffers.values()
                     if t is not None)

    def _apply(self, fn, recurse=True):
        # the experts' buffers move one by one (each a tensor of its own again); stacked again where they landed
        self._stack_state = None
        result = super()._apply(fn, recurse)
        self._stacks()
        return result

    def _grouped(self) -> tuple | None:
        """((format, group size, scale format), stacks) when the experts run as one operator, else None. A compiled
        forward takes the stacks as they are (a buffer address does not trace; :meth:`restack` runs after
        quantization, loads and moves)."""
        if not torch.compiler.is_compiling():
            self._stacks()  # stacked again if a layer's buffers were replaced since
        state = self._stack_state
        if state is None or state[1] is None:
            return None
        return state[0], state[1]

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            records = (hidden_states.requires_grad or top_k_weights.requires_grad) and torch.is_grad_enabled()
        else:
            records = _records_grad(hidden_states, top_k_weights)  # also forward-mode AD, torch.func transforms
        grouped = self._grouped()
        if grouped is None or records:
            return self.forward_loop(hidden_states, top_k_index, top_k_weights)
        (fmt, group, scale_fmt), stacks = grouped
        return moe_experts(hidden_states, top_k_index, top_k_weights, fmt, stacks["gate"], stacks["up"],
                           stacks["down"], group, scale_fmt, self._label)

    def forward_loop(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                     top_k_weights: torch.Tensor) -> torch.Tensor:
        """The reference: one call of each projection's layer per expert that tokens were routed to (the experts
        in order, each token's contributions added in the order of its experts, as transformers' eager loop);
        autograd records through it."""
        def project(e: int, role: int, t: torch.Tensor) -> torch.Tensor:
            expert = self.expert(e)
            return (expert.gate, expert.up, expert.down)[role](t)

        return routed_loop(hidden_states, top_k_index, top_k_weights, self.num_experts, project, self.act_fn)

    @property
    def _label(self) -> str:
        """For errors: the block's name in the model, from its first projection's (set by quantize_)."""
        name = getattr(self.expert(0).gate, "module_name", "")
        return f"Experts {name.rsplit('.', 2)[0]!r}" if name.count(".") >= 2 else "Experts"

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}" + (f", replaces={self.fused_class}" if self.fused_class else "")


def _restack_after_load(module: Experts, incompatible_keys) -> None:
    module.restack()


def _is_silu(act: nn.Module) -> bool:
    if isinstance(act, nn.SiLU):
        return True
    # transformers' own SiLU module (ACT2FN["silu"])
    return type(act).__name__ in ("SiLUActivation", "SiLU") and type(act).__module__.startswith("transformers")


def fused_experts_params(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The 3-D floating parameters of ``module`` itself when it looks like a block's fused experts: a class named
    ``...Experts`` or parameters named as experts' projections (a convolution's 3-D weight is not one)."""
    if isinstance(module, nn.modules.conv._ConvNd):
        return []
    params = [(name, p) for name, p in module._parameters.items()
              if p is not None and p.dim() == 3 and p.is_floating_point()]
    if not params:
        return []
    named = any(name in _EXPERT_PARAM_NAMES for name, _ in params)
    return params if named or "experts" in type(module).__name__.lower() else []


_EXPERT_PARAM_NAMES = ("gate_up_proj", "down_proj", "up_proj", "gate_proj", "w1", "w2", "w3")


def split_problem(module: nn.Module) -> str | None:
    """None when ``module`` is a transformers fused-experts module that :func:`split` can take; else why not."""
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not isinstance(gate_up, nn.Parameter) or not isinstance(down, nn.Parameter):
        names = ", ".join(f"{n} {list(p.shape)}" for n, p in fused_experts_params(module))
        return f"3-D parameters ({names}) of a layout quantkit does not know (it splits gate_up_proj + down_proj)"
    for flag, supported in (("has_gate", True), ("is_concatenated", True), ("is_transposed", False),
                            ("has_bias", False)):
        if bool(getattr(module, flag, supported)) != supported:
            return f"{flag}={not supported}: quantkit splits fused experts with gate and up rows concatenated, " \
                   f"[E, 2I, H] / [E, H, I] weights and no bias"
    apply_gate = getattr(type(module), "_apply_gate", None)
    if apply_gate is not None:
        try:
            from transformers.integrations.moe import _default_apply_gate
        except ImportError:  # pragma: no cover - transformers without the experts interface
            _default_apply_gate = None
        if apply_gate is not _default_apply_gate:
            return f"{type(module).__name__} has its own gating (_apply_gate); quantkit computes act(gate) * up"
    if not isinstance(getattr(module, "act_fn", None), nn.Module):
        return "no act_fn module"
    if gate_up.dim() != 3 or down.dim() != 3:
        return f"gate_up_proj {list(gate_up.shape)} and down_proj {list(down.shape)} are not 3-D"
    experts, two_i, hidden = gate_up.shape
    if two_i % 2 or tuple(down.shape) != (experts, hidden, two_i // 2):
        return (f"gate_up_proj {list(gate_up.shape)} and down_proj {list(down.shape)} are not [E, 2I, H] and "
                f"[E, H, I]")
    return None


def _linear_on(weight: torch.Tensor, requires_grad: bool) -> nn.Linear:
    """An nn.Linear whose weight is ``weight`` itself (a view into the fused parameter, not a copy)."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta", dtype=weight.dtype)
    linear.weight = nn.Parameter(weight, requires_grad=requires_grad)
    return linear


def split(module: nn.Module, names: tuple[str, str, str] = DEFAULT_NAMES) -> Experts:
    """The :class:`Experts` equivalent of a fused-experts ``module`` (see :func:`split_problem`), its linear modules
    holding views of ``module``'s parameters."""
    problem = split_problem(module)
    if problem:
        raise ValueError(f"{type(module).__name__}: {problem}")
    gate_up, down = module.gate_up_proj, module.down_proj
    inter = gate_up.shape[1] // 2
    grad = gate_up.requires_grad
    experts = []
    for e in range(gate_up.shape[0]):
        w = gate_up.detach()[e]
        experts.append(Expert(_linear_on(w[:inter], grad), _linear_on(w[inter:], grad),
                              _linear_on(down.detach()[e], down.requires_grad), names))
    return Experts(experts, module.act_fn, type(module).__name__)


def as_saved(model: nn.Module, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """``tensors`` (model names) as transformers' ``save_pretrained`` would write them for ``model``: its load-time
    conversions reverted (renames, fused experts split). None for a model that is not a transformers model, without
    transformers 5, or where a conversion cannot run on these tensors."""
    if getattr(model, "config", None) is None:
        return None
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # transformers 4: checkpoints use the model's own names
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return revert_weight_conversion(model, tensors)
    except Exception:  # noqa: BLE001 - a conversion that cannot run on small tagged tensors
        return None


def checkpoint_names(model: nn.Module, path: str, module: nn.Module) -> tuple[str, str, str]:
    """What the model's checkpoints call one expert's gate, up and down projections: ``("w1", "w3", "w2")`` for
    Mixtral, ``DEFAULT_NAMES`` for most others.

    Asks transformers, whose ``save_pretrained`` splits the fused parameters back into per-expert tensors: the
    conversion runs on small tagged tensors ([E, 2, 1] and [E, 1, 1], each value naming its expert and role) and
    the names the tags come back under are read off. Falls back to ``DEFAULT_NAMES``.
    """
    experts = module.gate_up_proj.shape[0]
    tags = {f"{path}.gate_up_proj": torch.arange(2 * experts, dtype=torch.float32).reshape(experts, 2, 1),
            f"{path}.down_proj": torch.arange(2 * experts, 3 * experts, dtype=torch.float32).reshape(experts, 1, 1)}
    stored = as_saved(model, tags)
    if stored is None:
        return DEFAULT_NAMES
    found: dict[int, set[str]] = {0: set(), 1: set(), 2: set()}
    for key, tensor in stored.items():
        if tensor.numel() != 1 or not key.endswith(".weight"):
            return DEFAULT_NAMES  # stored fused, or not one tensor per expert projection
        value = int(tensor.item())
        expert, role = (value // 2, value % 2) if value < 2 * experts else (value - 2 * experts, 2)
        owner, _, child = key[:-len(".weight")].rpartition(".")
        if not owner.endswith(f".{expert}"):
            return DEFAULT_NAMES
        found[role].add(child)
    if len(stored) != 3 * experts or any(len(v) != 1 for v in found.values()):
        return DEFAULT_NAMES
    names = tuple(found[role].pop() for role in range(3))
    return names if len(set(names)) == 3 else DEFAULT_NAMES


def split_fused_experts(model: nn.Module, only: Iterable[str] | None = None
                        ) -> tuple[dict[str, tuple[nn.Module, Experts]], dict[str, str]]:
    """Replace, in place, every fused-experts module of ``model`` (or those named in ``only``) by :class:`Experts`.

    Returns ``({name: (the fused module, its Experts)}, {name: why it was kept})``: the modules replaced, and the
    modules holding 3-D floating parameters that were left as they are.
    """
    wanted = None if only is None else set(only)
    replaced: dict[str, tuple[nn.Module, Experts]] = {}
    kept: dict[str, str] = {}
    names_by_class: dict[type, tuple[str, str, str]] = {}
    for name, module in list(model.named_modules()):
        if isinstance(module, Experts) or not fused_experts_params(module) or not name:
            continue
        if wanted is not None and name not in wanted:
            continue
        problem = split_problem(module)
        if problem:
            kept[name] = problem
            continue
        if type(module) not in names_by_class:
            names_by_class[type(module)] = checkpoint_names(model, name, module)
        experts = split(module, names_by_class[type(module)])
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, experts)
        replaced[name] = (module, experts)
    return replaced, kept
