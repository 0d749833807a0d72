"""Safetensors files on disk: validated reading, streamed sharded writing, atomic output directories.

Reading goes through ``safetensors.safe_open``, after our own header check: a missing, truncated or
corrupt file is reported with its path (and the tensor concerned) instead of a bare decoding error.
``safe_open`` maps the file into memory and hands out tensors that share the mapping; every page read
through it stays resident until the file is closed, so :class:`Checkpoint` reopens a file after
``reopen_bytes`` have been read from it. Peak resident memory while streaming then stays near one
tensor plus that budget, whatever the size of the shard.

Writing needs no buffering either: :class:`ShardWriter` is given the name, dtype and shape of every
tensor up front (a plan computed on the ``meta`` device), so it can lay out the shards and write each
header before the data, then stream tensor after tensor straight into the file.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"

#: the dtype names of the safetensors format
DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
for _name, _attr in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"), ("F8_E8M0", "float8_e8m0fnu")):
    if hasattr(torch, _attr):
        DTYPES[_name] = getattr(torch, _attr)
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}

# A header larger than this is not a safetensors header (the format itself caps it at 100 MB).
_MAX_HEADER = 100 * 1024 * 1024


class CheckpointError(ValueError):
    """A checkpoint file or directory that cannot be used; the message names the file and tensor."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    file: Path
    begin: int  # byte offset in the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def read_header(path: str | os.PathLike) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Parse and check the header of a safetensors file against the file's size.

    Returns ({name: TensorInfo} in data order, metadata). Raises :class:`CheckpointError` naming the
    file (and tensor) when the file is missing, truncated or not a valid safetensors file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: safetensors file not found")
    size = path.stat().st_size
    if size < 8:
        raise CheckpointError(f"{path}: truncated or not a safetensors file ({size} bytes, less than the 8-byte "
                              f"header length)")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > _MAX_HEADER or 8 + n > size:
            raise CheckpointError(f"{path}: truncated or corrupt safetensors file: header length {n} bytes but the "
                                  f"file has {size} bytes")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: corrupt safetensors header (not valid JSON: {exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object)")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(f"{path}: corrupt safetensors header (__metadata__ must map names to strings, got "
                              f"{metadata!r})")
    infos = []
    for name, entry in header.items():
        try:
            dtype_name, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            # what safetensors itself accepts: a dtype name, sizes and offsets that are non-negative integers
            if not (isinstance(dtype_name, str) and isinstance(shape, list)
                    and all(type(v) is int and v >= 0 for v in (*shape, begin, end))):
                raise TypeError
            shape = tuple(shape)
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: corrupt safetensors header entry for tensor {name!r}: {entry!r}") from None
        if dtype_name not in DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {dtype_name!r}, which this torch cannot "
                                  f"represent (known: {', '.join(DTYPES)})")
        dtype = DTYPES[dtype_name]
        expected = math.prod(shape) * _itemsize(dtype)
        if not (isinstance(begin, int) and isinstance(end, int)) or end - begin != expected or begin < 0:
            raise CheckpointError(f"{path}: corrupt header: tensor {name!r} ({dtype_name} {list(shape)}) needs "
                                  f"{expected} bytes but its data_offsets are [{begin}, {end}]")
        infos.append(TensorInfo(name, dtype, shape, path, begin, end))
    infos.sort(key=lambda t: (t.begin, t.end))
    position = 0
    for info in infos:
        if info.begin != position:
            raise CheckpointError(f"{path}: corrupt header: tensor {info.name!r} starts at byte {info.begin} of the "
                                  f"data section, expected {position} (overlapping or missing data)")
        position = info.end
    data_size = size - 8 - n
    if position != data_size:
        last = infos[-1].name if infos else "(none)"
        what = "truncated" if position > data_size else "corrupt (trailing bytes)"
        raise CheckpointError(f"{path}: {what} safetensors file: its header needs {position} bytes of tensor data "
                              f"(last tensor {last!r}) but the file holds {data_size}")
    return {info.name: info for info in infos}, dict(metadata)


