"""``python -m om`` is the ``om`` command."""

import sys

from om.cli import main

sys.exit(main())
