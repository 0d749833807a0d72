#!/usr/bin/env python
"""Same as ``quantkit convert ...`` from a checkout without installing:

    python scripts/convert_checkpoint.py IN OUT --recipe int4-weight-only [--ignore lm_head] [--format fp8]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from quantkit.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["convert", *sys.argv[1:]]))
