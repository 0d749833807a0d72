"""Launch plans: replay the launches of a quantized forward without re-deriving them.

On a decode step the GPU work of a quantized linear is 10–40 µs, and the Python that decides it —
argument checks, the config lookup, grid and stride arithmetic, Triton's specialization key and
launcher — costs 30–80 µs per call on the H100 hosts we measure on (``scripts/host_breakdown.py``),
so an eager forward waits for the CPU. Yet for a given layer and input layout that Python computes
the same launches every time: only the addresses of ``x``, the output and the scratch buffers change.

:func:`planned` wraps a kernel family's ``linear(x, *buffers)``. The first call for a key (shape,
strides, dtype and 16-byte alignment of ``x``; address, shape, dtype and strides of every buffer; the
other arguments) runs normally (it may autotune); the second is *recorded*: every launch made
through :mod:`quantkit.kernels.launch` is captured with its compiled kernel, grid and arguments, and
every PyTorch op is watched by a dispatch mode. Later calls *replay*: allocate what the recorded call
allocated, call each compiled kernel's launcher directly with the new addresses, and re-issue the
recorded cuBLAS calls (``_scaled_mm``, ``mm``, ``addmm``, and their ``out=`` forms) on the same views
of the new buffers.

A call is only planned when everything it did was allocations, views, launches through
``launch.cached`` and those cuBLAS calls, it returned one of the tensors it created (or a view of one
in its dtype), and no Triton launch hook (a profiler) was installed; otherwise it always runs normally. Why a replay is exact:
the launches depend on the key's contents only — shapes, strides and dtypes fix every grid, integer
argument and config (the tuned-config memo never changes an entry once made), and the alignment of
every address that Triton specializes on is either in the key (``x``, the buffers) or that of a fresh
caching-allocator block (512-byte aligned, at the recorded offsets). ``QUANTKIT_LAUNCH_PLANS=0``
turns plans off.
"""
from __future__ import annotations

import functools
import os
import threading
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_MAX_PLANS = 1024  # per wrapped function; on overflow the cache starts over
_state = threading.local()

# What a plannable call may do besides launching Triton kernels: allocate (replayed), take views
# (which change no data) and call cuBLAS through these functional ops (re-issued).
_ALLOC_OPS = {"aten::empty.memory_format", "aten::empty_strided"}
_VIEW_OPS = {"aten::view", "aten::view.dtype", "aten::_unsafe_view", "aten::slice.Tensor", "aten::select.int",
             "aten::t", "aten::transpose.int", "aten::permute", "aten::as_strided", "aten::unsqueeze",
             "aten::squeeze.dim", "aten::alias", "aten::detach", "aten::expand", "aten::reshape",
             "aten::narrow", "aten::_reshape_alias", "aten::split.Tensor", "aten::split_with_sizes"}
_REPLAYED_OPS = {"aten::_scaled_mm", "aten::mm", "aten::addmm",
                 # their out= forms, writing into a view of a block the call allocated
                 "aten::_scaled_mm.out", "aten::mm.out", "aten::addmm.out"}


def note_launch(kernel, grid, values) -> None:
    """Called by ``launch.CachedKernel`` for every launch; records it while a plan is being recorded."""
    rec = getattr(_state, "recording", None)
    if rec is not None:
        rec.steps.append(("launch", kernel, tuple(grid) + (1,) * (3 - len(grid)), list(values)))


def note_unplannable(reason: str) -> None:
    """A launch the recorder cannot replay (a profiler hook, an argument the launch cache does not key)."""
    rec = getattr(_state, "recording", None)
    if rec is not None and rec.unplannable is None:
        rec.unplannable = reason


def _op_name(func) -> str:
    overload = func._overloadname
    return func._schema.name + ("" if overload == "default" else "." + overload)


