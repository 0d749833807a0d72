"""Kernel configs chosen by problem size, tuned per GPU and cached, so a first call never autotunes.

Each kernel family module (``quantkit.kernels.<family>``) that wants tuned configs defines::

    def default_config(M, N, K) -> dict                # heuristic, always valid
    def candidate_configs(M, N, K) -> list[dict]        # the search space for this problem
    def linear(x, *buffers, config=None)                # runs with `config` when given

and calls :func:`get_config(family, M, N, K, module)` in ``linear`` when ``config`` is None.

Lookup order for a problem (M bucketed to the next power of two, N and K exact):
  1. the user's cache ``$QUANTKIT_CACHE_DIR`` (default ``~/.cache/quantkit``)/tuned-<gpu>.json,
  2. the table shipped in ``quantkit/kernels/tuned/<family>.json`` for this GPU name,
  3. with ``QUANTKIT_AUTOTUNE=1`` (and not while a CUDA graph is being captured): time every
     candidate now, keep the fastest, save it to the user cache,
  4. the entry for the problem in the shipped table of a GPU of the same compute capability
     (``tuned/devices.json`` records each shipped table's GPU), the nearest SM count first
     (:func:`table_sources`): an H800 or H100 PCIe runs the H100's configs rather than the defaults,
  5. the entry of 1., 2. or 4. for the same N and K at the nearest tuned M bucket of the same range
     (M = 1, 2–16, 17–256, > 256; :func:`nearest_tuned`), so a prefill at M = 2048 runs what was
     tuned at 1024 rather than the untuned default,
  6. ``default_config(M, N, K)``.
Results are memoized in-process, so after the first call per shape the cost is one dict lookup.

``python -m quantkit.kernels.tuning --family int4_weight_only --out tuned.json`` sweeps the Llama
shapes of PERFORMANCE.md (``--shapes 1024x4096,...`` others, ``--m`` the token counts; ``--cells shipped``
every problem some shipped table of the family holds) on the current GPU and writes a table in the
shipped format, rewritten after each problem so that an interrupted sweep keeps what it timed. The sweep
times each candidate replayed from a CUDA graph (:func:`gpu_time_ms`): eager timings of short
layers measure the host's Python when it is slower than the GPU, and would rank configs by it. Configs
within ``EAGER_TIE`` of the fastest on the GPU are then timed eagerly through the layers' launch plans,
and the fastest of them eagerly is kept (:func:`pick_config`): at equal GPU time, the one that costs the
host less. Before that the first pass's two fastest configs and the default are timed twice more, in
alternating order, and the pick is made among them on those times (:func:`retime_finalists`): one pass in
list order reads the configs late in the list on a GPU warmed by the others.
"""
from __future__ import annotations

import argparse
import fcntl
import functools
import json
import logging
import math
import os
import re
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

_SHIPPED_DIR = Path(__file__).with_name("tuned")
_DEVICES_FILE = "devices.json"  # {gpu name: {"capability": "9.0", "multiprocessors": 132}} of the shipped tables
_MEMO: dict[tuple, dict] = {}
logger = logging.getLogger("quantkit")


def m_bucket(m: int) -> int:
    """Round M up to a power of two: configs are tuned per bucket, not per exact M."""
    return 1 if m <= 1 else 1 << (m - 1).bit_length()


def _current_device() -> int:
    """The current CUDA device's index; -1 without CUDA (the CPU tests fake a GPU's name and tables)."""
    try:
        return torch.cuda.current_device()
    except (AssertionError, RuntimeError):
        return -1


def gpu_name(index: int | None = None) -> str:
    """The name of GPU ``index`` (None: the current device, on which the layers run their kernels: a model
    spread over GPUs of two kinds reads each one's configs)."""
    return _gpu_name(_current_device() if index is None else index)


@functools.lru_cache(maxsize=None)
def _gpu_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def _key(m: int, n: int, k: int) -> str:
    return f"{m_bucket(m)},{n},{k}"


def gpu_file_name() -> str:
    """This GPU's name with every character but letters and digits as ``_``, for file names."""
    return "".join(c if c.isalnum() else "_" for c in gpu_name())


def user_cache_dir() -> Path:
    """``$QUANTKIT_CACHE_DIR`` (``~`` expanded; unset or empty: ``~/.cache/quantkit``), as an absolute path so that
    messages name it in full."""
    root = os.environ.get("QUANTKIT_CACHE_DIR") or str(Path.home() / ".cache" / "quantkit")
    return Path(root).expanduser().absolute()


