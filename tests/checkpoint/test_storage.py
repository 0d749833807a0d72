"""Safetensors reading/writing: header checks, the streamed shard writer, atomic output directories."""
import json
import struct

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from quantkit.checkpoint.storage import (
    INDEX_NAME,
    Checkpoint,
    CheckpointError,
    PlannedTensor,
    ShardWriter,
    atomic_output_dir,
    parse_size,
    read_header,
)

from .common import bits


def _tensors():
    return {
        "a.weight": torch.randn(5, 7),
        "b.weight": torch.randn(3, 300).to(torch.float8_e4m3fn),
        "b.scale": torch.rand(1, 3).bfloat16(),
        "c.codes": torch.randint(-2**31, 2**31 - 1, (4, 9), dtype=torch.int32),
        "d.empty": torch.empty(0, 4),
        "e.scalar": torch.tensor(3, dtype=torch.int64),
        "f.u8": torch.randint(0, 255, (17,), dtype=torch.uint8),
    }


@pytest.mark.parametrize("limit", ["1GB", 1000, 1])
def test_shard_writer_output_is_read_back_by_safetensors(tmp_path, limit):
    tensors = _tensors()
    plan = [PlannedTensor(n, t.dtype, tuple(t.shape)) for n, t in tensors.items()]
    writer = ShardWriter(tmp_path, plan, limit)
    for name, t in tensors.items():
        writer.write(name, t)
    weight_map = writer.close()
    files = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    if limit == "1GB":
        assert files == ["model.safetensors"] and not (tmp_path / INDEX_NAME).exists()
    else:
        n = len(files)
        assert n > 1 and files == [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        index = json.loads((tmp_path / INDEX_NAME).read_text())
        assert index["weight_map"] == weight_map
        assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())
    if limit == 1:
        # every nonempty tensor gets its own shard when each exceeds the limit
        assert len(files) >= len(tensors) - 1
    for name, t in tensors.items():
        with safe_open(str(tmp_path / weight_map[name]), "pt") as f:
            got = f.get_tensor(name)
            assert f.metadata() == {"format": "pt"}
        assert got.dtype == t.dtype and got.shape == t.shape and torch.equal(bits(got), bits(t)), name
    ckpt = Checkpoint(tmp_path)
    assert sorted(ckpt.names()) == sorted(tensors)
    for name, t in tensors.items():
        assert torch.equal(bits(ckpt.get(name)), bits(t))


def test_shard_writer_checks_the_plan(tmp_path):
    plan = [PlannedTensor("x", torch.float32, (2, 2)), PlannedTensor("y", torch.int8, (3,))]
    w = ShardWriter(tmp_path, plan, "1GB")
    with pytest.raises(ValueError, match="out of plan order"):
        w.write("y", torch.zeros(3, dtype=torch.int8))
    w.abort()
    w = ShardWriter(tmp_path, plan, "1GB")
    with pytest.raises(ValueError, match="planned as"):
        w.write("x", torch.zeros(2, 3))
    w.abort()
    w = ShardWriter(tmp_path, plan, "1GB")
    w.write("x", torch.zeros(2, 2))
    with pytest.raises(ValueError, match="never written"):
        w.close()


def test_parse_size():
    assert parse_size("5GB") == 5 * 10**9
    assert parse_size("2GiB") == 2 * 2**30
    assert parse_size("500 MB") == 500 * 10**6
    assert parse_size(123) == 123
    for bad in ("lots", "-1MB", 0):
        with pytest.raises(ValueError):
            parse_size(bad)


@pytest.fixture
def stfile(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"w": torch.randn(64, 64), "b": torch.randn(64)}, str(path))
    return path


def test_header_check_accepts_a_valid_file(stfile):
    infos, meta = read_header(stfile)
    assert set(infos) == {"w", "b"} and infos["w"].shape == (64, 64) and infos["w"].dtype == torch.float32


def test_truncated_file_is_reported_with_its_name(stfile):
    data = stfile.read_bytes()
    stfile.write_bytes(data[:-100])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: truncated.*needs \d+ bytes"):
        read_header(stfile)
    stfile.write_bytes(data[:20])
    with pytest.raises(CheckpointError, match="model.safetensors: truncated or corrupt"):
        read_header(stfile)
    stfile.write_bytes(b"abc")
    with pytest.raises(CheckpointError, match="model.safetensors: truncated or not a safetensors file"):
        read_header(stfile)


def test_corrupt_header_is_reported(stfile):
    data = bytearray(stfile.read_bytes())
    data[12:20] = b"\xff\x00garbl"
    stfile.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors: corrupt safetensors header"):
        read_header(stfile)


def test_inconsistent_offsets_name_the_tensor(tmp_path):
    header = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}
    raw = json.dumps(header).encode()
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 12)
    with pytest.raises(CheckpointError, match=r"x\.safetensors: corrupt header: tensor 'w'"):
        read_header(path)


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        read_header(tmp_path / "nope.safetensors")
    with pytest.raises(CheckpointError, match="no \\*.safetensors file"):
        Checkpoint(tmp_path)


