#!/usr/bin/env python3
"""The snapshot converter under its old path, for command lines that name it: it is the module
gpumem.snapshot_to_csv (console script gpumem-snapshot-to-csv once the package is installed)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
from gpumem.snapshot_to_csv import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