def user_cache_path() -> Path:
    return user_cache_dir() / f"tuned-{gpu_file_name()}.json"


def device_props(index: int | None = None) -> dict:
    """What decides whether another GPU's tuned configs suit this one: the compute capability (the
    kernels each config can run, shared memory per SM) and the SM count (the persistent grids, waves).
    None: the current device."""
    return dict(_device_props(_current_device() if index is None else index))


@functools.lru_cache(maxsize=None)
def _device_props(index: int) -> tuple:
    props = torch.cuda.get_device_properties(index)
    return ("capability", f"{props.major}.{props.minor}"), ("multiprocessors", props.multi_processor_count)


def _shipped_devices() -> dict[str, dict]:
    path = _SHIPPED_DIR / _DEVICES_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def table_sources(gpu: str, props: dict, tables: dict[str, dict], devices: dict[str, dict]) -> list[str]:
    """The GPU names of ``tables`` whose entries serve ``gpu`` (with ``props``), lowest priority first:
    GPUs of the same compute capability, the farthest SM count first, then ``gpu``'s own table. Other
    capabilities never serve: their configs may not compile or fit here."""
    siblings = [name for name in tables if name != gpu
                and devices.get(name, {}).get("capability") == props["capability"]]
    siblings.sort(key=lambda name: (-abs(devices[name].get("multiprocessors", 0) - props["multiprocessors"]), name))
    return siblings + ([gpu] if gpu in tables else [])


def _shipped_split(family: str) -> tuple[dict[str, dict], dict[str, dict], list[str]]:
    """(the current GPU's own shipped entries, those it borrows from its siblings' tables, the GPUs it borrows
    from, the nearest first: :func:`table_sources`)."""
    props = device_props()
    return _shipped_split_for(family, gpu_name(), props["capability"], props["multiprocessors"])


@functools.lru_cache(maxsize=None)
def _shipped_split_for(family: str, gpu: str, capability: str, multiprocessors: int):
    path = _SHIPPED_DIR / f"{family}.json"
    if not path.is_file():
        return {}, {}, []
    tables = json.loads(path.read_text())
    props = {"capability": capability, "multiprocessors": multiprocessors}
    sources = table_sources(gpu, props, tables, _shipped_devices())
    lenders = [name for name in sources if name != gpu]
    if lenders:
        logger.info("quantkit: %s configs on %s: %s table%s of %s", family, gpu,
                    "its own, completed from the" if gpu in sources else "no table of its own; the",
                    "s" if len(lenders) > 1 else "", ", ".join(reversed(lenders)))
    borrowed: dict[str, dict] = {}
    for name in lenders:
        borrowed.update(tables[name])
    return tables.get(gpu, {}), borrowed, lenders[::-1]


def _shipped(family: str) -> dict[str, dict]:
    """The shipped entries for the current GPU: its own table over those it borrows."""
    own, borrowed, _ = _shipped_split(family)
    return {**borrowed, **own}


def tables_in_use() -> dict[str, dict]:
    """Per family, where this GPU's configs come from: its own shipped entries, those it borrows (and the
    GPUs it borrows from, the nearest first) and the user cache's entries (benchmarks record this, since
    a user cache or a borrowed table changes what runs)."""
    user = _read_user_cache()
    report: dict[str, dict] = {}
    for path in sorted(_SHIPPED_DIR.glob("*.json")):
        if path.name == _DEVICES_FILE:
            continue
        own, borrowed, lenders = _shipped_split(path.stem)
        report[path.stem] = {"own": len(own), "borrowed": len(borrowed.keys() - own.keys()), "lenders": lenders,
                             "user_cache": len(user.get(path.stem, {}))}
    return report


def _load_user_cache(path: Path) -> dict[str, dict[str, dict]]:
    """The user cache at ``path`` ({} where there is none); ValueError naming ``path`` where it is not JSON of
    the shape {family: {"M,N,K": config}}."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(entries, dict) for entries in data.values()):
        raise ValueError(f"{path} is not a tuned-config cache: expected {{family: {{\"M,N,K\": config}}}}")
    return data


def _read_user_cache() -> dict[str, dict[str, dict]]:
    """The user cache's entries by family; a file that cannot be read, or is not a cache (truncated, edited
    by hand), reads as empty, with one warning naming it, rather than failing every layer's first call."""
    path = user_cache_path()
    try:
        return _load_user_cache(path)
    except (OSError, ValueError) as exc:
        if ("file", str(path)) not in _WARNED:
            _WARNED.add(("file", str(path)))
            warnings.warn(f"quantkit: ignoring the tuned configs of the user cache: {exc}", stacklevel=3)
        return {}


