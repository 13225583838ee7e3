"""commbench: the harness behind the op scripts at the top of the repository.

A few wings, each a folder whose name says what it holds, and a small set of modules at the top;
one concern a module, imports running one way. The map, every module with what it owns and the
order of the wings, is written once: docs/extending.md, "Where things are" (`make lint` holds
the order: pyproject.toml's import contracts).

`utils.py` and `constants.py` at the top of a checkout are the public face with the original
suite's names; the package imports without them.
"""

import warnings

# The one place of the version: pyproject.toml reads it, `--version` prints it, every results
# file's meta carries it (versions.commbench).
__version__ = "0.1.0"

# torch warns at import when numpy is missing; `--dist torch` needs torch alone (numpy is not
# one of torch's own requirements), so the warning concerns nothing this suite does.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
