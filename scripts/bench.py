#!/usr/bin/env python
"""Same as ``quantkit bench ...`` from a checkout without installing: ``python scripts/bench.py layers``."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from quantkit.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
