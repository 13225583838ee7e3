"""`pip install` (issue 40): a wheel built from the checkout's tracked files, installed with
--no-deps into a fresh venv that sees the test venv's packages (torch, DeepSpeed, ...) but not
the checkout, then run as a user would from a directory of their own: `python -m commbench`
under torchrun and the deepspeed launcher, the `commbench` command, and a job of the user's that
records its communication with commbench.trace.record and is replayed. Then `-m commbench` under
mpirun and srun, from the checkout's editable install (what make installs)."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from support import ROOT, base_env, finish, free_port, launch, parse_tables

USER_JOB = '''"""A user's job: three steps of an all_reduce and a broadcast, recorded (docs/replay.md)."""
import sys

import torch
import torch.distributed as dist

from commbench.trace import record

dist.init_process_group("gloo")
with record(sys.argv[1]) as recorder:
    for step in range(3):
        x = torch.ones(1000 + step)
        dist.all_reduce(x)
        dist.broadcast(x, src=0)
        recorder.step()
dist.destroy_process_group()
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the fresh venv's python, the wheel, a working directory outside the checkout)."""
    base = tmp_path_factory.mktemp("package")
    source = base / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "--quiet", "-w", str(base / "dist"),
                            str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    wheel, = (base / "dist").glob("commbench-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                             text=True, check=True).stdout.strip()
    # The test venv's packages as a plain path entry: its own .pth files (the checkout's
    # editable install among them) are not processed, so commbench can only come from the wheel.
    (Path(purelib) / "test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                          "--no-deps", "--quiet", str(wheel)], capture_output=True, text=True,
                         timeout=300)
    assert pip.returncode == 0, pip.stderr
    work = base / "user"
    work.mkdir()
    return python, wheel, work


def _env(python):
    """A user's shell: the fresh venv's bin first, nothing of the checkout on PYTHONPATH."""
    env = base_env(PATH=f"{python.parent}:{os.environ['PATH']}")
    env.pop("PYTHONPATH", None)
    return env


def _run(python, work, *argv, timeout=240):
    return subprocess.run([str(a) for a in argv], cwd=work, env=_env(python),
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_the_wheel_holds_the_package_alone(installed):
    python, wheel, work = installed
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"commbench", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    assert "commbench/report/report.html.j2" in names and "commbench/ops/all_reduce.py" in names
    assert not [n for n in names if n.endswith((".png", ".tar.gz", ".whl")) or "/tests/" in n]
    found = _run(python, work, python, "-c", "import commbench, json, sys; print(json.dumps("
                 "[commbench.__file__, commbench.__version__, sys.path]))")
    where, version, path = json.loads(found.stdout)
    assert where.startswith(str(python.parent.parent)), where
    venv_packages = Path(sysconfig.get_paths()["purelib"])  # may lie in the checkout (.venv)
    checkout = [p for p in path if p and Path(p).resolve().is_relative_to(ROOT)
                and not Path(p).resolve().is_relative_to(venv_packages)]
    assert not checkout, path
    shown = _run(python, work, python.parent / "commbench", "--version")
    assert shown.returncode == 0 and shown.stdout.strip() == f"commbench {version}", shown
    listed = _run(python, work, python.parent / "commbench", "--help")
    for command in ("all_reduce", "pt2pt", "run_all", "doctor", "replay", "report",
                    "parallel_bench"):
        assert f"\n  {command} " in listed.stdout, listed.stdout
    wrong = _run(python, work, python.parent / "commbench", "all_reduse")
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, wrong
    assert "unknown command 'all_reduse'" in wrong.stderr


def test_a_plain_pip_install_without_deepspeed_runs_the_docs_next_command(installed, tmp_path):
    """docs/launching.md's `pip install .` (no extras) then `torchrun ... -m commbench all_reduce
    --scan`, in a venv that has torch but no DeepSpeed: the run measures torch.distributed and
    says so in one note; `--dist deepspeed` said outright is still one clear line."""
    _, wheel, work = installed
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                   "get_paths()['purelib'])"], capture_output=True, text=True,
                                  check=True).stdout.strip())
    # The test venv's packages, one link each, less DeepSpeed and the checkout's editable
    # install (its .pth files: none is needed by torch, psutil or tqdm).
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name.lower()
        if not name.startswith(("deepspeed", "commbench", "__editable__")) and \
                not name.endswith(".pth") and not (purelib / entry.name).exists():
            (purelib / entry.name).symlink_to(entry)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                          "--no-deps", "--quiet", str(wheel)], capture_output=True, text=True,
                         timeout=300)
    assert pip.returncode == 0, pip.stderr
    output = tmp_path / "run.jsonl"
    result = _run(python, work, python, "-m", "torch.distributed.run", "--nproc_per_node=2",
                  f"--master_port={free_port()}", "-m", "commbench", "all_reduce", "--scan",
                  "--maxsize=4", "--trials=3", f"--output={output}")
    assert result.returncode == 0, result.stderr
    table, = parse_tables(result.stdout)
    assert (table.op, table.devices, len(table.rows)) == ("all_reduce", 2, 3)
    notes = [line for line in result.stderr.splitlines() if "DeepSpeed is not installed" in line]
    assert len(notes) == 1 and "--dist torch" in notes[0], result.stderr
    assert json.loads(output.read_text().splitlines()[0])["dist"] == "torch"
    said = _run(python, work, python, "-m", "commbench", "all_reduce", "--dist=deepspeed")
    assert said.returncode == 1 and said.stderr.count("\n") == 1, said
    assert "--dist deepspeed needs DeepSpeed" in said.stderr


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed"])
def test_python_m_commbench_under_the_launchers(installed, launcher, tmp_path):
    python, _, work = installed
    port = free_port()
    output = tmp_path / "run.jsonl"
    start = {"torchrun": [python, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          f"--master_port={port}", "-m", "commbench"],
             # DeepSpeed's launcher: --module, and it puts --local_rank=N before our COMMAND
             "deepspeed": [python, "-m", "deepspeed.launcher.runner", "--num_gpus=2",
                           f"--master_port={port}", "--module", "commbench"]}[launcher]
    result = _run(python, work, *start, "all_reduce", "--scan", "--maxsize", "4",
                  "--backend=gloo", "--trials=3", f"--output={output}")
    assert result.returncode == 0, result.stderr
    table, = parse_tables(result.stdout)
    assert (table.op, table.devices) == ("all_reduce", 2)
    assert [row.numel for row in table.rows] == [2 * 2 ** p for p in range(1, 4)]
    meta = json.loads(output.read_text().splitlines()[0])
    assert meta["dist"] == "deepspeed" and meta["versions"]["commbench"] == "0.1.0"


