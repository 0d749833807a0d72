"""How far each recipe moves a model's outputs: per linear layer and for the whole model.

:func:`compare` quantizes a copy of the model with each recipe and runs the original and the copy on
the same inputs, with forward hooks on every linear layer. Per layer it reports, accumulated over
all inputs (``y`` = the original layer's output, ``ŷ`` = the quantized one's)::

    rel_error = ||ŷ - y|| / ||y||          sqnr_db = 20 log10(||y|| / ||ŷ - y||)

twice: *local* (``sqnr_db``, ``rel_error``: the quantized layer applied to the original model's
input of that layer — the error this layer's own quantization adds) and *in model*
(``*_in_model``: the layer's output inside the quantized model, which also carries the error of
every layer before it). For the model output (rows = every position of the last dimension) it
reports the mean and least cosine similarity of rows, the largest absolute difference, the relative
error and the SQNR; for causal language models also the perplexity of both models on a text and
the top-1 agreement (how often both predict the same next token).

The projections of MoE experts have no *in model* figures (NaN): the quantized model may route other tokens to an
expert than the original does, so their calls do not pair up.

What the model output is:
- an ``nn.Module``: its output tensor (for a tuple, the first tensor; for a Hugging Face output,
  ``logits`` or else ``last_hidden_state``);
- a Hugging Face directory with a causal LM head (``*ForCausalLM``/``*LMHeadModel``): the logits of
  consecutive windows of the text's tokens (no padding);
- any other Hugging Face directory (e.g. a ``BertModel``): sentence embeddings of the text's lines,
  mean-pooled over the attention mask and L2-normalized, as sentence-transformers computes them.
"""
from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from quantkit.accuracy import report as _report
from quantkit.rounding.calibration import run_model

MODULE, EMBEDDING, CAUSAL_LM = "module", "embedding", "causal-lm"


def _sqnr_db(signal: float, noise: float) -> float:
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _rel(signal: float, noise: float) -> float:
    if signal == 0.0:
        return 0.0 if noise == 0.0 else math.inf
    return math.sqrt(noise / signal)


@dataclass
class LayerError:
    """Errors of one linear layer's output, accumulated over every input (see the module docstring)."""

    name: str
    shape: tuple[int, int]  # (out_features, in_features)
    status: str  # "quantized", "skipped: <why>" or "already quantized"
    format: str  # the layer's format in the quantized model ("int4-weight-only", "float" when kept)
    sqnr_db: float
    rel_error: float
    sqnr_db_in_model: float
    rel_error_in_model: float
    calls: int  # times the layer ran over all inputs (0: the errors are NaN, nothing was measured)


@dataclass
class OutputError:
    """The whole model's output against the original's."""

    cosine_mean: float
    cosine_min: float
    max_abs_diff: float
    rel_error: float
    sqnr_db: float
    rows: int  # vectors compared (sentences, token positions, output rows)
    perplexity: float | None = None  # causal LMs: the quantized model's perplexity on the text
    top1_agreement: float | None = None  # causal LMs: share of positions with the same argmax token


@dataclass
class RecipeResult:
    label: str
    recipe: dict[str, Any]  # the plan as a dict (type, fields, ignore, override)
    quantized_layers: int
    linear_layers: int
    bytes_before: int
    bytes_after: int
    quantize_seconds: float
    output: OutputError
    layers: list[LayerError] = field(default_factory=list)

    @property
    def worst_layer(self) -> LayerError | None:
        quantized = [layer for layer in self.layers if layer.status == "quantized" and not math.isnan(layer.rel_error)]
        return max(quantized, key=lambda layer: layer.rel_error, default=None)


@dataclass
class ComparisonReport:
    model: str
    kind: str  # MODULE, EMBEDDING or CAUSAL_LM
    device: str
    dtype: str
    inputs: int  # batches run per model
    rows: int  # sentences / token positions / output rows compared
    original_perplexity: float | None
    results: list[RecipeResult]
    backends: dict[str, str] = field(default_factory=dict)  # "family on device" -> backend that ran

    def to_dict(self) -> dict[str, Any]:
        return _report.to_dict(self)

    def to_json(self, indent: int = 2) -> str:
        return _report.to_json(self, indent)

    def to_csv(self) -> str:
        return _report.to_csv(self)

    def table(self, layers: bool = True) -> str:
        return _report.table(self, layers)

    def plot(self, path: str | os.PathLike) -> Path:
        from quantkit.accuracy.plot import plot_layer_errors

        return plot_layer_errors(self, path)

    def __str__(self) -> str:
        return self.table()