def _write_user_cache(family: str, key: str, config: dict) -> None:
    _write_user_entries({family: {key: config}})


def _write_user_entries(entries: dict[str, dict[str, dict]]) -> None:
    """Add ``entries`` {family: {key: config}} to the user cache in one write. A lock file beside it keeps two
    processes that write at once (autotuning, installing) from replacing each other's entries. ValueError naming
    the file where it is not a cache (it holds what the user tuned: left to mend, not replaced); OSError where
    it cannot be written."""
    path = user_cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (released when the file closes)
        data = _load_user_cache(path)
        for family, configs in entries.items():
            data.setdefault(family, {}).update(configs)
        _write_json(path, data)  # atomic: a concurrent reader sees the old or the new file, never half


_WARNED: set = set()  # (family, key) of the user-cache entries already warned about, ("file", path) of the files
_KEY = re.compile(r"[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*")  # a table's key: M bucket, N, K


def _valid_entries(family: str, entries: dict[str, dict], module) -> dict[str, dict]:
    """The user cache's entries that ``module.check_config_entry`` accepts. One written by another version of
    quantkit (or edited by hand) that this one cannot run is skipped with a warning naming it and the file,
    rather than failing every call that would have used it; so is a ``TILED`` decode config, which expects
    weights in a layout the layers do not keep."""
    check = getattr(module, "check_config_entry", lambda config: None)
    valid = {}
    for key, config in entries.items():
        try:
            if not _KEY.fullmatch(key):
                raise ValueError("the key is not M,N,K")
            if isinstance(config, dict) and config.get("TILED"):
                # (it would run, on the wrong bytes: a silently wrong output rather than an error)
                raise ValueError("a TILED decode config reads weights rearranged by wo_decode_sm90.tile_weight; "
                                 "the layers keep theirs row-major")
            check(config)
        except (ValueError, TypeError, AttributeError) as exc:
            if (family, key) not in _WARNED:
                _WARNED.add((family, key))
                warnings.warn(f"quantkit: ignoring the {family} config for (M, N, K) = ({key}) in "
                              f"{user_cache_path()}: {exc}", stacklevel=3)
            continue
        valid[key] = config
    return valid


def get_config(family: str, m: int, n: int, k: int, module, bench: Callable[[dict], float] | None = None) -> dict:
    """The config ``module`` (a kernel family) should use for an [m, k] x [n, k]^T problem on the current GPU
    (the layers make their tensors' GPU current)."""
    memo_key = (family, m_bucket(m), n, k, _current_device())
    config = _MEMO.get(memo_key)
    if config is not None:
        return config
    key = _key(m, n, k)
    user = _valid_entries(family, _read_user_cache().get(family, {}), module)
    own, borrowed, _ = _shipped_split(family)
    config = user.get(key) or own.get(key)
    if config is None and bench is not None and os.environ.get("QUANTKIT_AUTOTUNE") == "1" \
            and not torch.cuda.is_current_stream_capturing():
        try:
            config = autotune(module.candidate_configs(m, n, k), bench)  # asked for: this GPU's own timing
        except RuntimeError as exc:  # every candidate failed: what would run without autotuning runs
            warnings.warn(f"quantkit: autotuning the {family} configs for (M, N, K) = ({key}): {exc}",
                          stacklevel=2)
        else:
            try:
                _write_user_cache(family, key, config)
            except (OSError, ValueError) as exc:  # it runs all the same, in this process
                warnings.warn(f"quantkit: the {family} config autotuned for (M, N, K) = ({key}) is not saved: {exc}",
                              stacklevel=2)
    if config is None:
        config = borrowed.get(key)
    if config is None:
        config = nearest_tuned(m, n, k, {**_shipped(family), **user})
    if config is None:
        config = module.default_config(m, n, k)
    _MEMO[memo_key] = config
    return config


def _regime(m: int) -> int:
    """The M ranges every family's kernels are chosen in (decode GEMV, decode ≤ 16, mid, large): a
    config tuned for one M serves another M only within the same range."""
    return 0 if m <= 1 else 1 if m <= 16 else 2 if m <= 256 else 3


