"""Defaults of the benchmark suite: the original's `constants` module, kept at the top of a
checkout. The values live in the package (commbench/defaults.py), which imports without it.

Standard library only: `--dist torch` must start without DeepSpeed.
"""

from commbench.defaults import *  # noqa: F401,F403