# --------------------------------------------------------------------------- inputs and outputs
def _first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping):
        for key in ("logits", "last_hidden_state"):
            if isinstance(out.get(key), torch.Tensor):
                return out[key]
        values = list(out.values())
    elif isinstance(out, (tuple, list)):
        values = list(out)
    else:
        return None
    for value in values:
        found = _first_tensor(value)
        if found is not None:
            return found
    return None


def sentence_embedding(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``hidden`` [batch, tokens, features] over the attention mask, L2-normalized, in float32
    (what sentence-transformers computes for all-MiniLM-L6-v2)."""
    mask = attention_mask.unsqueeze(-1).float()
    pooled = (hidden.float() * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1)


def _output_tensor(out: Any, kind: str, item: Any) -> torch.Tensor:
    """The rows to compare [rows, features], in the model's dtype: the statistics widen a slice at a time, so
    that no float copy of a large output (an LM's logits, 4 GB in float32 at 8k tokens of a 128k vocabulary)
    is ever whole."""
    if kind == EMBEDDING:
        hidden = out["last_hidden_state"] if isinstance(out, Mapping) else out[0]
        return sentence_embedding(hidden, item["attention_mask"])
    tensor = _first_tensor(out)
    if tensor is None:
        raise ValueError(f"the model's output ({type(out).__name__}) holds no tensor to compare")
    if not tensor.is_floating_point():
        raise ValueError(f"the model's output is a {tensor.dtype} tensor; compare needs floating-point outputs")
    return tensor.detach().reshape(-1, tensor.shape[-1] if tensor.dim() else 1)


def _sum_squares(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(sum ref^2, sum (out - ref)^2) in float64, a slice at a time so that no float64 copy of a large
    output (an LM's logits) is ever whole."""
    ref2, out2 = ref.reshape(-1, ref.shape[-1] if ref.dim() else 1), out.reshape(-1, out.shape[-1] if out.dim() else 1)
    rows = max(1, (1 << 22) // max(1, ref2.shape[1]))
    signal = noise = 0.0
    for i in range(0, ref2.shape[0], rows):
        r, o = ref2[i:i + rows].double(), out2[i:i + rows].double()
        signal += r.square().sum().item()
        noise += (o - r).square().sum().item()
    return signal, noise


class _OutputStats:
    def __init__(self) -> None:
        self.cosines: list[torch.Tensor] = []
        self.max_abs = 0.0
        self.signal = 0.0
        self.noise = 0.0
        self.nll_sum = 0.0
        self.tokens = 0
        self.agree = 0
        self.positions = 0

    def add(self, ref: torch.Tensor, out: torch.Tensor) -> None:
        """ref, out: [rows, features], any float dtype (widened to float64 a slice at a time)."""
        rows = max(1, (1 << 22) // max(1, ref.shape[1]))
        for i in range(0, ref.shape[0], rows):
            r, o = ref[i:i + rows].double(), out[i:i + rows].double()
            cos = torch.nn.functional.cosine_similarity(o, r, dim=-1, eps=1e-30)
            # rows equal in both models (all-zero ones too, where 0/0 gives 0) agree: cosine 1
            self.cosines.append(torch.where((o == r).all(-1), 1.0, cos).cpu())
            if r.numel():
                diff = (o - r).abs().max().item()
                if math.isnan(diff) or diff > self.max_abs:  # a NaN stays (max() would drop it)
                    self.max_abs = diff
        signal, noise = _sum_squares(out, ref)
        self.signal += signal
        self.noise += noise

    def add_lm(self, ref_logits: torch.Tensor, logits: torch.Tensor, ids: torch.Tensor) -> None:
        """logits [B, T, V] of a window of tokens ``ids`` [B, T]: next-token NLL and argmax agreement."""
        self.nll_sum += _nll(logits, ids)
        self.tokens += ids.shape[0] * (ids.shape[1] - 1)
        self.agree += (logits.argmax(-1) == ref_logits.argmax(-1)).sum().item()
        self.positions += ids.numel()

    def result(self, lm: bool) -> OutputError:
        cos = torch.cat(self.cosines) if self.cosines else torch.zeros(0, dtype=torch.float64)
        return OutputError(
            cosine_mean=cos.mean().item() if cos.numel() else math.nan,
            cosine_min=cos.min().item() if cos.numel() else math.nan,
            max_abs_diff=self.max_abs,
            rel_error=_rel(self.signal, self.noise),
            sqnr_db=_sqnr_db(self.signal, self.noise),
            rows=cos.numel(),
            perplexity=math.exp(self.nll_sum / self.tokens) if lm and self.tokens else None,
            top1_agreement=self.agree / self.positions if lm and self.positions else None,
        )


_SLICE_VALUES = 1 << 24  # values of the logits widened to float32 at once by _nll


def _nll(logits: torch.Tensor, ids: torch.Tensor) -> float:
    """Sum of -log p(ids[t] | ids[<t]) over t >= 1 of every row; the float32 log-softmax is taken a slice of
    positions at a time (at most 2^24 values, 64 MB), never over the whole [B, T, V] logits."""
    batch, length, vocab = logits.shape
    step = max(1, _SLICE_VALUES // max(1, vocab))
    total = 0.0
    for b in range(batch):
        for start in range(0, length - 1, step):
            stop = min(start + step, length - 1)
            logp = torch.log_softmax(logits[b, start:stop].float(), dim=-1)
            total -= logp.gather(-1, ids[b, start + 1:stop + 1, None]).sum().item()
    return total


# --------------------------------------------------------------------------- per-layer hooks
def _linear_layers(model: nn.Module) -> dict[str, nn.Module]:
    from quantkit.layers import QuantizedLinear

    return {name: m for name, m in model.named_modules() if isinstance(m, (nn.Linear, QuantizedLinear))}


class _LayerStats:
    def __init__(self) -> None:
        self.signal = 0.0
        self.local_noise = 0.0
        self.model_signal = 0.0
        self.model_noise = 0.0
        self.calls = 0


class _LayerHooks:
    """Hooks on the original model (store outputs, run the quantized twin on the same input) and on
    the quantized model (compare its outputs with the stored ones, call by call)."""

    def __init__(self, original: nn.Module, quantized: nn.Module) -> None:
        self.original = _linear_layers(original)
        quantized_layers = _linear_layers(quantized)
        self.twins = {name: quantized_layers[name] for name in self.original if name in quantized_layers}
        self.stats = {name: _LayerStats() for name in self.twins}
        from quantkit.layers.experts import Expert

        # expert projections: which tokens reach them depends on the routing, which quantization may change
        self.routed = {f"{parent}.{child}" if parent else child for parent, module in original.named_modules()
                       if isinstance(module, Expert) for child in module.names}
        self.stored: dict[str, list[torch.Tensor]] = {}
        self._handles: list = []
        self._local = False  # the twin runs on the original's input: not a call of the quantized model

    def __enter__(self) -> "_LayerHooks":
        for name, module in self.original.items():
            if name in self.twins:
                # with_kwargs: a layer called as fc(input=x) gets its input to the twin too
                self._handles.append(module.register_forward_hook(self._original_hook(name), with_kwargs=True))
                self._handles.append(self.twins[name].register_forward_hook(self._quantized_hook(name)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self.stored.clear()

    def _original_hook(self, name: str):
        twin = self.twins[name]

        def hook(module, args, kwargs, output):
            if not isinstance(output, torch.Tensor):
                return
            stats = self.stats[name]
            y = output.detach()
            self._local = True
            try:
                local = twin(*args, **kwargs).detach()
            finally:
                self._local = False
            signal, noise = _sum_squares(local, y)
            stats.signal += signal
            stats.local_noise += noise
            stats.calls += 1
            if name not in self.routed:
                self.stored.setdefault(name, []).append(y)
        return hook

    def _quantized_hook(self, name: str):
        def hook(module, args, output):
            pending = self.stored.get(name)
            if self._local or not pending or not isinstance(output, torch.Tensor):
                return
            signal, noise = _sum_squares(output.detach(), pending.pop(0))
            stats = self.stats[name]
            stats.model_signal += signal
            stats.model_noise += noise
        return hook

    def end_batch(self) -> None:
        self.stored.clear()


# --------------------------------------------------------------------------- loading
def _is_causal_lm(config) -> bool:
    names = list(getattr(config, "architectures", None) or [])
    return any(n.endswith("ForCausalLM") or n.endswith("LMHeadModel") for n in names)


def load_hf_model(path: str | os.PathLike, device: torch.device, dtype: torch.dtype):
    """(model, tokenizer, kind) from a local Hugging Face directory, without network access."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such model directory")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a Hugging Face model directory (no config.json)")
    try:
        import transformers
    except ImportError:
        raise ValueError("comparing a Hugging Face model directory needs the transformers package "
                         "(pip install 'quantkit[demo]')") from None
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    kind = CAUSAL_LM if _is_causal_lm(config) else EMBEDDING
    auto = transformers.AutoModelForCausalLM if kind == CAUSAL_LM else transformers.AutoModel
    model = auto.from_pretrained(path, local_files_only=True)
    model = model.to(device=device, dtype=dtype).eval()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError) as exc:
        raise FileNotFoundError(f"{path}: no usable tokenizer in the model directory ({exc})") from None
    return model, tokenizer, kind


def read_text(path: str | os.PathLike) -> str:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"text file {path} does not exist")
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise ValueError(f"text file {path} is empty: give some text to run the models on")
    return text


def embedding_batches(tokenizer, lines: Sequence[str], batch_size: int, max_length: int, device) -> list[dict]:
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            batch_size = 1
        else:
            tokenizer.pad_token = tokenizer.eos_token
    batches = []
    for i in range(0, len(lines), batch_size):
        enc = tokenizer(list(lines[i:i + batch_size]), padding=True, truncation=True, max_length=max_length,
                        return_tensors="pt")
        batches.append({k: v.to(device) for k, v in enc.items()})
    return batches


def lm_batches(tokenizer, text: str, batch_size: int, max_length: int, device) -> list[dict]:
    """Consecutive windows of ``max_length`` tokens of the whole text (the last one shorter), no padding."""
    ids = tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"]
    if len(ids) < 2:
        raise ValueError("the text has fewer than 2 tokens: perplexity needs at least one next token")
    windows = [ids[i:i + max_length] for i in range(0, len(ids), max_length)]
    windows = [w for w in windows if len(w) >= 2] or windows[:1]
    full = [w for w in windows if len(w) == max_length]
    rest = [w for w in windows if len(w) != max_length]
    batches = []
    for i in range(0, len(full), batch_size):
        batches.append({"input_ids": torch.tensor(full[i:i + batch_size], device=device)})
    for w in rest:
        batches.append({"input_ids": torch.tensor([w], device=device)})
    return batches


# --------------------------------------------------------------------------- the comparison
def _label(recipe: Any) -> str:
    from quantkit.recipes import QuantizationPlan, Recipe

    if isinstance(recipe, (str, os.PathLike)):
        text = os.fspath(recipe)
        return Path(text).name if (os.sep in text or Path(text).suffix) else text
    if isinstance(recipe, Recipe):
        return str(recipe)
    if isinstance(recipe, QuantizationPlan):
        return str(recipe.default) if recipe.default else "plan"
    if isinstance(recipe, Mapping):
        return str(recipe.get("type", "recipe"))
    return type(recipe).__name__


def _as_batches(inputs: Any) -> list:
    if inputs is None:
        raise ValueError("compare needs sample inputs for an nn.Module: inputs=tensor, a tuple of arguments, a "
                         "dict of keyword arguments, or a list of those (one per batch)")
    batches = list(inputs) if isinstance(inputs, list) else [inputs]
    if not batches:
        raise ValueError("inputs is an empty list: give at least one sample input")
    return batches


def compare(
    model: nn.Module | str | os.PathLike,
    recipes: Any,
    *,
    inputs: Any = None,
    text: str | os.PathLike | None = None,
    calibration: Any = None,
    ignore: Iterable[str] = (),
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    batch_size: int = 16,
    max_length: int | None = None,
    progress: bool = False,
) -> ComparisonReport:
    """Quantize a copy of ``model`` with each recipe and measure how far its outputs move.

    Args:
        model: an ``nn.Module`` (then ``inputs`` is required) or the path of a local Hugging Face
            model directory (then ``text`` is required; loaded offline with its tokenizer).
        recipes: one recipe or a list of them, in any form ``quantize_`` takes (names, Recipe
            objects, dicts, recipe-file paths, plans).
        inputs: for an ``nn.Module``: one model input — a Tensor (``model(x)``), a tuple of
            arguments (``model(*x)``) or a dict of keyword arguments (``model(**x)``) — or a list
            of such inputs, one per batch.
        text: a text file: its non-empty lines are the sentences of an embedding model; the whole
            text, in windows of ``max_length`` tokens, is what a causal LM is scored on.
        calibration: inputs for calibrated recipes (e.g. ``Int4WeightOnly(rounding="gptq")``): for an
            ``nn.Module`` what ``quantize_(..., calibration=)`` takes; for a directory a text file
            (its lines, for an embedding model; windows of its tokens, for a causal LM). Use other
            text than ``text``, or the measured error flatters the recipe.
        ignore: module patterns to keep in high precision in every recipe (e.g. ``["lm_head"]``).
        device: where a directory's model runs (default: cuda when available); an ``nn.Module``
            and its inputs are used where they are.
        dtype: a directory's model dtype (default float32).
        batch_size, max_length: sentences per batch and their token limit (default 256); for a
            causal LM, windows per batch and tokens per window (default 512); both capped by the model.
        progress: tqdm progress bars.

    Raises ValueError for inputs that do not fit the model, a recipe that quantizes nothing in
    it, an empty text file; FileNotFoundError for missing files.
    """
    from quantkit.api import quantize_
    from quantkit.ops import backend_report
    from quantkit.recipes import load_plan

    recipe_list = list(recipes) if isinstance(recipes, (list, tuple)) else [recipes]
    if not recipe_list:
        raise ValueError("give at least one recipe to compare")
    plans = [(_label(r), load_plan(r)) for r in recipe_list]
    labels = [label for label, _ in plans]
    for i, label in enumerate(labels):
        if labels.count(label) > 1:
            labels[i] = f"{label} #{labels[:i].count(label) + 1}"

    calibration_batches = None
    if isinstance(model, (str, os.PathLike)):
        if text is None:
            raise ValueError("comparing a model directory needs text=<a text file> to run the models on")
        body = read_text(text)  # check the texts before the slow load
        calib_text = None if calibration is None else read_text(calibration)
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        original, tokenizer, kind = load_hf_model(model, dev, dtype)
        model_name = os.fspath(model)
        limit = getattr(original.config, "max_position_embeddings", None) or 512
        if kind == CAUSAL_LM:
            window = min(max_length or 512, limit)
            batches = lm_batches(tokenizer, body, batch_size, window, dev)
        else:
            tokens = getattr(tokenizer, "model_max_length", None)  # RoBERTa: 514 positions, 512 tokens
            if isinstance(tokens, int) and 0 < tokens < limit:
                limit = tokens
            window = min(max_length or 256, limit)
            lines = [line.strip() for line in body.splitlines() if line.strip()]
            batches = embedding_batches(tokenizer, lines, batch_size, window, dev)
        if calib_text is not None:
            if kind == CAUSAL_LM:
                calibration_batches = lm_batches(tokenizer, calib_text, batch_size, window, dev)
            else:
                calib_lines = [line.strip() for line in calib_text.splitlines() if line.strip()]
                calibration_batches = embedding_batches(tokenizer, calib_lines, batch_size, window, dev)
    else:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module or a model directory path, got {type(model).__name__}")
        original, kind, model_name = model, MODULE, type(model).__name__
        batches = _as_batches(inputs)
        calibration_batches = calibration
        if calibration is not None and not isinstance(calibration, (torch.Tensor, Mapping, str, bytes)):
            calibration_batches = list(calibration)  # every recipe calibrates on the same items (a generator once)
        dev = next((p.device for p in original.parameters()), torch.device("cpu"))
        dtype = next((p.dtype for p in original.parameters() if p.is_floating_point()), dtype)

    if not _linear_layers(original):
        raise ValueError(f"{model_name} has no nn.Linear layers: nothing to quantize")
    modes = [(module, module.training) for module in original.modules()]  # each submodule's own mode
    original.eval()
    from quantkit.layers.experts import split_fused_experts  # as the other quantkit imports here: at use

    # Fused MoE experts are split for the comparison (views, no copy), so that each expert projection gets its row
    # in the per-layer table as the quantized model's do; the model gets its fused modules back at the end.
    split, _ = split_fused_experts(original)
    try:
        # run the original once first: inputs that do not fit fail here, with a clear message
        with torch.no_grad():
            try:
                first = run_model(original, batches[0])
            except (RuntimeError, TypeError, ValueError, IndexError, KeyError) as exc:
                raise ValueError(f"the sample inputs do not fit the model ({type(exc).__name__}: {exc})") from exc
            _output_tensor(first, kind, batches[0])
        del first
        results = []
        original_lm = _OutputStats()
        for index, (label, plan) in enumerate(plans):
            results.append(_compare_one(original, labels[index], plan, kind, batches, calibration_batches, ignore,
                                        original_lm if index == 0 else None, progress, quantize_))
    finally:
        for name, (fused, _) in split.items():
            parent, _, attr = name.rpartition(".")
            setattr(original.get_submodule(parent) if parent else original, attr, fused)
        for module, training in modes:
            module.training = training

    rows = results[0].output.rows if results else 0
    original_ppl = None
    if kind == CAUSAL_LM and original_lm.tokens:
        original_ppl = math.exp(original_lm.nll_sum / original_lm.tokens)
    backends = {f"{family} on {dev_name}": backend for (family, dev_name), (backend, _) in
                sorted(backend_report().items()) if family.endswith(".linear") and dev_name.startswith(dev.type)}
    return ComparisonReport(model=model_name, kind=kind, device=str(dev), dtype=str(dtype).removeprefix("torch."),
                            inputs=len(batches), rows=rows, original_perplexity=original_ppl, results=results,
                            backends=backends)


def _compare_one(original, label, plan, kind, batches, calibration, ignore, original_lm, progress, quantize_
                 ) -> RecipeResult:
    quantized = copy.deepcopy(original)
    start = time.perf_counter()
    try:
        qreport = quantize_(quantized, plan, ignore=ignore, calibration=calibration)
    except ValueError as exc:
        if calibration is None and "calibration" in str(exc):
            raise ValueError(f"recipe {label}: {exc} (compare: pass calibration=..., or --calibration FILE)") from None
        raise
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if not qreport.quantized:
        reasons = sorted({m.reason for m in qreport.skipped})
        raise ValueError(f"recipe {label} quantizes nothing in this model: all {len(qreport.modules)} linear "
                         f"layers were kept ({'; '.join(reasons[:3]) or 'no linear layers'})")
    status = {m.name: ("quantized" if m.status == "quantized" else
                       m.status if m.status != "skipped" else f"skipped: {m.reason}") for m in qreport.modules}

    out_stats = _OutputStats()
    iterator: Iterable = batches
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(batches, desc=f"comparing {label}", unit="batch", leave=False)
    with _LayerHooks(original, quantized) as hooks, torch.no_grad():
        for item in iterator:
            ref_out = run_model(original, item)
            q_out = run_model(quantized, item)
            hooks.end_batch()
            ref = _output_tensor(ref_out, kind, item)
            out = _output_tensor(q_out, kind, item)
            if ref.shape != out.shape:
                raise ValueError(f"recipe {label}: the quantized model's output has shape {tuple(out.shape)}, "
                                 f"the original's {tuple(ref.shape)}")
            out_stats.add(ref, out)
            if kind == CAUSAL_LM:
                ref_logits, logits = _first_tensor(ref_out), _first_tensor(q_out)
                out_stats.add_lm(ref_logits, logits, item["input_ids"])
                if original_lm is not None:
                    original_lm.nll_sum += _nll(ref_logits, item["input_ids"])
                    original_lm.tokens += item["input_ids"].shape[0] * (item["input_ids"].shape[1] - 1)
            del ref_out, q_out
        layers = []
        for name, stats in hooks.stats.items():
            module = hooks.twins[name]
            q_format = getattr(module, "format_name", "") or "float"
            paired = stats.calls and name not in hooks.routed
            layers.append(LayerError(
                name=name,
                shape=(module.out_features, module.in_features),
                status=status.get(name, "not a target"),
                format=q_format,
                # a layer that never ran has no error to report: NaN, not a perfect 0
                sqnr_db=_sqnr_db(stats.signal, stats.local_noise) if stats.calls else math.nan,
                rel_error=_rel(stats.signal, stats.local_noise) if stats.calls else math.nan,
                sqnr_db_in_model=_sqnr_db(stats.model_signal, stats.model_noise) if paired else math.nan,
                rel_error_in_model=_rel(stats.model_signal, stats.model_noise) if paired else math.nan,
                calls=stats.calls,
            ))
    del quantized
    return RecipeResult(label=label, recipe=plan.to_dict(), quantized_layers=len(qreport.quantized),
                        linear_layers=len(qreport.modules), bytes_before=qreport.bytes_before,
                        bytes_after=qreport.bytes_after, quantize_seconds=seconds,
                        output=out_stats.result(kind == CAUSAL_LM), layers=layers)