def nearest_tuned(m: int, n: int, k: int, table: dict[str, dict]) -> dict | None:
    """The config tuned for the same N and K at the M bucket nearest to ``m``'s (in powers of two,
    the smaller on a tie) within the same regime, or None: a prefill at M = 2048 then runs what the
    sweep chose at 1024 instead of the untuned default."""
    bucket, best, best_distance = m_bucket(m), None, None
    for key, config in table.items():
        tm, tn, tk = (int(v) for v in key.split(","))
        if tn != n or tk != k or _regime(tm) != _regime(bucket):
            continue
        distance = (abs(tm.bit_length() - bucket.bit_length()), tm)
        if best_distance is None or distance < best_distance:
            best, best_distance = config, distance
    return best


def autotune(candidates: list[dict], bench: Callable[[dict], float]) -> dict:
    """Return the candidate with the lowest ``bench(config)`` time; candidates that fail are skipped."""
    best, best_time = None, float("inf")
    for config in candidates:
        try:
            t = bench(config)
        except Exception:  # a config the compiler or the GPU rejects (e.g. out of shared memory)
            continue
        if t < best_time:
            best, best_time = config, t
    if best is None:
        raise RuntimeError(f"every candidate failed ({len(candidates)} configs; a time that is not a number "
                           "counts as a failure)")
    return best


# --------------------------------------------------------------------------- offline sweep (GPU)
LLAMA_SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336))
BENCH_M = (1, 16, 128, 1024, 4096)


def shipped_cells(family: str) -> list[tuple[int, int, int]]:
    """Every (M bucket, N, K) that some GPU's shipped table of ``family`` holds, by shape, then M."""
    path = _SHIPPED_DIR / f"{family}.json"
    tables = json.loads(path.read_text()) if path.is_file() else {}
    cells = {tuple(int(v) for v in key.split(",")) for table in tables.values() for key in table}
    return sorted(cells, key=lambda c: (c[1], c[2], c[0]))


#: Configs whose GPU times are within this fraction of the fastest are ties, which the eager time
#: (the host's launches included) breaks: a sweep's two timings of one config differ by a median 0.5 %
#: and 5.4 % at the 90th percentile (H200, round 18), and a host-heavy launch path (cuBLAS's
#: ``_scaled_mm``) can double a short layer's eager time at equal GPU time.
EAGER_TIE = 0.03


def pick_config(timings: list[tuple[float, dict]], eager: Callable[[dict], float] | None,
                tie: float = EAGER_TIE) -> tuple[float, dict, dict[str, float]]:
    """(GPU ms, config, {config JSON: eager ms}) chosen from ``timings`` [(GPU ms, config)]: the fastest on
    the GPU, unless other configs are within ``tie`` of it, in which case the fastest of those eagerly
    (``eager(config)`` in ms; None: GPU time alone)."""
    best_ms = min(t for t, _ in timings)
    near: dict[str, tuple[float, dict]] = {}
    for t, config in timings:
        name = json.dumps(config, sort_keys=True)
        if t <= best_ms * (1 + tie) and (name not in near or t < near[name][0]):
            near[name] = (t, config)
    if eager is None or len(near) < 2:
        t, config = min(timings, key=lambda tc: tc[0])
        return t, config, {}
    eager_ms = {name: eager(config) for name, (_, config) in near.items()}
    name = min(eager_ms, key=eager_ms.get)
    return near[name][0], near[name][1], eager_ms


def eager_time_ms(family: str, module, x: torch.Tensor, buffers: tuple, n: int, config: dict, warmup: float = 10,
                  rep: float = 40) -> float:
    """The eager time (do_bench, L2 flushed) of ``config`` through the layers' path: the tuned-config memo
    pointed at it, a fresh launch-planned ``linear`` (first call, recorded call, then replays)."""
    import triton.testing

    from quantkit.kernels.plan import planned

    memo_key = (family, m_bucket(x.shape[0]), n, x.shape[1])
    saved = _MEMO.get(memo_key)
    _MEMO[memo_key] = config
    try:
        fn = planned(module.linear)
        for _ in range(3):
            fn(x, *buffers)
        return float(triton.testing.do_bench(lambda: fn(x, *buffers), warmup=warmup, rep=rep, return_mode="median"))
    finally:
        if saved is None:
            _MEMO.pop(memo_key, None)
        else:
            _MEMO[memo_key] = saved


