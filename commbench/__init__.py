"""commbench: the harness behind the op scripts at the top of the repository.

One concern a module, dependencies running one way. The map of the modules, what each owns
and which way they import, is written once: docs/extending.md, "Where things are" (`make lint`
holds the directions it can: pyproject.toml's import contracts). What each op is (its bandwidth
factors, root, reduction) is one table, opfacts.py.

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
