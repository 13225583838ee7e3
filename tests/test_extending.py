"""Adding an op is a row, a file and a line (docs/extending.md): a throw-away op's facts in
commbench/opfacts.py, its module in a copy of the tree, commbench/ops/<op>.py, registered in
commbench/defaults.py's OPS, runs through
run_all.py and `python -m commbench <op>` with its flag, its table, its bandwidth formulas,
--check and the results file, and through utils' original names."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from support import ROOT, base_env, launch, parse_tables

# The file: a descriptor and the original's two entry points, as docs/extending.md shows.
OP_MODULE = '''"""all_reduce_max: every rank ends with the element-wise MAX over ranks, in place."""

import functools

import torch

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.opfacts import FACTS

ALL_REDUCE_MAX = Collective.of(
    FACTS["all_reduce_max"],
    bind=lambda comm, input, output, async_op: bound(
        comm.dist.all_reduce, input, comm.dist.ReduceOp.MAX, async_op=async_op),
    output_numel=None,
    expected=lambda values, rank, n, numel, index: torch.stack(
        [values(s, index) for s in range(n)]).amax(0),
)

timed_all_reduce_max = functools.partial(harness.timed_collective, ALL_REDUCE_MAX)
run_all_reduce_max = functools.partial(harness.run_op, ALL_REDUCE_MAX)
'''

# The row.
LAST_ROW = '    OpFacts("barrier", lambda n: 0, lambda n: 0, WHOLE, ("-", "-"), payload=False),\n'
ROW = ('    OpFacts("all_reduce_max", lambda n: 2, lambda n: 2 * (n - 1) / n, WHOLE,\n'
       '            ("2S/t", "(S/t)·2(n−1)/n"), reduces=True),\n')

# The line.
REGISTERED = '"all_to_allv", "barrier", "all_reduce_max")'


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of the suite's code with the new op added: a new row, a new file, a changed
    line."""
    copy = tmp_path_factory.mktemp("extended")
    for path in ROOT.glob("*.py"):
        shutil.copy(path, copy)
    shutil.copytree(ROOT / "commbench", copy / "commbench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    facts = (copy / "commbench" / "opfacts.py").read_text()
    assert facts.count(LAST_ROW) == 1
    (copy / "commbench" / "opfacts.py").write_text(facts.replace(LAST_ROW, LAST_ROW + ROW))
    (copy / "commbench" / "ops" / "all_reduce_max.py").write_text(OP_MODULE)
    defaults = (copy / "commbench" / "defaults.py").read_text()
    changed = defaults.replace('"all_to_allv", "barrier")', REGISTERED)
    assert len(changed.splitlines()) == len(defaults.splitlines()) and changed != defaults
    (copy / "commbench" / "defaults.py").write_text(changed)
    return copy


@pytest.mark.parametrize("nproc", [1, 3])
def test_new_op_runs_through_run_all(tree, tmp_path, nproc):
    output = tmp_path / "max.jsonl"
    result = launch(str(tree / "run_all.py"), "--all-reduce-max", "--scan", "--maxsize=5",
                    "--trials=3", "--check", "--raw", "--bw-unit=GBps", "--dist=torch",
                    f"--output={output}", nproc=nproc)
    assert result.returncode == 0, result
    table = result.table("all_reduce_max")
    assert result.ops == ["all_reduce_max"]
    assert table.devices == nproc
    assert [row.numel for row in table.rows] == [nproc * 2 ** p for p in range(1, 5)]
    assert [row.extra for row in table.rows] == [["0"]] * 4  # --check: no wrong element
    records = [json.loads(line) for line in output.read_text().splitlines()][1:]
    for row, record in zip(table.rows, records):
        assert record["op"] == "all_reduce_max" and record["wrong"] == 0
        rate = int(row.size) / (float(row.duration) * 1e-6)  # --raw: bytes and microseconds
        assert float(row.throughput) == pytest.approx(2 * rate / 1e9, abs=1e-3, rel=1e-2)
        assert float(row.busbw) == pytest.approx(2 * (nproc - 1) / nproc * rate / 1e9,
                                                 abs=1e-3, rel=1e-2)


def test_new_op_joins_every_op_and_the_original_names(tree, tmp_path):
    # --all runs every registered op in the registered order; with no op named, run_all.py
    # keeps running the original six (test_scan.py), so a new op runs with its flag or --all.
    result = launch(str(tree / "run_all.py"), "--all", "--scan", "--maxsize=3", "--trials=2",
                    "--dist=torch", nproc=2)
    assert result.returncode == 0, result
    assert result.ops == ["all_reduce", "all_gather", "all_to_all", "reduce_scatter", "pt2pt",
                          "broadcast", "reduce", "gather", "scatter", "all_to_allv", "barrier",
                          "all_reduce_max"]
    help_text = launch(str(tree / "run_all.py"), "--help").stdout
    assert re.search(r"--all-reduce-max\s+run all_reduce_max", help_text), help_text
    probe = tmp_path / "probe.py"
    probe.write_text(
        f"import sys; sys.path.insert(0, {str(tree)!r})\n"
        "import utils\n"
        # gloo: the probe is of the new op's formulas, not of the backend (a one-rank oneCCL
        # start failed once in CI beside other tests: "atl_ofi_open_nw_provs failed", then
        # "free(): invalid pointer" at exit, -6; 6 of 6 standalone passed)
        "args = utils.benchmark_parser().parse_args(['--dist', 'torch', '--bw-unit', 'GBps', "
        "'--backend', 'gloo'])\n"
        "utils.init_processes(None, args)\n"
        "print('bw', *utils.get_bw('all_reduce_max', 1000, 1e-3, args))\n")
    probed = launch(str(probe))  # forked: the tree first on its path, as PYTHONPATH would
    assert probed.returncode == 0, probed
    assert "bw 2000000.0 0.0" in probed.stdout.splitlines()
    # the report's legend reads the row
    legend = subprocess.run([sys.executable, "-c", "from commbench.report.sections import "
                             "LEGEND; print(LEGEND[-1])"], cwd=tree, capture_output=True,
                            text=True, timeout=60)
    assert legend.stdout.strip() == "('all_reduce_max', '2S/t', '(S/t)·2(n−1)/n')", legend
    # `python -m commbench` knows it too (from the tree's directory: its own package first)
    listed = subprocess.run([sys.executable, "-m", "commbench", "--help"], cwd=tree,
                            capture_output=True, text=True, timeout=60)
    assert re.search(r"^  all_reduce_max +one op", listed.stdout, re.M), listed
    alone = subprocess.run([sys.executable, "-m", "commbench", "all_reduce_max", "--scan",
                            "--maxsize=3", "--trials=2", "--dist=torch", "--backend=gloo",
                            "--raw"], cwd=tree, capture_output=True, text=True, timeout=120,
                           env=base_env())
    assert alone.returncode == 0, alone
    assert [table.op for table in parse_tables(alone.stdout)] == ["all_reduce_max"]


def test_an_unregistered_or_missing_op_is_one_line(tree, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tree, broken, ignore=shutil.ignore_patterns("__pycache__"))
    (broken / "commbench" / "ops" / "all_reduce_max.py").unlink()
    result = launch(str(broken / "run_all.py"), "--all-reduce-max", "--scan", "--dist=torch")
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines()[-1] == (
        "commbench: error: op 'all_reduce_max' has no module commbench/ops/all_reduce_max.py")
