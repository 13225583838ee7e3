"""report.py: compare, plot, html, strategy and buckets reports of results files (docs/report.md).

    python report.py compare A B
    python report.py plot A [B ...] -o curves.png
    python report.py html A [B ...] -o report.html

The commands live in commbench/report/cli.py (also `commbench report`).
"""

import sys

from commbench.report.cli import main

if __name__ == "__main__":
    sys.exit(main())