class Checkpoint:
    """The safetensors tensors of a model directory (one file, or shards listed by an index).

    Every file's header is checked when the checkpoint is opened, so a missing shard, a truncated
    file or an index naming a tensor its shard lacks is reported before anything is read.
    """

    def __init__(self, directory: str | os.PathLike, reopen_bytes: int = 64 * 2**20) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise CheckpointError(f"{self.directory}: not a directory")
        self.reopen_bytes = reopen_bytes
        self._tensors: dict[str, TensorInfo] = {}
        self.files: list[Path] = []
        index_path = self.directory / INDEX_NAME
        if index_path.exists():
            self._open_indexed(index_path)
        else:
            self.files = sorted(self.directory.glob("*.safetensors"))
            if not self.files:
                raise CheckpointError(f"{self.directory}: no *.safetensors file (and no {INDEX_NAME})")
            for file in self.files:
                for name, info in read_header(file)[0].items():
                    if name in self._tensors:
                        raise CheckpointError(f"{self.directory}: tensor {name!r} is in both "
                                              f"{self._tensors[name].file.name} and {file.name}")
                    self._tensors[name] = info
        self._handle = None
        self._handle_file: Path | None = None
        self._handle_bytes = 0

    def _open_indexed(self, index_path: Path) -> None:
        try:
            index = json.loads(index_path.read_text())
            weight_map = index["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
            raise CheckpointError(f"{index_path}: not a valid safetensors index (needs a 'weight_map' object)") from None
        shards: dict[str, list[str]] = {}
        for name, shard in weight_map.items():
            if not isinstance(shard, str):
                raise CheckpointError(f"{index_path}: not a valid safetensors index (tensor {name!r} is mapped to "
                                      f"{shard!r}, not to a file name)")
            shards.setdefault(shard, []).append(name)
        for shard, names in shards.items():
            file = self.directory / shard
            if not file.is_file():
                raise CheckpointError(f"{index_path}: names shard {shard!r} (for tensor {names[0]!r} and "
                                      f"{len(names) - 1} more), which is missing from {self.directory}")
            header = read_header(file)[0]
            for name in names:
                if name not in header:
                    raise CheckpointError(f"{index_path}: says tensor {name!r} is in {shard}, which has no such tensor")
                self._tensors[name] = header[name]
            unlisted = [name for name in header if name not in weight_map]
            if unlisted:
                raise CheckpointError(f"{index_path}: has no entry for tensor {unlisted[0]!r} of {shard}"
                                      f"{f' (and {len(unlisted) - 1} more)' if len(unlisted) > 1 else ''}; a "
                                      f"tensor the index does not list would be left out")
            self.files.append(file)

    # -- lookup -----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every tensor name, in storage order (file by file, by offset)."""
        order = {f: i for i, f in enumerate(self.files)}
        return sorted(self._tensors, key=lambda n: (order[self._tensors[n].file], self._tensors[n].begin))

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def info(self, name: str) -> TensorInfo:
        return self._tensors[name]

    def dtype(self, name: str) -> torch.dtype | None:
        info = self._tensors.get(name)
        return info.dtype if info else None

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self._tensors.values())

    # -- reading ----------------------------------------------------------------------------------
    def get(self, name: str, device: torch.device | str | None = None) -> torch.Tensor:
        """Read one tensor (on the CPU, then moved to ``device`` if given)."""
        from safetensors import safe_open

        info = self._tensors.get(name)
        if info is None:
            raise CheckpointError(f"{self.directory}: no tensor named {name!r}")
        if self._handle is None or self._handle_file != info.file or self._handle_bytes >= self.reopen_bytes:
            self.close()
            try:
                self._handle = safe_open(str(info.file), framework="pt")
            except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
                raise CheckpointError(f"{info.file}: cannot open: {exc}") from None
            self._handle_file = info.file
        try:
            tensor = self._handle.get_tensor(name)
        except Exception as exc:  # noqa: BLE001
            raise CheckpointError(f"{info.file}: cannot read tensor {name!r}: {exc}") from None
        self._handle_bytes += info.nbytes
        if device is not None and torch.device(device) != tensor.device:
            tensor = tensor.to(device)
        return tensor

    def close(self) -> None:
        # Dropping the handle unmaps the file; tensors already handed out keep their own mapping alive.
        self._handle = None
        self._handle_file = None
        self._handle_bytes = 0

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- writing ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlannedTensor:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _itemsize(self.dtype)


def parse_size(size: int | str) -> int:
    """``5000000``, ``"5GB"``, ``"500MiB"`` -> bytes (decimal units for KB/MB/GB, binary for KiB/MiB/GiB)."""
    if isinstance(size, int):
        if size <= 0:
            raise ValueError(f"max_shard_size must be positive, got {size}")
        return size
    text = str(size).strip().upper().replace(" ", "")
    units = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "KB": 10**3, "MB": 10**6, "GB": 10**9,
             "TB": 10**12, "B": 1}
    for unit, factor in units.items():
        if text.endswith(unit):
            number = text[: -len(unit)]
            break
    else:
        number, factor = text, 1
    try:
        value = int(float(number) * factor)
    except ValueError:
        raise ValueError(f"max_shard_size {size!r} is not a size like 5GB, 500MB or 2GiB") from None
    if value <= 0:
        raise ValueError(f"max_shard_size must be positive, got {size!r}")
    return value