def _ranks(python, work, nproc, *argv, timeout=240):
    """`python ARGV` as `nproc` ranks started by hand in the user's shell, with the environment
    torchrun gives them (torchrun's own run of the package: the launcher tests above): each
    rank's (exit status, stdout, stderr)."""
    port = free_port()
    procs = []
    for rank in range(nproc):
        env = dict(_env(python), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                   LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([str(python), *map(str, argv)], cwd=work, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      stdin=subprocess.DEVNULL))
    outputs = finish(procs, argv, timeout)
    return [(proc.returncode, *output) for proc, output in zip(procs, outputs)]


def test_a_users_job_records_and_the_command_replays_it(installed, tmp_path):
    python, _, work = installed
    (work / "job.py").write_text(USER_JOB)
    trace = tmp_path / "trace"
    recorded = _ranks(python, work, 2, "job.py", trace)
    assert [status for status, _, _ in recorded] == [0, 0], recorded
    assert sorted(p.name for p in trace.iterdir()) == ["rank0.json", "rank1.json"]
    dry = _run(python, work, python.parent / "commbench", "replay", trace, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    replayed = _ranks(python, work, 2, "-m", "commbench", "replay", trace, "--check",
                      "--backend=gloo", f"--output={tmp_path / 'replay.jsonl'}")
    assert [status for status, _, _ in replayed] == [0, 0], replayed
    records = [json.loads(line) for line in (tmp_path / "replay.jsonl").read_text().splitlines()]
    for rank in (0, 1):
        calls = [r for r in records if r.get("type") == "call" and r["rank"] == rank]
        assert [(c["op"], c["in_numel"]) for c in calls] == [
            (op, 1000 + step) for step in range(3) for op in ("all_reduce", "broadcast")]
        assert [c["wrong"] for c in calls] == [0] * 6
    started = records[0]["command"]  # as the process was started: python -m commbench replay
    assert started[1].endswith("/site-packages/commbench/__main__.py") and started[2] == "replay"
    assert started[1].startswith(str(python.parent.parent)), started
    plot = tmp_path / "curves.png"
    drawn = _run(python, work, python.parent / "commbench", "report", "plot",
                 ROOT / "tests" / "fixtures" / "curves_2ranks.jsonl", "-o", plot)
    assert drawn.returncode == 0, drawn.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
def test_python_m_commbench_under_mpirun_and_srun(launcher):
    # From the checkout (the ranks start in it, as the launcher tests' do): the -m form alone.
    result = launch("-m", "commbench", "all_reduce", "--scan", "--maxsize=3", "--trials=2",
                    "--dist=torch", "--backend=gloo", nproc=2, launcher=launcher)
    assert result.returncode == 0, result
    table, = result.tables
    assert (table.op, table.devices, len(table.rows)) == ("all_reduce", 2, 2)
