"""Low-overhead launches of ``@triton.jit`` kernels.

Triton's ``kernel[grid](...)`` spends tens of microseconds of Python per launch binding arguments and
computing their specialization before it finds the compiled kernel in its cache (measured with
triton 3.6 on an H100 host: 30–65 µs per launch, more than the GPU time of a decode-size quantized
matmul, see notes/launch.md). :func:`cached` wraps a kernel so that launches after the first go
straight to the compiled kernel's launcher, keyed by exactly what Triton specializes on:

* constexpr parameters and compile options (``num_warps``, ``num_stages``, ...): their values;
* tensors: dtype and whether the data pointer is 16-byte aligned;
* ints: 1 (folded to a constant), divisibility by 16, and the integer width Triton picks;
* floats and bools: nothing (Triton does not specialize them); None: itself;
* host TMA descriptors: the element type and block shape (and, for Gluon's, the shared layout).

The first launch for a key, a callable grid, an argument of another kind, a launch hook (profilers)
or the interpreter all take Triton's own path, so the wrapper never changes what runs — only how
fast it is launched. ``QUANTKIT_TRITON_SLOW_LAUNCH=1`` turns the fast path off.

One exception, for GPUs with less shared memory than the one a config was sized for (the tuned tables
and defaults are sized for an H100's 227 KB a block; sm_86 / sm_89 GPUs have 99 KB): when Triton refuses
to load a kernel for want of shared memory and its ``num_stages`` option is above 1, the launch is retried
with fewer software-pipeline stages, once per key, with a warning. Pipelining depth changes how far
loads run ahead, not the arithmetic or its order, so the results are the same bits.
"""
from __future__ import annotations

import inspect
import os
import warnings

import torch

from quantkit.kernels.plan import note_launch, note_unplannable

try:
    import triton
    from triton.runtime.jit import JITFunction
except ImportError:  # pragma: no cover - the kernels need triton anyway
    triton = None
    JITFunction = ()

try:
    from triton.runtime.errors import OutOfResources
except ImportError:  # pragma: no cover - the kernels need triton anyway
    OutOfResources = ()

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older triton
    TensorDescriptor = ()
try:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor
except ImportError:  # pragma: no cover - triton without Gluon
    GluonTensorDescriptor = ()


class _Uncacheable(Exception):
    pass


_I32 = (-(2**31), 2**31 - 1)
_I64_MAX = 2**63 - 1


def _spec(value):
    """What Triton's specialization of a non-constexpr argument depends on (see module docstring)."""
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.data_ptr() & 15 == 0)
    if isinstance(value, bool):
        return "u1"
    if isinstance(value, int):
        if value == 1:
            return "one"
        width = "i32" if _I32[0] <= value <= _I32[1] else ("i64" if -_I64_MAX - 1 <= value <= _I64_MAX else "u64")
        return (width, value & 15 == 0)
    if isinstance(value, float):
        return "fp32"
    if value is None:
        return None
    if TensorDescriptor and isinstance(value, TensorDescriptor):
        return ("desc", value.base.dtype, tuple(value.block_shape), getattr(value, "padding", None))
    if GluonTensorDescriptor and isinstance(value, GluonTensorDescriptor):  # its layout is in the signature
        return ("gluon desc", value.base.dtype, tuple(value.block_shape), value.layout, value.padding)
    raise _Uncacheable(type(value).__name__)


def _arg_key(values, is_constexpr) -> tuple:
    """Constexpr values as they are, other arguments by :func:`_spec` — inlined for tensors and
    32-bit ints, since this loop is most of the host time of a launch."""
    key = []
    append = key.append
    for value, constexpr in zip(values, is_constexpr):
        if constexpr:
            append(value)
        elif type(value) is torch.Tensor:
            append((value.dtype, value.data_ptr() & 15 == 0))
        elif type(value) is int and _I32[0] <= value <= _I32[1]:
            append("one" if value == 1 else ("i32", value & 15 == 0))
        else:
            append(_spec(value))
    return tuple(key)


