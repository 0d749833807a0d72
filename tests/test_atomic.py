"""Output files are replaced whole or not at all (quantkit.atomic)."""
import os

import pytest

from quantkit import atomic


def test_write_text_creates_parents_and_replaces(tmp_path):
    path = tmp_path / "a" / "b" / "out.json"
    assert atomic.write_text(path, "one") == path
    atomic.write_text(path, "two")
    assert path.read_text() == "two"
    assert os.listdir(path.parent) == ["out.json"]


def test_a_failing_writer_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "plot.png"
    path.write_bytes(b"old")
    seen = []

    def write(tmp):
        seen.append(tmp)
        tmp.write_bytes(b"half of the new")
        raise KeyboardInterrupt  # Ctrl-C in the middle of writing

    with pytest.raises(KeyboardInterrupt):
        atomic.write_with(path, write)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["plot.png"]
    # the temporary file sits beside the target and keeps its suffix (savefig picks the format by it)
    assert seen[0].parent == tmp_path and seen[0].suffix == ".png"


def test_bench_json_keeps_the_old_file_when_the_result_cannot_be_written(tmp_path):
    from quantkit.bench import common

    path = tmp_path / "layers.json"
    common.write_json(path, {"rows": [1]})
    with pytest.raises(TypeError):
        common.write_json(path, {"rows": [object()]})
    assert '"rows"' in path.read_text() and os.listdir(tmp_path) == ["layers.json"]
