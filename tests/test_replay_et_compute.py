"""replay.py --pace compute on a PyTorch execution trace, end to end: a plain script's trace
(tests/data/et_job.py, 3 ranks, a linear layer and a relu before its first call), its calls
replayed with the job's own compute ops before them at their shapes, --check 0 wrong. The
reading and the op runner are tested in-process (test_logic_etcompute.py)."""

import json

from commbench.trace import etcompute, formats
from support import ROOT, launch

DATA = ROOT / "tests" / "data"


def test_an_execution_traces_compute_ops_run_before_its_calls(tmp_path):
    trace = tmp_path / "et"
    trace.mkdir()
    job = launch(str(DATA / "et_job.py"), str(trace), nproc=3, backend=None)
    assert job.returncode == 0, job.stderr[-3000:]
    out = tmp_path / "replay.jsonl"
    result = launch("replay.py", str(trace), "--pace", "compute", "--check", "--repeat", "2",
                    f"--output={out}", nproc=3)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--check: 0 wrong element(s)" in result.stdout + result.stderr, result.stderr
    # the job's own compute, linear and relu among it, before rank 0's first call
    first = formats.read(str(trace)).calls(0)[0]
    names = [op.name for op in first.compute]
    assert {"aten::linear", "aten::relu"} <= set(names), names
    ops = etcompute.count(formats.read(str(trace)).calls(0))
    assert f"rank 0's {ops} ops run before its calls at their shapes" in result.stderr
    said = [line for line in result.stderr.splitlines()
            if "compute ops of the execution trace replayed" in line]
    # every one of them run, a pass, none skipped
    assert len(said) == 1 and f"--pace compute: {ops} compute ops of the execution trace " \
        "replayed before the calls a pass" in said[0] and "not replayed" not in said[0], said
    meta = json.loads(out.read_text().splitlines()[0])
    assert meta["mode"] == "the job's compute ops before each call"
    assert "the job's compute ops before each call" in result.stdout
