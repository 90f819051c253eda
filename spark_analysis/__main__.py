"""Entry point for `python -m spark_analysis` and `spark-submit spark_analysis/__main__.py`."""

import sys
from pathlib import Path

if not __package__:
    # Run as a plain script (spark-submit): import the package from its parent directory,
    # and keep the package directory itself off sys.path so its modules shadow nothing.
    _PACKAGE_DIR = Path(__file__).resolve().parent
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != _PACKAGE_DIR]
    sys.path.insert(0, str(_PACKAGE_DIR.parent))

from spark_analysis.cli import main

if __name__ == "__main__":
    sys.exit(main())