def sweep(family: str, shapes=LLAMA_SHAPES, ms=BENCH_M, dtype=torch.bfloat16, verbose=True,
          cells: list[tuple[int, int, int]] | None = None,
          on_cell: Callable[[dict[str, Any]], None] | None = None,
          done: dict[str, Any] | None = None, eager_tie: float | None = EAGER_TIE) -> dict[str, Any]:
    """Time every candidate config of ``family`` on this GPU; return {key: {"config", "ms", "default_ms"}}.
    ``cells``: (M, N, K) problems to time instead of ``shapes`` × ``ms``; ``on_cell(results)`` is called
    after each problem (the CLI rewrites its output file there); ``done``: results of an earlier,
    interrupted sweep on this GPU, kept, and their problems not timed again; ``eager_tie``: GPU-time ties
    within that fraction are broken by eager time (:func:`pick_config`; None: GPU time alone). Each problem
    also records ``dense_ms``, the unquantized ``F.linear``'s GPU time under the same timer."""
    import importlib

    module = importlib.import_module(f"quantkit.kernels.{family}")
    if cells is None:
        cells = [(m, n, k) for n, k in shapes for m in ms]
    results: dict[str, Any] = dict(done or {})
    buffers, buffers_shape, dense_weight = None, None, None
    for m, n, k in cells:
        if _key(m, n, k) in results:
            continue
        if buffers_shape != (n, k):
            buffers, dense_weight, buffers_shape = None, None, (n, k)  # (free the last shape's weights first)
            buffers = module.make_bench_inputs(n, k, dtype)
            dense_weight = torch.randn(n, k, device="cuda", dtype=dtype)
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        # the unquantized layer under the same timer: where the family stands, on shapes no table holds
        dense_ms = gpu_time_ms(lambda x=x, w=dense_weight: torch.nn.functional.linear(x, w))

        def bench(config, x=x, buffers=buffers):
            ms = gpu_time_ms(lambda: module.linear(x, *buffers, config=config))
            if not math.isfinite(ms):  # (nan would compare as fastest, or keep a finalist's place)
                raise RuntimeError(f"timed {ms} ms")
            return ms

        timings = []
        for config in module.candidate_configs(m, n, k):
            try:
                timings.append((bench(config), config))
                if verbose:
                    print(f"  {family} {m}x{n}x{k} {timings[-1][0] * 1e3:.1f} us {config}", flush=True)
            except Exception as exc:  # noqa: BLE001 - record and go on
                if verbose:
                    print(f"  {family} {m}x{n}x{k} {config}: failed ({exc.__class__.__name__})")
        default = module.default_config(m, n, k)
        default_ms = candidate_time(default, timings)
        if default_ms is None:  # the heuristic competes too
            try:
                default_ms = bench(default)
                timings.append((default_ms, default))
            except Exception as exc:  # noqa: BLE001
                default_ms = float("nan")
                if verbose:
                    print(f"  {family} {m}x{n}x{k} default {default}: failed ({exc.__class__.__name__})")
        if not timings:
            continue
        # The finalists again, in alternating order: the first pass ran the list in one order, and a GPU warmed by
        # the configs before reads a later one slow (up to 8 %, notes/tuning.md, round 34).
        finalists, retimed = retime_finalists(timings, default, bench)
        default_retimed = candidate_time(default, finalists)
        default_ms = default_retimed if default_retimed is not None else default_ms

        def eager(config, x=x, buffers=buffers, n=n):
            try:
                return eager_time_ms(family, module, x, buffers, n, config)
            except Exception:  # noqa: BLE001 - it ran under the graph timer; if not eagerly, it cannot win
                return float("inf")

        best_ms, best, eager_ms = pick_config(finalists, eager if eager_tie is not None else None,
                                              eager_tie if eager_tie is not None else 0.0)
        fastest_ms = min(t for t, _ in finalists)
        results[_key(m, n, k)] = {"config": best, "ms": best_ms, "default_ms": default_ms, "dense_ms": dense_ms,
                                  "default": default, "candidates": len(timings),
                                  "timings": [{"ms": t, "config": c} for t, c in timings],
                                  "retimed": [{"ms": r, "config": c} for r, c in retimed],
                                  "eager_ms": eager_ms}
        if verbose:
            ties = f", eager among {len(eager_ms)} GPU-time ties" if eager_ms else ""
            print(f"{family} M={m} N={n} K={k}: best {best_ms * 1e3:.1f} us {best} "
                  f"(fastest {fastest_ms * 1e3:.1f} us{ties}; default {default_ms * 1e3:.1f} us, "
                  f"{len(timings)} candidates; {dtype_name(dtype)} F.linear {dense_ms * 1e3:.1f} us)", flush=True)
        if on_cell is not None:
            on_cell(results)
    return results


