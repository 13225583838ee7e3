"""The ops: one module each, holding the op's descriptor (a commbench.bench.collective.Collective)
and the original's two entry points, `timed_<op>` and `run_<op>`. Which ops exist, and in what order
run_all.py runs them, is defaults.OPS; the op scripts at the top of a checkout are fronts over these
modules, and so is `python -m commbench <op>`."""

import importlib

from ..bench.collective import Collective
from ..errors import BenchmarkError


def descriptor(name):
    """The descriptor that commbench/ops/<name>.py defines."""
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{name}":
            raise
        raise BenchmarkError(f"op '{name}' has no module commbench/ops/{name}.py") from None
    found = [value for value in vars(module).values()
             if isinstance(value, Collective) and value.name == name]
    if len(found) != 1:
        raise BenchmarkError(f"commbench/ops/{name}.py defines {len(found)} Collective named "
                             f"'{name}'; it must define exactly one")
    return found[0]