class ShardWriter:
    """Write planned tensors into ``directory`` as safetensors shards of at most ``max_shard_size`` bytes.

    ``write`` must be called once per planned tensor, in plan order; each tensor's dtype and shape
    are checked against the plan. One shard is written as ``model.safetensors``; more as
    ``model-0000i-of-0000n.safetensors`` plus ``model.safetensors.index.json``.
    """

    def __init__(self, directory: str | os.PathLike, plan: Iterable[PlannedTensor],
                 max_shard_size: int | str = "5GB", metadata: dict[str, str] | None = None) -> None:
        self.directory = Path(directory)
        self.plan = list(plan)
        limit = parse_size(max_shard_size)
        seen = set()
        for p in self.plan:
            if p.name in seen:
                raise ValueError(f"tensor {p.name!r} is planned twice")
            seen.add(p.name)
        groups: list[list[PlannedTensor]] = [[]]
        size = 0
        for p in self.plan:
            if groups[-1] and size + p.nbytes > limit:
                groups.append([])
                size = 0
            groups[-1].append(p)
            size += p.nbytes
        n = len(groups)
        self.shard_names = [SINGLE_NAME] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        self._groups = groups
        self._metadata = {"format": "pt", **(metadata or {})}
        self._shard = -1
        self._pos = 0  # index within the current shard's group
        self._file = None
        self.weight_map: dict[str, str] = {}
        self.bytes_written = 0

    @property
    def total_bytes(self) -> int:
        return sum(p.nbytes for p in self.plan)

    def _start_shard(self) -> None:
        self._finish_shard()
        self._shard += 1
        self._pos = 0
        group = self._groups[self._shard]
        header: dict = {"__metadata__": self._metadata}
        offset = 0
        for p in group:
            header[p.name] = {"dtype": DTYPE_NAMES[p.dtype], "shape": list(p.shape),
                              "data_offsets": [offset, offset + p.nbytes]}
            offset += p.nbytes
        raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
        raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned, as safetensors writes it
        self._file = open(self.directory / self.shard_names[self._shard], "wb")
        self._file.write(struct.pack("<Q", len(raw)))
        self._file.write(raw)

    def _finish_shard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def write(self, name: str, tensor: torch.Tensor) -> None:
        if self._file is None or self._pos == len(self._groups[self._shard]):
            if self._shard + 1 >= len(self._groups):
                raise ValueError(f"tensor {name!r} was not planned (all planned tensors are written)")
            self._start_shard()
        expected = self._groups[self._shard][self._pos]
        if name != expected.name:
            raise ValueError(f"tensors written out of plan order: got {name!r}, expected {expected.name!r}")
        if tensor.dtype != expected.dtype or tuple(tensor.shape) != expected.shape:
            raise ValueError(f"tensor {name!r} is {tensor.dtype} {list(tensor.shape)} but was planned as "
                             f"{expected.dtype} {list(expected.shape)}")
        data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        if data.numel():
            self._file.write(memoryview(data.numpy()))
        self._pos += 1
        self.weight_map[name] = self.shard_names[self._shard]
        self.bytes_written += expected.nbytes

    def close(self) -> dict[str, str]:
        """Finish the last shard (and any planned but empty ones), write the index; return the weight map."""
        if len(self.weight_map) != len(self.plan):
            missing = [p.name for p in self.plan if p.name not in self.weight_map]
            self._finish_shard()
            raise ValueError(f"{len(missing)} planned tensors were never written, first {missing[0]!r}")
        if not self.plan:  # an empty model still gets a valid (empty) file
            self._start_shard()
        self._finish_shard()
        if len(self.shard_names) > 1:
            index = {"metadata": {"total_size": self.total_bytes}, "weight_map": self.weight_map}
            (self.directory / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        return self.weight_map

    def abort(self) -> None:
        self._finish_shard()


# -- atomic output directories ------------------------------------------------------------------
def check_output_dir(output: Path, overwrite: bool, inputs: Iterable[Path] = ()) -> None:
    """Refuse an existing output (unless ``overwrite``) and any output that is, holds or sits in an input."""
    output = Path(output).resolve()
    for inp in inputs:
        inp = Path(inp).resolve()
        if output == inp or inp in output.parents or output in inp.parents:
            raise FileExistsError(f"output directory {output} overlaps the input {inp}; the input is never "
                                  f"modified, choose another output directory")
    if output.exists() and not output.is_dir():  # --overwrite replaces a directory, never a file
        raise FileExistsError(f"output {output} exists and is not a directory; choose a directory name")
    if output.exists() and not overwrite:
        raise FileExistsError(f"output directory {output} already exists (pass --overwrite / overwrite=True to "
                              f"replace it)")


@contextlib.contextmanager
def atomic_output_dir(output: str | os.PathLike, overwrite: bool = False,
                      inputs: Iterable[Path] = ()) -> Iterator[Path]:
    """Yield a fresh temporary directory next to ``output``; rename it to ``output`` on success.

    On any exception (KeyboardInterrupt included) the temporary directory is removed and ``output`` is
    left as it was. With ``overwrite`` an existing ``output`` is replaced only after the new one is
    complete (moved aside, the new one renamed in, the old one deleted).
    """
    output = Path(output).absolute()
    check_output_dir(output, overwrite, inputs)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the output gets ordinary permissions
    try:
        yield tmp
        check_output_dir(output, overwrite, inputs)  # it may have appeared meanwhile
        if output.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{output.name}.old-", dir=output.parent))
            try:
                os.rename(output, old / output.name)
            except BaseException:
                os.rmdir(old)
                raise
            try:
                os.rename(tmp, output)
            except BaseException:
                os.rename(old / output.name, output)  # the old output back in its place
                os.rmdir(old)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
