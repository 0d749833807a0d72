"""Output files written atomically: a reader, or the user after a crash or Ctrl-C, finds the old file
or the whole new one, never half of one. Each writer fills a temporary file beside the target (same
directory, so the final ``os.replace`` is a rename within one file system) and renames it into place.
Checkpoint directories have their own helper, :func:`quantkit.checkpoint.storage.atomic_output_dir`."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def write_with(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` to fill a temporary file beside ``path`` (with ``path``'s suffix, so that
    writers that pick a format by it, such as matplotlib's ``savefig``, pick the same one), then rename
    it to ``path``. Creates the parent directory; on any error the temporary file is removed and
    ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=f".tmp{path.suffix}")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    """``Path(path).write_text(text)``, atomically."""
    return write_with(path, lambda tmp: tmp.write_text(text))
