"""The examples a user copies from the docs run as written, within the time their page states.

A page marks such an example as a ```sh block (other blocks show output, or need a real
cluster) and states its time in the sentence before it: "... (under 60 s on this 2-core
machine)". Each block runs in bash at the repository's root, as a user runs it from an ordinary shell: the
venv's bin first on PATH, as after `. .venv/bin/activate`, nothing else exported (no
TORCH_EXTENSIONS_DIR, MPLCONFIGDIR or cache folder), and a home of its own; it must exit 0
within the time stated, and write nothing in that home (~/.cache included).
The files it writes there are removed after (a copy of the tree elsewhere would run DeepSpeed
from another path, which makes torch rebuild its ops). A block whose launch a dedicated test
would make again is run by that test instead, as written (run_example), and read there
(ELSEWHERE); here it is not run again."""

import re
import subprocess

import pytest

from support import ROOT, base_env, require_root, sim_host_names, without_exit_barrier_race

# The examples on simulated hosts (gloo, names and a subnet of their own) run beside other
# tests, as tests/test_many_hosts*.py's hosts and Slurm clusters do; their stated times, as the
# plain local runs', are several times what they take here. doctor.py's among them: its verdict
# judges latency, but the example goes on whatever it says (`|| echo`): what it must do (exit 0
# within 120 s, nothing in the home) a neighbour's load only slows (28 s alone in a quiet CI run).
# tests/test_doctor.py's checks, which assert the verdicts, run alone.

PAGES = ["cluster.md", "verdicts.md", "overlap.md", "sweeps.md", "doctor.md", "traffic.md",
         "replay.md"]
FENCE = re.compile(r"^\s*```(\w*)\s*$")
CLAIM = re.compile(r"under (\d+) (s|seconds|min|minutes)\b")


def examples(page):
    """(line, claimed seconds, commands) of each ```sh block of docs/`page`."""
    lines = (ROOT / "docs" / page).read_text().splitlines()
    found, language, start, block = [], None, 0, []
    for number, line in enumerate(lines, 1):
        fence = FENCE.match(line)
        if fence and language is None:
            language, start, block = fence.group(1) or "plain", number, []
        elif fence:
            if language == "sh":
                claims = CLAIM.findall(" ".join(lines[max(0, start - 6):start - 1]))
                assert claims, f"docs/{page}:{start}: an example without its time (say " \
                               "'under N s' just before it)"
                value, unit = claims[-1]
                found.append((start, int(value) * (60 if unit.startswith("min") else 1),
                              "\n".join(block)))
            language = None
        elif language == "sh":
            block.append(line)
    return found


ALL = [(page, line, seconds, commands) for page in PAGES
       for line, seconds, commands in examples(page)]


def alone(commands):
    # oneCCL's OFI transport lists the network interfaces as it starts, and failed there twice in
    # CI ("atl_ofi_open_nw_provs failed", then -6) while another test's simulated hosts brought
    # their bridges and veths up or down: its examples run alone too.
    return "--backend ccl" in commands


def clear(commands):
    """Take down the simulated clusters and hosts `commands` bring up, by their names."""
    for script in ("sim-slurm.sh", "sim-hosts.sh"):
        for name in re.findall(script.replace(".", r"\.") + r" up (\w+)", commands):
            subprocess.run([str(ROOT / "scripts" / script), "down", name],
                           capture_output=True, timeout=60)


# Blocks that another test runs as written (run_example below) and reads more closely than this
# file does (its tables, its results file), instead of running its own launch of the same thing:
# (page, a piece of the block's text) -> that test. This file skips them, naming it.
ELSEWHERE = {
    ("sweeps.md", "run_all.py --dist torch --backend gloo --all --min-bytes 1K --max-bytes 4M"):
        "tests/test_sweeps_and_ops.py::test_the_issue_command",
    ("cluster.md", "torchrun --nnodes 2 --node-rank 0 --nproc-per-node 2"):
        "tests/test_groups.py::test_layouts_across_two_hosts_as_cluster_md_runs_them",
    ("cluster.md", "srun -N 2 --ntasks-per-node=2"):
        "tests/test_many_hosts_slurm.py::test_srun_across_two_hosts",
    ("cluster.md", "-launcher-exec scripts/sim-ssh"):
        "tests/test_many_hosts_mpi.py::test_the_launchers_over_ssh_as_cluster_md_runs_them",
}


