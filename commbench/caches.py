"""Where the tools under the suite keep what they build and cache: in the venv the suite runs
from, not the user's home. DeepSpeed's CPU ops, which torch JIT-builds on first use, go to
TORCH_EXTENSIONS_DIR (torch's default: ~/.cache/torch_extensions) and matplotlib's font cache
to MPLCONFIGDIR (~/.cache/matplotlib): `make` builds the ops once into .venv/torch_extensions,
and a run from an ordinary shell, with nothing exported, must find them there rather than
spend a minute or two rebuilding them in ~/.cache. A value the user set is kept; outside a
venv nothing is changed."""

import os
import sys


def in_venv():
    return sys.prefix != sys.base_prefix


def keep_in_venv(*names):
    """Each of TORCH_EXTENSIONS_DIR and MPLCONFIGDIR named, unset, set to its folder in the venv
    (before the tool that reads it is imported)."""
    folders = {"TORCH_EXTENSIONS_DIR": "torch_extensions", "MPLCONFIGDIR": "matplotlib"}
    if not in_venv():
        return
    for name in names:
        if not os.environ.get(name):
            os.environ[name] = os.path.join(sys.prefix, folders[name])


def cache_dir():
    """The folder of what the suite measures once and keeps (the memory copy's pace, --peak):
    $COMMBENCH_CACHE if set; in a venv, its commbench-cache folder (beside the ops it builds);
    else $XDG_CACHE_HOME/commbench (~/.cache/commbench)."""
    if os.environ.get("COMMBENCH_CACHE"):
        return os.environ["COMMBENCH_CACHE"]
    if in_venv():
        return os.path.join(sys.prefix, "commbench-cache")
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home, "commbench")
