"""--dist torch needs torch alone: in a venv of its own that has torch and what torch's wheel
brings (no numpy, no deepspeed, no mpi4py), the ranks start, exchange their host names and
measure; no "Numpy is not available". The venv is made once, beside the project's
(.venv/torch-alone): the same installed torch and its requirements, linked from the project's
venv (what `pip install torch` would bring, without a download: a minute less in CI)."""

import importlib.metadata
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from packaging.markers import Marker

from support import BIN, ROOT, base_env, free_port, parse_tables

ALONE = BIN.parent / "torch-alone"


def requirements_closure(name):
    """The distributions `name` needs at run time here (its extras left out), itself included."""
    seen, todo = {}, [name]
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = dist
        for requirement in dist.requires or []:
            wanted, _, marker = requirement.partition(";")
            if marker and ("extra" in marker or not Marker(marker).evaluate()):
                continue
            todo.append(re.split(r"[\s<>=!~\[(]", wanted.strip())[0])
    return list(seen.values())


def link_torch_alone(venv):
    """A venv (no pip) whose site-packages links torch and its requirements from this one's,
    with torch's own console scripts (torchrun) made for its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)],
                   check=True, timeout=300)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = venv / ours.relative_to(sys.prefix)
    dists = requirements_closure("torch")
    for dist in dists:
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            if (ours / top).exists() and not (theirs / top).exists():
                (theirs / top).symlink_to(ours / top)
    torch = next(d for d in dists if d.metadata["Name"] == "torch")
    for entry in torch.entry_points.select(group="console_scripts"):
        module, _, function = entry.value.partition(":")
        script = venv / "bin" / entry.name
        script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom {module} import "
                          f"{function}\nsys.exit({function}())\n")
        script.chmod(0o755)


@pytest.fixture(scope="module")
def torch_alone():
    python = ALONE / "bin" / "python"
    if not (ALONE / ".linked").exists():
        link_torch_alone(ALONE)
        (ALONE / ".linked").touch()
    probe = subprocess.run([str(python), "-c", "import numpy"], capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'numpy'" in probe.stderr
    probe = subprocess.run([str(python), "-c", "import deepspeed"], capture_output=True,
                           text=True)  # (torch imports: the tests below)
    assert "No module named 'deepspeed'" in probe.stderr, probe.stderr
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