#: The sweep times the fastest FINALISTS configs of its first pass, and the default, RETIME_ROUNDS more times.
FINALISTS = 2
RETIME_ROUNDS = 2


def retime_finalists(timings: list[tuple[float, dict]], default: dict, bench: Callable[[dict], float],
                     finalists: int = FINALISTS, rounds: int = RETIME_ROUNDS
                     ) -> tuple[list[tuple[float, dict]], list[tuple[list[float], dict]]]:
    """The ``finalists`` fastest distinct configs of ``timings`` [(ms, config)] (the first pass) and ``default``
    (where it ran), each timed ``rounds`` more times, the order reversed every round (last first, then first
    first, ...). Returns ([(mean of the re-timings, config)], [(the re-timings, config)]). The pick is made among
    these alone: the first pass timed every config once, in list order, so a config late in the list ran on a
    GPU the others had warmed, and where the first pass had the default last it read up to 8 % slow on long
    problems (410.0 against 378.7 µs for one config, int8 weight-only 3584 x 18944 at M = 2048 on an H100).
    A config that fails in a re-timing is dropped (it ran once; a second failure says it is not reliable)."""
    names: dict[str, dict] = {}
    for _, config in sorted(timings, key=lambda tc: tc[0]):
        names.setdefault(json.dumps(config, sort_keys=True), config)
    order = list(names.values())[:finalists]
    if candidate_time(default, timings) is not None and default not in order:
        order.append(default)
    readings: dict[int, list[float]] = {i: [] for i in range(len(order))}
    failed: set[int] = set()
    for r in range(rounds):
        for i in (reversed(range(len(order))) if r % 2 == 0 else range(len(order))):
            if i in failed:
                continue
            try:
                readings[i].append(bench(order[i]))
            except Exception:  # noqa: BLE001 - see the docstring
                failed.add(i)
    kept = [i for i in range(len(order)) if i not in failed and readings[i]]
    if not kept:  # nothing re-ran (rounds = 0, or every re-timing failed): the first pass decides
        return list(timings), []
    return ([(sum(readings[i]) / len(readings[i]), order[i]) for i in kept],
            [(readings[i], order[i]) for i in kept])


def row_config_ms(row: dict[str, Any], config: dict) -> float | None:
    """A sweep row's time for ``config``: the mean of its re-timings where it was a finalist (the time the row's
    pick was made on), else its first-pass time; None where the sweep did not time it."""
    for entry in row.get("retimed", []):
        if entry["config"] == config:
            return sum(entry["ms"]) / len(entry["ms"])
    first = [t["ms"] for t in row.get("timings", []) if t["config"] == config]
    return min(first) if first else None


def candidate_time(config: dict, timings: list[tuple[float, dict]]) -> float | None:
    """The time ``timings`` [(ms, config)] holds for ``config``, or None. The sweep reuses a candidate's time for
    the default when they are the same config rather than timing it again after every candidate: on long problems
    a GPU warmed by the candidates read the same config up to 8 % slower (410.0 against 378.7 µs, int8 weight-only
    3584 x 18944 at M = 2048 on an H100; notes/int8_weight_only.md, round 33)."""
    return next((t for t, c in timings if c == config), None)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def gpu_time_ms(fn, warmup: float = 10, rep: float = 40) -> float:
    """Median GPU time of ``fn`` (do_bench, L2 flushed; ``warmup`` / ``rep`` its budgets in ms) replayed
    from a CUDA graph, so the sweep ranks configs by what the GPU does: eager timings of a short layer
    measure the host when it is slower than the GPU (tens of µs per launch on the hosts we measured),
    which would rank configs by their Python. Eager when ``fn`` cannot be captured."""
    import triton.testing

    ms = graph_time_ms(fn, warmup, rep)
    if ms is None:  # (graph_time_ms synchronized after the failed capture)
        return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
    return ms


def graph_time_ms(fn, warmup: float = 10, rep: float = 40) -> float | None:
    """Median time of ``fn`` captured once in a CUDA graph and replayed under do_bench (L2 flushed), or
    None when ``fn`` cannot be captured."""
    import triton.testing

    fn()
    torch.cuda.synchronize()
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # warm the caching allocator on the side stream, as capture requires
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except Exception:  # noqa: BLE001 - not capturable
        torch.cuda.synchronize()
        return None
    return float(triton.testing.do_bench(graph.replay, warmup=warmup, rep=rep, return_mode="median"))


