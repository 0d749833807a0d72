"""LoRA adapters from PEFT on quantkit's quantized layers: fine-tune a quantized model (QLoRA-style)::

    from peft import LoraConfig
    from quantkit.integrations.peft import from_pretrained, get_peft_model

    quantkit.quantize_(model, "int4-weight-only")
    model = get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))
    ...  # train; model.save_pretrained(path) writes the adapter as PEFT does
    model = from_pretrained(quantized_model, path)  # PeftModel.from_pretrained, the same way

PEFT picks the LoRA layer for a target module by the module's type and knows ``nn.Linear``, not quantkit's layers
(``peft.get_peft_model`` raised "Target module Int4WeightOnlyLinear(...) is not supported"). :func:`get_peft_model`
and :func:`from_pretrained` are PEFT's, with :class:`QuantizedLoraLinear` registered for every
:class:`quantkit.layers.QuantizedLinear` (:func:`on_quantized_layers`). That is PEFT's own LoRA
``Linear`` (``base(x) + lora_B(lora_A(dropout(x))) * scaling``, dropout, rsLoRA, several adapters, saving and loading
adapters as PEFT does) with two differences:

* the adapter keeps its own dtype (float32 unless the model was built in another default dtype). PEFT moves an
  adapter to its base weight's floating dtype, and a quantized layer's ``weight`` holds codes: fp8-block's are
  ``float8_e4m3fn``, in which an adapter cannot train;
* merging is refused with an error that says why: the base weight is quantized codes, and ``W + B A`` is not
  representable in them without quantizing again (which would change the layer the adapter was trained against).

The quantized base stays frozen (its codes and scales are buffers, not parameters); the gradient reaches the layers
below through the layers' input gradient (notes/backward.md). Not covered: a MoE block's expert projections (with
PEFT 0.21 on a quantized Mixtral, ``target_modules=["w1", "w2", "w3"]`` put no adapter on the experts: PEFT rewrites
such targets for transformers 5's fused experts, which ``quantize_`` has split; the attention and dense layers take
them).
"""
from __future__ import annotations

from typing import Optional

import torch

try:
    from peft.tuners.lora.layer import Linear as _PeftLoraLinear
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("quantkit.integrations.peft needs PEFT: pip install peft") from exc

from quantkit.layers import QuantizedLinear


class QuantizedLoraLinear(_PeftLoraLinear):
    """PEFT's LoRA ``Linear`` around a quantkit quantized layer: adapters in their own dtype, merging refused."""

    def __init__(self, base_layer, adapter_name: str, **kwargs):
        if not hasattr(base_layer, "weight"):
            # PEFT places the new adapter by its base layer's ``weight`` or ``qweight`` (else its first parameter:
            # an int4 layer without bias has none). Its own dispatchers for packed formats (AQLM) alias ``qweight``
            # the same way; get_peft_model / from_pretrained below remove the alias once PEFT is done.
            base_layer.qweight = base_layer._buffers[base_layer.quantized_buffers[0]]
        super().__init__(base_layer, adapter_name, **kwargs)

    def _get_in_out_features(self, module):
        return module.in_features, module.out_features  # (PEFT's own lookup warns on any type it does not know)

    def _get_base_layer_device_and_dtype(self, base_layer):
        # (device, None): PEFT moves the adapter to that device and leaves its dtype alone
        for tensor in base_layer.buffers():
            return tensor.device, None
        return None, None

    def merge(self, safe_merge: bool = False, adapter_names: Optional[list[str]] = None) -> None:
        base = self.get_base_layer()
        raise NotImplementedError(
            f"cannot merge a LoRA adapter into {type(base).__name__} ({getattr(base, 'format_name', 'quantized')}): "
            "its weight is quantized codes, and W + B·A is not representable in them without quantizing again. "
            "Keep the adapter unmerged, or merge into the original bf16 model and quantize that")


def on_quantized_layers(config):
    """``config`` (a ``peft.LoraConfig``) with :class:`QuantizedLoraLinear` registered for quantkit's quantized layers,
    so that ``get_peft_model`` puts LoRA adapters on the quantized layers its ``target_modules`` name. Returns it."""
    config._register_custom_module({QuantizedLinear: QuantizedLoraLinear})
    return config



def _drop_aliases(model: torch.nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, QuantizedLinear) and "qweight" in module.__dict__:
            del module.qweight


def get_peft_model(model: torch.nn.Module, config, **kwargs):
    """``peft.get_peft_model(model, config)`` with LoRA adapters on quantkit's quantized layers that ``config``
    (a ``peft.LoraConfig``) targets. ``kwargs`` go to PEFT."""
    import peft

    try:
        return peft.get_peft_model(model, on_quantized_layers(config), **kwargs)
    finally:
        _drop_aliases(model)


def from_pretrained(model: torch.nn.Module, path, **kwargs):
    """``peft.PeftModel.from_pretrained(model, path)`` for a quantized ``model``: the adapter's saved config with
    :class:`QuantizedLoraLinear` registered (PEFT does not save that mapping). ``kwargs`` go to PEFT."""
    from peft import PeftConfig, PeftModel

    config = kwargs.pop("config", None) or PeftConfig.from_pretrained(path)
    try:
        return PeftModel.from_pretrained(model, path, config=on_quantized_layers(config), **kwargs)
    finally:
        _drop_aliases(model)