class CachedKernel:
    """``CachedKernel(jit_fn)[grid](*args, **kwargs)`` launches like ``jit_fn[grid](...)``, faster."""

    def __init__(self, fn):
        self.fn = fn
        self._fast = isinstance(fn, JITFunction) and os.environ.get("TRITON_INTERPRET", "0") != "1"
        self._compiled: dict = {}
        self._stage_caps: dict = {}  # key -> the num_stages this GPU's shared memory allows (see _run_triton)
        if self._fast:
            params = list(inspect.signature(fn.fn).parameters.values())
            self._names = [p.name for p in params]
            self._name_set = frozenset(self._names)
            self._defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
            constexpr = {p.num for p in fn.params if p.is_constexpr}
            self._is_constexpr = [i in constexpr for i in range(len(params))]

    def __getitem__(self, grid):
        if not self._fast or callable(grid):
            note_unplannable("a launch with a callable grid or under the interpreter")
            return self.fn[grid]
        return lambda *args, **kwargs: self._launch(grid, args, kwargs)

    def _run_triton(self, grid, args, kwargs, key=None):
        """``self.fn[grid](*args, **kwargs)``; where the GPU has too little shared memory for the
        requested ``num_stages``, the same launch with fewer stages (module docstring). ``key``: remember
        the stage count that fitted for later launches of the same key."""
        stages = self._stage_caps.get(key) if key is not None else None
        if stages is not None:
            kwargs = {**kwargs, "num_stages": stages}
        while True:
            try:
                return self.fn[grid](*args, **kwargs)
            except OutOfResources as exc:
                asked = kwargs.get("num_stages")
                if getattr(exc, "name", None) != "shared memory" or not isinstance(asked, int) or asked <= 1:
                    raise
                kwargs = {**kwargs, "num_stages": asked - 1}
                if key is not None:
                    self._stage_caps[key] = asked - 1
                warnings.warn(f"quantkit: {self.fn.__name__} with num_stages={asked} needs {exc.required} bytes of "
                              f"shared memory and this GPU allows {exc.limit}; retrying with num_stages={asked - 1} "
                              f"(same results, less load pipelining)", RuntimeWarning, stacklevel=2)

    def _bind(self, args, kwargs) -> list:
        values = list(args)
        for name in self._names[len(args):]:
            if name in kwargs:
                values.append(kwargs[name])
            elif name in self._defaults:
                values.append(self._defaults[name])
            else:
                raise TypeError(f"{self.fn.__name__}() missing argument {name!r}")
        return values

    def _launch(self, grid, args, kwargs):
        hooks = triton.knobs.runtime
        if hooks.launch_enter_hook.calls or hooks.launch_exit_hook.calls \
                or os.environ.get("QUANTKIT_TRITON_SLOW_LAUNCH") == "1":
            note_unplannable("a Triton launch hook is installed")
            return self._run_triton(grid, args, kwargs)  # a profiler's hooks want Triton's launch metadata
        values = self._bind(args, kwargs) if len(args) < len(self._names) else list(args)
        try:
            options = tuple((k, v) for k, v in kwargs.items() if k not in self._name_set) if kwargs else ()
            device = torch.cuda.current_device()
            key = (device, options, _arg_key(values, self._is_constexpr))
            kernel = self._compiled.get(key)
        except (_Uncacheable, TypeError):  # an argument type the key does not cover, or unhashable
            note_unplannable(f"{self.fn.__name__} has an argument the launch cache does not key")
            return self._run_triton(grid, args, kwargs)
        if kernel is None:
            kernel = self._run_triton(grid, args, kwargs, key)  # compiles (or finds) it through Triton, and launches
            self._compiled[key] = kernel
            note_launch(kernel, grid, values)
            return kernel
        note_launch(kernel, grid, values)
        n = len(grid)
        # The same call Triton's JITFunction.run ends with; no hooks are installed (checked above).
        kernel.run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1,
                   torch._C._cuda_getCurrentRawStream(device), kernel.function, kernel.packed_metadata,
                   None, None, None, *values)
        return kernel


def cached(fn) -> CachedKernel:
    """Wrap a ``@triton.jit`` kernel for low-overhead launches (a no-op wrapper under the interpreter)."""
    return CachedKernel(fn)
