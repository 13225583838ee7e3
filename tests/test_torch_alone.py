"""--dist torch needs torch alone: in a venv of its own that has torch and what torch's wheel
brings (no numpy, no deepspeed, no mpi4py), the ranks start, exchange their host names and
measure; no "Numpy is not available". The venv is made once, beside the project's
(.venv/torch-alone), from the same pinned torch."""

import os
import subprocess
import sys

import pytest

from support import BIN, ROOT, base_env, free_port, parse_tables

ALONE = BIN.parent / "torch-alone"


@pytest.fixture(scope="module")
def torch_alone():
    python = ALONE / "bin" / "python"
    if not (ALONE / ".installed").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(ALONE)], check=True,
                       timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-c",
                        str(ROOT / "constraints.txt"), "torch"], check=True, timeout=900)
        (ALONE / ".installed").touch()
    probe = subprocess.run([str(python), "-c", "import numpy"], capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'numpy'" in probe.stderr
    return ALONE / "bin"


def _env(bin_dir):
    env = base_env()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env.pop("PYTHONPATH", None)
    return env


@pytest.mark.parametrize("nproc", [1, 3])
def test_dist_torch_runs_with_torch_alone(torch_alone, nproc):
    cmd = [str(torch_alone / "torchrun"), f"--nproc_per_node={nproc}",
           f"--master_port={free_port()}", "run_all.py", "--dist=torch", "--scan",
           "--maxsize=4", "--trials=2", "--check"]
    result = subprocess.run(cmd, cwd=ROOT, env=_env(torch_alone), capture_output=True, text=True,
                            timeout=240, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "Numpy is not available" not in result.stderr
    # torch warns at import without numpy; the suite silences it in its ranks (torchrun, a
    # torch program of its own, still says it once).
    assert result.stderr.count("Failed to initialize NumPy") == 1
    assert f"{nproc} rank{'s' if nproc > 1 else ''} on 1 host(s)" in result.stderr
    tables = parse_tables(result.stdout)
    assert len(tables) == (6 if nproc > 1 else 5)  # pt2pt needs 2 ranks
    assert all(row.extra == ["0"] for table in tables for row in table.rows)


def test_deepspeed_layer_says_what_is_missing(torch_alone):
    result = subprocess.run([str(torch_alone / "python"), "all_reduce.py", "--dist=deepspeed"],
                            cwd=ROOT, env=_env(torch_alone), capture_output=True, text=True,
                            timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "--dist deepspeed needs DeepSpeed" in errors[0], result.stderr
    assert "use --dist torch" in errors[0] and "Traceback" not in result.stderr
