"""What both benchmarks share: the timer, the copy-bandwidth ceiling, the environment record, recipe
specs, Markdown tables and JSON output."""
from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from quantkit.recipes import RECIPES, RecipeError, load_plan

#: do_bench's settings in PERFORMANCE.md; the CPU fallback reads them as time budgets too
WARMUP_MS = 25
REP_MS = 100


def resolve_device(device: torch.device | str | None) -> torch.device:
    """The device to run on, with an explicit index for CUDA (the backend report keys on ``cuda:0``)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def cuda_sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_ms(fn: Callable[[], Any], device: torch.device | str, warmup_ms: float = WARMUP_MS,
               rep_ms: float = REP_MS) -> float:
    """Median milliseconds of one ``fn()`` call.

    On a GPU this is ``triton.testing.do_bench(fn, warmup, rep, return_mode="median")`` (it clears
    the L2 cache before every call, so weights come from HBM as in a real model). Elsewhere a
    ``perf_counter`` loop with the same budgets runs instead: the harness must run, and so be
    tested, on machines without a GPU.
    """
    device = torch.device(device)
    if device.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    return _cpu_median_ms(fn, warmup_ms, rep_ms)


def host_us_per_call(fn: Callable[[], Any], calls: int = 100, batches: int = 5) -> float:
    """Host microseconds one ``fn()`` call takes to return on a CUDA device: the median over ``batches``
    of ``calls`` back-to-back calls without synchronizing, so the GPU work queues behind the host (the
    queue holds ~1,000 launches; a call here makes one to a few). The eager timer hides host time only
    up to the GPU time it spends between calls, so a cell whose host time is above that reads the host."""
    fn()
    torch.cuda.synchronize()
    per_batch = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_batch.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_batch)


def synced_us_per_call(fn: Callable[[], Any], calls: int = 200, warmup: int = 10) -> float:
    """Microseconds a call of ``calls`` back-to-back ``fn()`` calls, synchronized at the end: the larger of the
    host's and the GPU's time a call (the probes of round 36 that set a training step's parts against bf16)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def _cpu_median_ms(fn: Callable[[], Any], warmup_ms: float, rep_ms: float, min_calls: int = 3,
                   max_calls: int = 1000) -> float:
    start = time.perf_counter()
    fn()  # always at least one warm-up call (first-call costs: allocation, lazy imports)
    while (time.perf_counter() - start) * 1e3 < warmup_ms:
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_calls or ((time.perf_counter() - start) * 1e3 < rep_ms and len(times) < max_calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def copy_bandwidth_gbps(device: torch.device | str, nbytes: int | None = None, warmup_ms: float = WARMUP_MS,
                        rep_ms: float = REP_MS) -> float:
    """Device-to-device copy speed in GB/s, counting bytes read + written (the machine's practical ceiling
    for a memory-bound kernel). 1 GiB on a GPU, 64 MiB elsewhere unless ``nbytes`` says otherwise."""
    device = torch.device(device)
    if nbytes is None:
        nbytes = 2**30 if device.type == "cuda" else 2**26
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    ms = measure_ms(lambda: dst.copy_(src), device, warmup_ms, rep_ms)
    moved = 2 * src.numel() * src.element_size()
    del src, dst
    return moved / (ms * 1e-3) / 1e9


def device_name(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as typed, with an absolute script path shortened to the current directory's view."""
    argv = list(sys.argv if argv is None else argv)
    if argv and os.path.isabs(argv[0]):
        try:
            argv[0] = os.path.relpath(argv[0])
        except ValueError:
            pass
    if argv and argv[0].replace(os.sep, "/").endswith("quantkit/__main__.py"):
        argv[0:1] = ["python", "-m", "quantkit"]
    elif argv and os.path.basename(argv[0]) == "quantkit":
        argv[0] = "quantkit"
    return " ".join(shlex.quote(a) for a in argv)


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: torch.device | str, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Everything a reader needs to know which machine and software a table came from."""
    import quantkit

    device = torch.device(device)
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 - not installed or broken: record that
        triton_version = None
    env: dict[str, Any] = {
        "device": device_name(device),
        "device_type": device.type,
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "quantkit": quantkit.__version__,
        "git_commit": _git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command_line(argv),
        "quantkit_backend": os.environ.get("QUANTKIT_BACKEND", "auto"),
        "quantkit_autotune": os.environ.get("QUANTKIT_AUTOTUNE", "0"),
    }
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        env["capability"] = f"sm_{major}{minor}"
        env["memory_GiB"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
        from quantkit.kernels import tuning

        with torch.cuda.device(device):
            env["tuned_tables"] = tuning.tables_in_use()
    return env


def tuned_tables_line(tables: dict[str, dict]) -> str | None:
    """One Markdown line saying where the kernel configs came from, or None when every family ran its
    own shipped table alone."""
    borrowed = any(t["borrowed"] for t in tables.values())
    user = any(t["user_cache"] for t in tables.values())
    if not borrowed and not user:
        return None
    parts = []
    for family, t in tables.items():
        text = f"{family} {t['own']} own"
        if t["borrowed"]:
            text += f" + {t['borrowed']} borrowed from {', '.join(t['lenders'])}"
        if t["user_cache"]:
            text += f", {t['user_cache']} in the user cache (these first)"
        parts.append(text)
    return "- Tuned configs: " + "; ".join(parts)


def environment_lines(env: dict[str, Any]) -> list[str]:
    """The environment as Markdown lines to put above a table."""
    dev = env["device"] + (f" ({env['capability']})" if env.get("capability") else "")
    versions = f"torch {env['torch']}, triton {env['triton']}"
    if env.get("cuda"):
        versions += f", CUDA {env['cuda']}"
    lines = [f"- Device: {dev}", f"- Software: {versions}, Python {env['python']}, quantkit {env['quantkit']}"
             + (f" ({env['git_commit']})" if env.get("git_commit") else ""),
             f"- Date: {env['date']}", f"- Command: `{env['command']}`"]
    tables_line = tuned_tables_line(env.get("tuned_tables") or {})
    if tables_line:
        lines.append(tables_line)
    if env.get("quantkit_backend", "auto") != "auto" or env.get("quantkit_autotune", "0") != "0":
        lines.append(f"- QUANTKIT_BACKEND={env.get('quantkit_backend')}, "
                     f"QUANTKIT_AUTOTUNE={env.get('quantkit_autotune')}")
    return lines


# --------------------------------------------------------------------------- recipes
def parse_recipe(spec: str):
    """``"int4-weight-only"``, ``"int4-weight-only:group_size=64,symmetric=true"`` or a recipe file path
    -> (label, recipe-like accepted by quantize_)."""
    spec = spec.strip()
    if ":" in spec and spec.split(":", 1)[0] in RECIPES:
        name, rest = spec.split(":", 1)
        fields: dict[str, Any] = {"type": name}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            if "=" not in item:
                raise RecipeError(f"recipe {spec!r}: expected key=value after ':', got {item!r}")
            key, value = (s.strip() for s in item.split("=", 1))
            fields[key] = _parse_value(value)
        load_plan(fields)  # validate now, with the recipe's own error message
        return spec, fields
    load_plan(spec)
    return (Path(spec).stem if spec not in RECIPES else spec), spec


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        return text


def parse_int_list(text: str | Sequence[int], what: str = "") -> list[int]:
    """``"1,16,128"`` -> [1, 16, 128]; a ValueError (prefixed with ``what``, the flag) for anything else."""
    if not isinstance(text, str):
        return [int(v) for v in text]
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"{what}{': ' if what else ''}expected a comma-separated list of positive integers, "
                         f"got {text!r}")
    return values


def parse_shapes(text: str | Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``"4096x4096,14336x4096"`` -> [(N, K), ...] with N = out_features, K = in_features."""
    if not isinstance(text, str):
        return [(int(n), int(k)) for n, k in text]
    shapes = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        parts = item.lower().replace("×", "x").split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"shape {item!r}: expected NxK (out_features x in_features), e.g. 14336x4096")
        shapes.append((int(parts[0]), int(parts[1])))
    if not shapes:
        raise ValueError("no shapes given")
    return shapes


# --------------------------------------------------------------------------- output
def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A GitHub Markdown table; ``align`` is one letter per column (l or r), right by default for numbers."""
    align = align or "l" * len(header)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join("" if c is None else str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: float | None, spec: str, missing: str = "n/a") -> str:
    return missing if value is None else format(value, spec)


def write_json(path: str | os.PathLike, data: dict[str, Any]) -> Path:
    from quantkit.atomic import write_text

    return write_text(path, json.dumps(data, indent=1, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (torch.dtype, torch.device)):
        return str(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: not a JSON file: {exc}") from None
    if not isinstance(data, dict) or "kind" not in data:
        raise ValueError(f"{path}: not a quantkit bench result (no 'kind' field)")
    return data


def module_nbytes(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def layer_backends(model: torch.nn.Module, device: torch.device) -> str:
    """Which path ran each quantized format's forward in ``model`` ("triton", "reference", or both)."""
    from quantkit.layers import QuantizedLinear
    from quantkit.ops import backend_report

    report = backend_report()
    found = set()
    for m in model.modules():
        if isinstance(m, QuantizedLinear):
            family = m.format_name.replace("-", "_")
            backend = report.get((f"{family}.linear", str(device)))
            found.add(backend[0] if backend else "not run")
    if not found:
        return "torch"
    return "+".join(sorted(found))