def parse_shapes(text: str) -> tuple[tuple[int, int], ...]:
    """``"4096x4096,14336x4096"`` -> ((4096, 4096), (14336, 4096)); ValueError naming what was expected."""
    try:
        shapes = tuple(tuple(int(v) for v in s.lower().split("x")) for s in text.split(","))
    except ValueError:
        shapes = ((),)
    if any(len(s) != 2 or min(s) < 1 for s in shapes):
        raise ValueError(f"--shapes: expected NxK[,NxK...] with positive sizes, got {text!r}")
    return shapes


def parse_ms(text: str) -> tuple[int, ...]:
    """``"1,16,2048"`` -> (1, 16, 2048); ValueError naming what was expected."""
    try:
        ms = tuple(int(v) for v in text.split(","))
    except ValueError:
        ms = (0,)
    if min(ms) < 1:
        raise ValueError(f"--m: expected M[,M...] with positive counts, e.g. 1,16,2048, got {text!r}")
    return ms


def _read_sweep(path) -> dict[str, Any]:
    """A sweep file's contents; ValueError naming ``path`` where it is not one (truncated, another format)."""
    try:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or not isinstance(data.get("gpu"), str) \
                or not isinstance(data.get("families"), dict) \
                or not all(isinstance(rows, dict) and all(isinstance(row, dict) and "config" in row
                                                          for row in rows.values())
                           for rows in data["families"].values()):
            raise ValueError('expected {"gpu": name, "families": {family: {"M,N,K": {"config": ...}}}}')
    except ValueError as exc:
        raise ValueError(f"{path} is not a sweep of quantkit.kernels.tuning ({exc})") from None
    return data


def resumed_families(out_path: Path) -> dict[str, Any]:
    """The per-family results an interrupted sweep left in ``out_path`` ({} without the file); ValueError
    if it was swept on another GPU, or is not a sweep."""
    if not out_path.is_file():
        return {}
    try:
        earlier = _read_sweep(out_path)
    except ValueError as exc:
        raise ValueError(f"--resume: {exc}") from None
    if earlier.get("gpu") != gpu_name():
        raise ValueError(f"--resume: {out_path} was swept on {earlier.get('gpu')!r}, this is {gpu_name()!r}")
    return earlier.get("families", {})


def sweep_to_file(families: list[str], out_path: Path, shapes=LLAMA_SHAPES, ms=BENCH_M, shipped: bool = False,
                  done: dict[str, Any] | None = None, eager_tie: float | None = EAGER_TIE) -> dict[str, Any]:
    """:func:`sweep` each family into ``out_path``, rewritten atomically after each problem, with the GPU's
    name, capability and SM count; ``shipped``: every problem a shipped table holds instead of ``shapes``
    × ``ms``; ``done``: :func:`resumed_families`, kept and not timed again."""
    out: dict[str, Any] = {"gpu": gpu_name(), "device": device_props(), "families": dict(done or {})}
    for family in families:
        def save(results, family=family):
            out["families"][family] = results
            _write_json(out_path, out)

        cells = shipped_cells(family) if shipped else None
        save(sweep(family, shapes=shapes, ms=ms, cells=cells, on_cell=save, done=out["families"].get(family),
                   eager_tie=eager_tie))
    return out