def example(page, piece):
    """(line, claimed seconds, commands) of the one ```sh block of docs/`page` holding `piece`."""
    found = [block for block in examples(page) if piece in block[2]]
    assert len(found) == 1, f"docs/{page}: {len(found)} ```sh blocks hold {piece!r}"
    return found[0]


def given_to(test):
    """(page, line, claimed seconds, commands) of the block ELSEWHERE gives to `test` (its
    function's name), for run_example."""
    (page, piece), = [key for key, name in ELSEWHERE.items() if name.endswith(f"::{test}")]
    return (page, *example(page, piece))


def own_hosts():
    """Renames for a block's simulated hosts (`demo` at 10.77.0), unique per use as the hosts
    fixture's (conftest.py): ({"demo": name, "10.77.0": subnet}, name, subnet)."""
    name, subnet = sim_host_names()
    return {"demo": name, "10.77.0": subnet}, name, subnet


def run_example(page, line, seconds, commands, tmp_path, renames=None):
    """Run a block as a user would (this module's docstring): the finished process, once it has
    exited 0 within the time the page states, with no traceback and nothing in its home.
    `renames`: {text: replacement}, each text in the block, replaced in it first: a test running
    a block beside other tests gives its simulated hosts, subnet and files names of its own (the
    docs' `demo` at 10.77.0 is another block's too: own_hosts())."""
    for text, replacement in (renames or {}).items():
        assert text in commands, f"docs/{page}:{line}: no {text!r} in the block"
        commands = commands.replace(text, str(replacement))
    if "sim-hosts.sh" in commands:
        require_root("simulated hosts need root (network namespaces)")
    clear(commands)  # what a run killed before its teardown left, by name
    before = set(ROOT.iterdir())
    script = "set -euo pipefail\n" + commands
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(HOME=str(home))
    for name in ("TORCH_EXTENSIONS_DIR", "MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env.pop(name, None)
    try:
        proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=seconds,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"docs/{page}:{line}: did not finish within the {seconds} s the page "
                    f"states\n{expired.stderr or ''}")
    finally:
        clear(commands)
        for made in set(ROOT.iterdir()) - before:  # what the example wrote (and no other test)
            if made.is_file() and made.name in commands:
                made.unlink()
    assert proc.returncode == 0, f"docs/{page}:{line}\n{commands}\n--- stdout\n" \
                                 f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    written = sorted(str(path.relative_to(home)) for path in home.rglob("*"))
    assert not written, f"docs/{page}:{line} wrote in the user's home: {written[:10]}"
    assert "Traceback" not in without_exit_barrier_race(proc.stderr), proc.stderr[-4000:]
    return proc


@pytest.mark.fast  # in-process
def test_every_page_has_examples():
    assert {page for page, *_ in ALL} == set(PAGES), ALL
    for (page, piece), test in ELSEWHERE.items():  # each names one block, and a test there is
        example(page, piece)
        path, _, name = test.partition("::")
        assert f"def {name}(" in (ROOT / path).read_text(), test


def run_elsewhere(page, commands):
    return any(on == page and piece in commands for on, piece in ELSEWHERE)


@pytest.mark.parametrize("page,line,seconds,commands", [
    pytest.param(*block, id=f"{block[0]}:{block[1]}",
                 marks=[pytest.mark.serial] if alone(block[3]) else [])
    for block in ALL if not run_elsewhere(block[0], block[3])])
def test_docs_example_runs_as_written(page, line, seconds, commands, tmp_path):
    run_example(page, line, seconds, commands, tmp_path)


@pytest.mark.fast  # in-process
def test_only_torchruns_exit_barrier_race_is_set_aside():
    """What CI printed of the race (pytorch/pytorch#69520) is set aside; a traceback beside it,
    or the same lines without the error they report, are not."""
    prefix = "E1207 10:28:24.090000 11198 torch/distributed/elastic/agent/server/api.py:1008] "
    race = "\n".join(prefix + line for line in (
        "Error waiting on exit barrier. Elapsed: 0.013 seconds", "Traceback (most recent call last):",
        '  File "/x/.venv/lib/python3.11/site-packages/torch/distributed/elastic/utils/store.py"',
        "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes."))
    ours = 'Traceback (most recent call last):\n  File "/x/run_all.py", line 1'
    assert "Traceback" not in without_exit_barrier_race("commbench: done\n" + race)
    assert "Traceback" in without_exit_barrier_race(race + "\n" + ours)
    assert "Traceback" in without_exit_barrier_race(race.replace("Error waiting on exit", "Exit"))
