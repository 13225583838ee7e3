"""python -m commbench COMMAND [FLAGS] (commbench/commands.py)."""

import sys

from commbench.commands import main

if __name__ == "__main__":
    sys.exit(main())