def _write_json(path: Path, data) -> None:
    """Write ``data`` to ``path`` atomically (a reader sees the old file or the new one, never half)."""
    from quantkit.atomic import write_text

    write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def install(sweep_files, shipped: bool = False, min_gain: float = 0.0) -> None:
    """Merge sweep results into the user cache (this GPU), or with ``shipped`` into the tables
    shipped with the package (``quantkit/kernels/tuned/<family>.json``, keyed by GPU name, and the
    GPU's capability and SM count in ``devices.json``, which a sweep file records).

    ``min_gain`` (shipped only): a problem the GPU has no entry of its own for keeps the entry it borrows
    from a sibling's table (:func:`table_sources`) unless the sweep timed its own best at least that
    fraction faster than the borrowed config in the same sweep. The sweep ranks by GPU time alone, and a
    sibling's entry may have been chosen against it for host time (fp8-block's 4096² M = 1024 on the
    H100), so a GPU-time tie is no reason to replace it. The GPU's own entries are replaced by the
    sweep's best, as without siblings (so the H100's table never starts borrowing from the H200's)."""
    entries: dict[str, dict[str, dict]] = {}  # for the user cache, written once every file is read
    for sweep_file in sweep_files:
        data = _read_sweep(sweep_file)
        gpu = data["gpu"]
        if not shipped:
            if gpu != gpu_name():  # (another GPU's configs may not even compile here)
                raise ValueError(f"{sweep_file} was swept on {gpu!r}, this is {gpu_name()!r}: the user cache holds "
                                 "this GPU's configs")
            for family, rows in data["families"].items():
                entries.setdefault(family, {}).update((key, row["config"]) for key, row in rows.items())
            continue
        device = data.get("device")
        devices = _shipped_devices()
        if device is None and gpu not in devices:
            raise ValueError(f"{sweep_file}: the sweep does not record its GPU's capability and SM count "
                             f"(rerun it with this version), and {_DEVICES_FILE} does not know {gpu!r}")
        if device is not None and devices.get(gpu) != device:
            devices[gpu] = device
            _write_json(_SHIPPED_DIR / _DEVICES_FILE, devices)
        device = devices[gpu]
        for family, rows in data["families"].items():
            path = _SHIPPED_DIR / f"{family}.json"
            tables = json.loads(path.read_text()) if path.is_file() else {}
            borrowed: dict[str, dict] = {}
            for name in table_sources(gpu, device, tables, devices):
                if name != gpu:
                    borrowed.update(tables[name])
            own = tables.setdefault(gpu, {})
            for key, row in rows.items():
                other = borrowed.get(key)
                other_ms = row_config_ms(row, other) if other is not None else None
                if key not in own and other_ms is not None and row["ms"] > other_ms * (1 - min_gain):
                    continue  # within min_gain of what it borrows: keep borrowing
                own[key] = row["config"]
            if not own:
                del tables[gpu]
            _write_json(path, tables)
    if entries:
        _write_user_entries(entries)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append")
    parser.add_argument("--out", help="JSON file: the sweep's timings and best configs")
    parser.add_argument("--m", help="comma-separated token counts to sweep (default: the benchmark's "
                                    + ",".join(map(str, BENCH_M)) + ")")
    parser.add_argument("--shapes", help="comma-separated NxK (out x in) to sweep (default: the Llama-3-8B "
                                         "shapes " + ",".join(f"{n}x{k}" for n, k in LLAMA_SHAPES) + ")")
    parser.add_argument("--resume", action="store_true",
                        help="keep the problems --out already holds (an interrupted sweep on this GPU) and time the rest")
    parser.add_argument("--eager-tie", type=float, default=EAGER_TIE, metavar="FRACTION",
                        help="configs within this fraction of the fastest GPU time are ties, broken by the eager "
                             f"time through the layers' launch plans (default {EAGER_TIE}; a negative value: "
                             "GPU time alone)")
    parser.add_argument("--cells", choices=["shipped"],
                        help="'shipped': every (M, N, K) some shipped table of the family holds, instead of "
                             "--shapes x --m (to tune a new GPU for everything the package tunes)")
    parser.add_argument("--install", nargs="+", metavar="SWEEP_JSON",
                        help="instead of sweeping, put these sweeps' best configs in the user cache")
    parser.add_argument("--ship", nargs="+", metavar="SWEEP_JSON",
                        help="instead of sweeping, merge these sweeps' best configs into the shipped tables")
    parser.add_argument("--min-gain", type=float, default=0.05, metavar="FRACTION",
                        help="--ship: keep what the GPU borrows from a table of the same capability unless its "
                             "own best was at least this much faster in the sweep (default 0.05: about the 90th percentile "
                             "of how far one config's two timings in a sweep differ)")
    args = parser.parse_args(argv)
    if args.install or args.ship:
        install(args.install or args.ship, shipped=bool(args.ship), min_gain=args.min_gain)
        return
    if not args.family or not args.out:
        parser.error("--family and --out are required for a sweep")
    shapes, ms = LLAMA_SHAPES, BENCH_M
    if args.cells and (args.m or args.shapes):
        parser.error("--cells picks the problems itself: give it without --m and --shapes")
    out_path = Path(args.out)
    try:
        if args.m:
            ms = parse_ms(args.m)
        if args.shapes:
            shapes = parse_shapes(args.shapes)
        done = resumed_families(out_path) if args.resume else {}
    except ValueError as exc:
        parser.error(str(exc))
    sweep_to_file(args.family, out_path, shapes, ms, shipped=args.cells == "shipped", done=done,
                  eager_tie=args.eager_tie if args.eager_tie >= 0 else None)


if __name__ == "__main__":
    main()
