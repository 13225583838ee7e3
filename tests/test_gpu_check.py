"""scripts/gpu-check.sh, the prepared check of the CUDA path: valid bash, a clear exit where
there is no GPU, and every one of its cases run for real on CPU ranks (`--device cpu`)."""

import re
import subprocess
import sys

import pytest
import torch

from support import ROOT, base_env, free_port, memory_cgroup

SCRIPT = ROOT / "scripts" / "gpu-check.sh"


def gpu_check(*args, preexec_fn=None, **extra):
    env = base_env(PYTHON=sys.executable, MASTER_PORT=str(free_port()), GPU_CHECK_MAXSIZE="6",
                   **extra)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900, stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)


def test_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the script would check it")
def test_no_gpu_is_one_line_and_exit_2():
    result = gpu_check()
    assert result.returncode == 2, result
    assert result.stdout.strip().splitlines() == [
        "gpu-check: no CUDA GPU is present here (torch.cuda.is_available() is False); "
        "nothing checked"]


def test_every_case_runs_on_cpu_ranks():
    # The single-size case plans on a share of the rank's memory: a cgroup keeps it small. The
    # cases under deepspeed.comm alone: --dist torch's are the same command lines, through the
    # layer every other test runs (half a minute less on 2 cores).
    with memory_cgroup(1 << 30) as group:
        result = gpu_check("--device", "cpu", preexec_fn=group.enter, GPU_CHECK_DISTS="deepspeed")
        assert group.oom_kills() == 0
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    cases = [line for line in lines if re.match(r"gpu-check: (torch|deepspeed) ", line)]
    assert len(cases) == 5 and all(" deepspeed " in f" {line} " for line in cases), lines
    for line in cases:
        assert re.search(r" ok: gloo, \d+ rows of (1|5|10) ops, 0 wrong, largest \w+ \d+ B in [\d.]+ "
                         r"us \(\d+ s\)$", line), line
    # Scans of --maxsize 6: 5 sizes of each of 5 ops; single sizes: one row per op; all ops at
    # world size 1: 9 with payload x 2 dtypes x 5 sizes, and barrier's one row; all_to_allv's 5.
    assert [int(re.search(r"(\d+) rows", line).group(1)) for line in cases] == \
        [25, 5, 25, 91, 5]
    assert lines[-1] == "gpu-check: all cases ok on cpu"