def _sharded(tmp_path):
    save_file({"a": torch.zeros(2)}, str(tmp_path / "s1.safetensors"))
    save_file({"b": torch.ones(3)}, str(tmp_path / "s2.safetensors"))
    index = {"metadata": {}, "weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}
    (tmp_path / INDEX_NAME).write_text(json.dumps(index))
    return index


def test_index_naming_a_missing_shard(tmp_path):
    _sharded(tmp_path)
    assert torch.equal(Checkpoint(tmp_path).get("b"), torch.ones(3))
    (tmp_path / "s2.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"index\.json: names shard 's2\.safetensors' \(for tensor 'b'.*missing"):
        Checkpoint(tmp_path)


def test_index_naming_a_tensor_its_shard_lacks(tmp_path):
    index = _sharded(tmp_path)
    index["weight_map"]["c"] = "s1.safetensors"
    (tmp_path / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="says tensor 'c' is in s1.safetensors, which has no such tensor"):
        Checkpoint(tmp_path)


def test_reader_reopens_files_and_keeps_tensors_valid(tmp_path):
    tensors = {f"t{i}": torch.randn(256, 256) for i in range(6)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    ckpt = Checkpoint(tmp_path, reopen_bytes=300_000)  # reopen after about every tensor
    got = {name: ckpt.get(name) for name in ckpt.names()}
    ckpt.close()
    for name, t in tensors.items():
        assert torch.equal(got[name], t)


def test_atomic_output_dir(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with atomic_output_dir(out) as tmp:
            (tmp / "half.txt").write_text("x")
            raise RuntimeError("boom")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(KeyboardInterrupt):
        with atomic_output_dir(out) as tmp:
            (tmp / "half.txt").write_text("x")
            raise KeyboardInterrupt
    assert not out.exists() and list(tmp_path.iterdir()) == []

    with atomic_output_dir(out) as tmp:
        (tmp / "v1.txt").write_text("1")
    assert (out / "v1.txt").exists()
    with pytest.raises(FileExistsError, match="already exists"):
        with atomic_output_dir(out):
            pass
    with pytest.raises(RuntimeError):
        with atomic_output_dir(out, overwrite=True) as tmp:
            (tmp / "v2.txt").write_text("2")
            raise RuntimeError("boom")
    assert sorted(p.name for p in out.iterdir()) == ["v1.txt"]  # the old output survives a failed overwrite
    with atomic_output_dir(out, overwrite=True) as tmp:
        (tmp / "v2.txt").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["v2.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with pytest.raises(FileExistsError, match="overlaps the input"):
        with atomic_output_dir(out / "inner", inputs=[out]):
            pass


@pytest.mark.parametrize("header", [
    {"__metadata__": "not an object", "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
    {"__metadata__": [["format", "pt"]], "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
    {"w": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}},
    {"w": {"dtype": "F32", "shape": [-1, -1], "data_offsets": [0, 4]}},
    {"w": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}},
    {"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}},
    {"w": {"dtype": "F32", "shape": [1], "data_offsets": [False, 4]}},
    {"__metadata__": {"format": {"pt": 1}}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
], ids=["metadata-string", "metadata-list", "dtype-list", "negative-shape", "shape-string", "shape-float",
        "offset-bool", "metadata-value"])
def test_malformed_header_fields_are_reported_with_the_file(tmp_path, header):
    """Every malformed field is a CheckpointError naming the file, found by the header check (never a
    TypeError, nor a header safetensors itself refuses only when the tensor is read)."""
    raw = json.dumps(header).encode()
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 4)
    with pytest.raises(CheckpointError, match=r"x\.safetensors: corrupt"):
        read_header(path)


def test_index_missing_an_entry_for_a_tensor_of_its_shard(tmp_path):
    """A tensor the index does not list would silently drop out of a conversion: it is an error."""
    index = _sharded(tmp_path)
    del index["weight_map"]["b"]
    (tmp_path / INDEX_NAME).write_text(json.dumps(index))
    # s2.safetensors is no longer named by the index at all: it is not part of the model
    assert Checkpoint(tmp_path).names() == ["a"]
    save_file({"a": torch.zeros(2), "a2": torch.ones(1)}, str(tmp_path / "s1.safetensors"))
    with pytest.raises(CheckpointError, match=r"index\.json: has no entry for tensor 'a2' of s1\.safetensors"):
        Checkpoint(tmp_path)


@pytest.mark.parametrize("shard", [None, 3, ["s1.safetensors"]])
def test_index_with_a_shard_name_that_is_not_a_string(tmp_path, shard):
    index = _sharded(tmp_path)
    index["weight_map"]["b"] = shard
    (tmp_path / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"index\.json: not a valid safetensors index.*'b'"):
        Checkpoint(tmp_path)


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_overwrite_keeps_the_old_output_when_the_new_one_cannot_take_its_place(tmp_path, monkeypatch, error):
    """--overwrite moves the old output aside before renaming the new one in: if that second rename fails
    (Ctrl-C, a file system error), the old output is put back, not left in a hidden directory."""
    import os

    from quantkit.checkpoint import storage

    out = tmp_path / "out"
    with atomic_output_dir(out) as tmp:
        (tmp / "v1.txt").write_text("1")
    real = os.rename

    def rename(src, dst):
        if ".partial-" in str(src):
            raise error
        return real(src, dst)

    monkeypatch.setattr(storage.os, "rename", rename)
    with pytest.raises(error):
        with atomic_output_dir(out, overwrite=True) as tmp:
            (tmp / "v2.txt").write_text("2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in out.iterdir()) == ["v1.txt"]
