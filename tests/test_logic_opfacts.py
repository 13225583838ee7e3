"""One table of op facts (commbench/opfacts.py): every registered op has its row, and the op
scripts' descriptors, the trace readers and the report read the row rather than a copy of it;
report/ and db/ (and the table, and the trace readers they use) import no torch."""

import subprocess
import sys

import pytest

from commbench import defaults, ops, opfacts
from commbench.opfacts import FACTS
from commbench.trace import model
from support import ROOT

WORLDS = range(1, 9)


@pytest.mark.fast
def test_every_registered_op_has_a_row():
    assert set(defaults.OPS) == set(FACTS)
    assert all(name == row.name for name, row in FACTS.items())
    assert all(row.size_rule in (opfacts.WHOLE, opfacts.GATHERED, opfacts.SPLIT)
               for row in FACTS.values())


@pytest.mark.fast
@pytest.mark.parametrize("name", defaults.OPS)
def test_the_descriptor_says_what_its_row_says(name):
    collective, row = ops.descriptor(name), FACTS[name]
    assert (collective.size_rule, collective.reduces, collective.payload) == \
        (row.size_rule, row.reduces, row.payload)
    for n in WORLDS:
        # all_to_allv's BusBW comes from its splits: all_to_all's (the row's) when even
        assert collective.algbw_factor(n) == row.algbw_factor(n)
        assert collective.busbw_factor(n) == pytest.approx(row.busbw_factor(n))
    module = __import__(f"commbench.ops.{name}", fromlist=["ROOT"])
    assert getattr(module, "ROOT", None) == row.root


@pytest.mark.fast
def test_the_trace_vocabulary_comes_from_the_table():
    assert set(model.ROOTED) == {"broadcast", "reduce", "gather", "scatter"}
    assert set(model.REDUCING) == {"all_reduce", "reduce", "reduce_scatter"}
    # --op's "prod" is a trace's "product" (torch's name), both torch's ReduceOp.PRODUCT
    assert defaults.REDUCE_OPS == ("sum", "prod", "min", "max", "avg")
    assert model.REDUCE_OPS == ("sum", "avg", "product", "min", "max")
    assert {opfacts.REDUCE_OPS[opfacts.TRACE_REDUCE_OPS[name]] for name in model.REDUCE_OPS} == \
        set(opfacts.REDUCE_OPS.values())


@pytest.mark.fast
def test_the_legend_has_every_op():
    from commbench.report.sections import LEGEND
    assert [op for op, _, _ in LEGEND] == list(FACTS)
    assert LEGEND[0] == ("all_reduce", "2S/t", "(S/t)·2(n−1)/n")


def test_report_and_db_import_no_torch():
    """A fresh interpreter imports every module of report/ and db/, the table and the trace
    readers report/ uses; torch is not among what it loaded."""
    modules = sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for folder in ("report", "records/db") for path in (ROOT / "commbench" / folder).glob("*.py"))
    modules += ["commbench.opfacts", "commbench.defaults", "commbench.trace.formats",
                "commbench.trace.dscomms", "commbench.trace.model"]
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "    assert 'torch' not in sys.modules, name\n"
            "print(len(sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