class _Recording(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.steps: list = []
        self.unplannable: str | None = None
        self.allocations: list[torch.Tensor] = []  # tensors created by empty/empty_strided, in order

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = _op_name(func)
        if name in _ALLOC_OPS:
            self.allocations.append(out)
        elif name in _REPLAYED_OPS:
            self.steps.append(("op", func, args, kwargs, out))
        elif name not in _VIEW_OPS and self.unplannable is None:
            self.unplannable = f"runs {name}"
        return out


class _Ptr:
    """An address where Triton's host tensor descriptor wants a tensor (it only calls data_ptr())."""
    __slots__ = ("_ptr",)

    def __init__(self, ptr: int):
        self._ptr = ptr

    def data_ptr(self) -> int:
        return self._ptr


class _HostDesc:
    """The fields of a host tensor descriptor (``triton.tools.tensor_descriptor.TensorDescriptor`` or
    Gluon's) that Triton's launcher reads."""
    __slots__ = ("base", "shape", "strides", "block_shape", "padding")

    def __init__(self, base, shape, strides, block_shape, padding):
        self.base, self.shape, self.strides, self.block_shape, self.padding = base, shape, strides, block_shape, padding


def _current_stream() -> int:
    return torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())


class _TensorArg:
    """An op's tensor argument at replay: a view of root ``index`` (``from_root``) or of the call's
    ``index``-th argument; ``offset`` None means the base tensor itself, else ``as_strided`` at that
    element offset from it. ``dtype``: the view reads a contiguous base's bytes as another dtype (the
    codes and scales kept behind an output): the base is first seen as a flat tensor of that dtype."""
    __slots__ = ("from_root", "index", "size", "stride", "offset", "dtype")

    def __init__(self, from_root, index, size=None, stride=None, offset=None, dtype=None):
        self.from_root, self.index, self.size, self.stride, self.offset = from_root, index, size, stride, offset
        self.dtype = dtype

    def get(self, roots, args) -> torch.Tensor:
        base = roots[self.index] if self.from_root else args[self.index]
        if self.offset is None:
            return base
        if self.dtype is not None:
            base = _flat_as(base, self.dtype)
        return base.as_strided(self.size, self.stride, base.storage_offset() + self.offset)


