"""``python -m bench.figures``: see ``bench.figures.cli``."""

import sys

from bench.figures.cli import main

sys.exit(main())
