import sys

from quantkit.cli import main

sys.exit(main())