def _flat_as(base: torch.Tensor, dtype) -> torch.Tensor:
    """A contiguous tensor's bytes as a 1-D tensor of ``dtype`` starting where it starts (a trailing
    part shorter than one element of ``dtype`` left out). One view op for the usual root, a 1-D block
    whose size is a whole number of ``dtype`` elements (``out_with_workspace`` rounds blocks to 16
    bytes): each op costs the host microseconds on every replay."""
    size = dtype.itemsize
    if base.dim() == 1 and (base.numel() * base.element_size()) % size == 0:
        return base.view(dtype)
    flat = base.reshape(-1).view(torch.uint8)
    return flat[:flat.numel() // size * size].view(dtype)


class Plan:
    """The recorded steps of one call, ready to replay on new buffers.

    Roots (the tensors addresses are taken from): the call's inputs (``x``, or the ``inputs`` leading
    arguments of :func:`planned`); the call's allocations, re-made in order; the outputs of the cuBLAS
    ops, made by their steps. Layer buffers enter launches as the integer addresses the key holds, and
    ops as views of the buffers passed to the call."""

    def __init__(self, allocations, out, steps, keep_alive):
        self.allocations = allocations  # [(size, stride, dtype)]
        self.out = out  # a _TensorArg: a root, or a view of one
        self.steps = steps
        self.keep_alive = keep_alive

    def replay(self, x, args) -> torch.Tensor:
        """``x``: the call's input tensor, or a tuple of its input tensors (as recorded)."""
        roots = [x] if isinstance(x, torch.Tensor) else list(x)
        device = roots[0].device
        for size, stride, dtype in self.allocations:
            roots.append(torch.empty_strided(size, stride, dtype=dtype, device=device))
        bases = [t.data_ptr() for t in roots]
        stream = None
        for step in self.steps:
            if step[0] == "launch":
                _, call, prefix, template, slots, descs, maps = step
                args_ = template.copy()
                for pos, root, offset in slots:
                    args_[pos] = bases[root] + offset
                for pos, root, offset, shape, strides, block_shape, padding in descs:
                    args_[pos] = _HostDesc(_Ptr(bases[root] + offset), shape, strides, block_shape, padding)
                for pos, root, offset, fill_args in maps:
                    args_[pos] = _fill_tma(bases[root] + offset, *fill_args)
                if stream is None:
                    stream = _current_stream()
                call(prefix[0], prefix[1], prefix[2], stream, *prefix[3:], *args_)
            else:
                _, func, arg_specs, kwargs = step
                op_args = [a.get(roots, args) if type(a) is _TensorArg else a for a in arg_specs]
                if "out" in kwargs:
                    kwargs = dict(kwargs, out=kwargs["out"].get(roots, args))
                out = func(*op_args, **kwargs)
                roots.append(out)
                bases.append(out.data_ptr())
        return self.out.get(roots, args)


class _Unplannable(Exception):
    pass


def _build(rec: _Recording, inputs: list, y, args) -> Plan | str:
    if rec.unplannable:
        return rec.unplannable
    if not rec.steps:
        return "nothing launched"
    if len({t.untyped_storage().data_ptr() for t in inputs}) < len(inputs):
        return "inputs share storage"  # a replay takes each input's address on its own
    roots: list[torch.Tensor] = inputs + rec.allocations + [s[4] for s in rec.steps if s[0] == "op"]
    by_storage = {}
    for i, t in enumerate(roots):
        by_storage.setdefault(t.untyped_storage().data_ptr(), i)
    declared = {a.untyped_storage().data_ptr(): i for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    keep_alive: list[torch.Tensor] = []

    def address(t: torch.Tensor):
        """(root index, byte offset from the root's address), or (None, address) for a fixed buffer."""
        root = by_storage.get(t.untyped_storage().data_ptr())
        if root is None:
            if t.untyped_storage().data_ptr() not in declared:
                keep_alive.append(t)  # e.g. a module-level constant: its address is baked in
            return None, t.data_ptr()
        return root, t.data_ptr() - roots[root].data_ptr()

    def tensor_spec(t: torch.Tensor):
        """How to rebuild the op argument ``t`` at replay: a view of a root or of a declared buffer."""
        storage = t.untyped_storage().data_ptr()
        root = by_storage.get(storage)
        if root is not None:
            from_root, index, base = True, root, roots[root]
        elif storage in declared:
            from_root, index = False, declared[storage]
            base = args[index]
        else:
            keep_alive.append(t)
            return t
        dtype = None
        if t.dtype != base.dtype:
            # A view of the block's bytes as another dtype (fp8 codes and float32 scales behind a bf16
            # output): replayed through a flat view of the base in that dtype.
            if not from_root or not base.is_contiguous() or (t.data_ptr() - base.data_ptr()) % t.element_size():
                raise _Unplannable("an op reads a buffer through another dtype")
            dtype = t.dtype
        elif t.shape == base.shape and t.stride() == base.stride() and t.data_ptr() == base.data_ptr():
            return _TensorArg(from_root, index)
        return _TensorArg(from_root, index, tuple(t.shape), tuple(t.stride()),
                          (t.data_ptr() - base.data_ptr()) // t.element_size(), dtype)

    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # pragma: no cover - older triton
        TensorDescriptor = ()
    try:  # Gluon's host descriptor: the launcher reads the same fields (its layout is in the kernel)
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor
    except ImportError:  # pragma: no cover - triton without Gluon
        GluonTensorDescriptor = ()
    descriptor_types = tuple(t for t in (TensorDescriptor, GluonTensorDescriptor) if t)
    steps = []
    try:
        for step in rec.steps:
            if step[0] == "op":
                _, func, op_args, kwargs, _ = step
                kwargs = dict(kwargs)
                if isinstance(kwargs.get("out"), torch.Tensor):
                    # An out= op: it must write into a block this call allocated (re-made at replay).
                    kwargs["out"] = spec = tensor_spec(kwargs["out"])
                    if type(spec) is not _TensorArg or not spec.from_root \
                            or not len(inputs) <= spec.index < len(inputs) + len(rec.allocations):
                        raise _Unplannable("an op writes into a tensor the call did not allocate")
                if any(isinstance(v, torch.Tensor) for v in kwargs.values()):
                    raise _Unplannable("an op takes tensor keyword arguments")
                specs = [tensor_spec(a) if isinstance(a, torch.Tensor) else a for a in op_args]
                steps.append(("op", func, specs, kwargs))
                continue
            _, kernel, grid, values = step
            launcher = kernel.run
            direct = getattr(launcher, "launch", None)
            if direct is not None and getattr(launcher, "global_scratch_size", 1) == 0 \
                    and getattr(launcher, "profile_scratch_size", 1) == 0:
                # CudaLauncher.__call__ minus its per-call Python (there is no scratch to allocate):
                # launch(grid, stream, function, cooperative, pdl, scratch, profile scratch, metadata, hooks)
                call = direct
                after_stream = (kernel.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None,
                                None, kernel.packed_metadata, None, None, None)
                flat = _flat_descriptor_launch(direct, values, address, descriptor_types)
                if flat is not None:
                    raw, template, slots, maps = flat
                    steps.append(("launch", raw, tuple(grid) + after_stream, template, slots, (), maps))
                    continue
            else:  # the launcher's own __call__ (the same call launch.CachedKernel makes)
                call = launcher
                after_stream = (kernel.function, kernel.packed_metadata, None, None, None)
            template, slots, descs = [], [], []
            for pos, value in enumerate(values):
                if isinstance(value, torch.Tensor):
                    root, offset = address(value)
                    template.append(offset if root is None else None)
                    if root is not None:
                        slots.append((pos, root, offset))
                elif descriptor_types and isinstance(value, descriptor_types):
                    root, offset = address(value.base)
                    fields = (list(value.shape), list(value.strides), list(value.block_shape),
                              getattr(value, "padding", "zero"))
                    if root is None:  # a layer buffer's: fixed address, no reference kept
                        template.append(_HostDesc(_Ptr(offset), *fields))
                    else:
                        template.append(None)
                        descs.append((pos, root, offset) + fields)
                else:
                    template.append(value)
            steps.append(("launch", call, tuple(grid) + after_stream, template, slots, descs, ()))
    except _Unplannable as exc:
        return str(exc)
    # The output: a root itself, or a view of one in the same dtype (a kernel's scratch may share the
    # output's allocation, the output being its leading part).
    out = None
    if isinstance(y, torch.Tensor):
        root = by_storage.get(y.untyped_storage().data_ptr())
        if root is not None and root >= len(inputs) and roots[root].dtype == y.dtype:
            base = roots[root]
            if y.data_ptr() == base.data_ptr() and y.shape == base.shape and y.stride() == base.stride():
                out = _TensorArg(True, root)
            else:
                out = _TensorArg(True, root, tuple(y.shape), tuple(y.stride()),
                                 (y.data_ptr() - base.data_ptr()) // y.element_size())
    if out is None:
        return "the output is not a tensor the call created"
    allocations = [(tuple(t.shape), tuple(t.stride()), t.dtype) for t in rec.allocations]
    return Plan(allocations, out, steps, keep_alive)


_fill_tma_descriptor = None  # Triton's C encoder of a host TMA descriptor, looked up on first use


def _fill_tma(address, *fill_args):
    """The encoded tensor map of a descriptor at ``address`` (the replay's one C call per map)."""
    global _fill_tma_descriptor
    if _fill_tma_descriptor is None:  # (resolved once: the active driver's proxy lookup is not free)
        import triton

        _fill_tma_descriptor = triton.runtime.driver.active.utils.fill_tma_descriptor
    return _fill_tma_descriptor(address, *fill_args)


def _flat_descriptor_launch(launch, values, address, descriptor_types):
    """A launch whose arguments include host TMA descriptors, made flat for the compiled launcher.

    Triton's launcher for such a kernel is a Python wrapper (``wrap_handle_tensordesc``) that, on every
    call, walks all the arguments and turns each descriptor into the encoded tensor map plus its shape
    and strides (``make_tensordesc_arg``). A replay knows which arguments those are: the expansion is
    done here once, a layer buffer's map is encoded once (its address is fixed), and a replay only
    encodes the maps of the call's own buffers (x, the output, scratch) with one C call each, then calls
    the compiled launcher directly. Returns (launcher, flat template, address slots, maps to encode), or
    None where the wrapper is not the one this knows (another Triton), and the replay keeps the wrapper."""
    code = getattr(launch, "__code__", None)
    names = code.co_freevars if code is not None else ()
    if not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= set(names) or not descriptor_types:
        return None
    cells = dict(zip(names, (cell.cell_contents for cell in launch.__closure__)))
    raw, indices, metas = cells["launcher"], cells["tensordesc_indices"], cells["tensordesc_meta"]
    if not metas or any(not isinstance(meta, dict) for meta in metas):
        return None  # descriptors decomposed in the kernel (no encoded map): the wrapper's other path
    try:
        from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST, make_tensordesc_arg
    except ImportError:
        return None
    template, slots, maps = [], [], []
    meta_iter = iter(metas)
    for pos, value in enumerate(values):
        if pos in indices:
            meta = next(meta_iter, None)
            if meta is None or not isinstance(value, descriptor_types):
                return None
            expanded = make_tensordesc_arg(value, meta)  # [map, *shape, *strides], as the wrapper makes it
            rank = len(value.shape)
            shape, strides = list(expanded[1:1 + rank]), list(expanded[1 + rank:])
            if len(strides) != rank:
                return None
            root, offset = address(value.base)
            if root is None:
                template.append(expanded[0])  # a layer buffer's: encoded once
            else:
                padding = 1 if getattr(value, "padding", "zero") == "nan" else 0
                maps.append((len(template), root, offset, (meta["swizzle"], meta["elem_size"],
                                                          TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]],
                                                          meta["block_size"], shape, strides, padding)))
                template.append(None)
            template += shape + strides
        elif isinstance(value, torch.Tensor):
            root, offset = address(value)
            if root is not None:
                slots.append((len(template), root, offset))
            template.append(offset if root is None else None)
        else:
            template.append(value)
    if next(meta_iter, None) is not None:
        return None
    return raw, template, slots, maps


def _record(fn: Callable, x, args) -> tuple[torch.Tensor, Plan | str]:
    """Run ``fn(*inputs, *args)`` and record it; ``x``: the input tensor, or a tuple of input tensors."""
    inputs = [x] if isinstance(x, torch.Tensor) else list(x)
    rec = _Recording()
    _state.recording = rec
    try:
        with rec:
            y = fn(*inputs, *args)
    finally:
        _state.recording = None
    return y, _build(rec, inputs, y, args)


def _enabled() -> bool:
    return os.environ.get("QUANTKIT_LAUNCH_PLANS", "1") != "0" and os.environ.get("TRITON_INTERPRET", "0") != "1"


def planned(fn: Callable, inputs: int = 1) -> Callable:
    """Wrap a kernel family's ``linear(x, *buffers)`` with launch plans (see the module docstring).

    ``inputs``: how many leading arguments are the call's own tensors (``x``; the MoE experts' ``x`` and
    routing), keyed by layout and read at new addresses on every replay; the arguments after them are
    buffers (keyed by address) and settings. Calls with keyword arguments (``config=`` ...) or a CPU
    ``x`` always run ``fn`` itself. The wrapper's ``plans`` maps each key to its :class:`Plan`, or to
    the reason it is not planned."""
    plans: dict[tuple, Plan | str] = {}
    seen: set[tuple] = set()
    enabled = _enabled()

    @functools.wraps(fn)
    def wrapper(x, *args, **kwargs):
        if kwargs or not enabled or not x.is_cuda:
            return fn(x, *args, **kwargs)
        lead, buffers = (x,) + args[:inputs - 1], args[inputs - 1:]
        key = []
        for a in lead:
            key += (a.shape, a.stride(), a.dtype, a.data_ptr() & 15, a.device)
        for a in buffers:
            key.append((a.data_ptr(), a.shape, a.dtype, a.stride()) if isinstance(a, torch.Tensor) else a)
        key = tuple(key)
        plan = plans.get(key)
        if plan is not None:
            if type(plan) is Plan:
                return plan.replay(lead, buffers)
            return fn(x, *args)
        if key not in seen:  # the first call may compile or autotune: record the second
            if len(seen) >= _MAX_PLANS:
                seen.clear()
            seen.add(key)
            return fn(x, *args)
        y, plan = _record(fn, lead, buffers)
        if len(plans) >= _MAX_PLANS:
            plans.clear()
        plans[key] = plan
        return y

    wrapper.plans = plans
    return wrapper
