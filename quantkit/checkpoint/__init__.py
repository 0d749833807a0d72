"""Checkpoints: safetensors save/load in the formats other tools read, and a streaming converter.

    quantkit.save_quantized(model, "out/")                  # compressed-tensors (vLLM, transformers)
    quantkit.save_quantized(model, "out/", format="fp8")    # DeepSeek-V3 / Hugging Face block fp8
    model = quantkit.load_quantized("out/")                 # ours, compressed-tensors, fp8, GPTQ, AWQ
    quantkit.checkpoint.convert_checkpoint("hf-model/", "out/", "int4-weight-only")   # streaming
"""
from quantkit.checkpoint.convert import ConvertReport, convert_checkpoint
from quantkit.checkpoint.formats import CT_FORMAT, FORMATS, HF_FP8_FORMAT
from quantkit.checkpoint.load import load_quantized
from quantkit.checkpoint.save import save_quantized
from quantkit.checkpoint.storage import CheckpointError

__all__ = [
    "save_quantized",
    "load_quantized",
    "convert_checkpoint",
    "ConvertReport",
    "CheckpointError",
    "FORMATS",
    "CT_FORMAT",
    "HF_FP8_FORMAT",
]
