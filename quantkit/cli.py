"""The ``quantkit`` console command. Each subcommand lives in its own module, imported only when run.

A subcommand module defines ``add_arguments(parser)`` and ``run(args) -> int`` (the exit status) and
a one-line ``HELP``. Errors quantkit anticipates (bad input files, unknown recipes, ...) are raised
as exceptions with a message naming the file, tensor or module; they are printed without a traceback
and exit with status 2 (``QUANTKIT_DEBUG=1`` shows the traceback).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

SUBCOMMANDS = {
    "demo": "quantkit.demo",
    "convert": "quantkit.checkpoint.cli",
    "compare": "quantkit.accuracy.cli",
    "bench": "quantkit.bench.cli",
    "tune": "quantkit.tune",
}


class UserError(Exception):
    """An error in what the user asked for; the CLI prints its message alone and exits with 2."""


def check_output_file(path, option: str) -> None:
    """A UserError naming ``option`` where the file ``path`` cannot be written: it is a directory, or its
    directory does not exist. Checked before the work whose result it holds."""
    from pathlib import Path

    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option}: {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise UserError(f"{option}: directory {path.parent} does not exist")


def check_device(value: str | None):
    """The ``torch.device`` a ``--device`` option names (None: cuda when available, else cpu), or a
    UserError for a name torch does not know or a GPU this machine does not have."""
    import torch

    if value is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise UserError(f"--device {value}: expected cpu, cuda or cuda:N")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UserError(f"--device {value}: torch {torch.__version__} sees no CUDA GPU here; use --device cpu")
        if device.index is not None and device.index >= count:
            raise UserError(f"--device {value}: torch sees {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
    return device


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quantkit", description="Quantize PyTorch models: FP8 block, int8, int4.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log which kernels run, and more")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                continue  # that subcommand is not part of this install
            raise
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("quantkit: interrupted", file=sys.stderr)
        return 130
    # errors in what was asked for, paths included (a file where a directory is meant, no permission): one line
    except (UserError, ValueError, FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
            NotADirectoryError) as exc:
        if os.environ.get("QUANTKIT_DEBUG") == "1":
            raise
        print(f"quantkit {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
