"""Random command lines, valid and not, at world sizes 1 and 2 (hypothesis).

Every run must end (no hang) with the exit status its flags call for: 0, or 2 for a usage
error, or 1 for a part that is missing; a failing run says so in exactly one
`commbench: error:` line, a successful one prints its tables and no error line; no run prints a
traceback or any stderr line that is neither ours nor DeepSpeed's own log.

World size 2 is started by hand (RANK, WORLD_SIZE, ... per process, as a hand-made launch
script does) so that each rank's exit status and stderr are seen apart, with no launcher's
report in between. Every run lives in a memory cgroup, so that single-size runs (SPEC's rule at
--mem-factor 1 asks for more than the machine has) and --maxsize 40 scans stay small and fast:
the suite plans against the cgroup's limit. Examples are derandomized (the same ones each CI
run); COMMBENCH_PROPERTY_RANDOM=1 explores new ones, COMMBENCH_PROPERTY_EXAMPLES=N sets how many.
"""

import os
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import MIB, ROOT, base_env, free_port, memory_cgroup, parse_tables
from formulas import OPS

SCRIPTS = [f"{op}.py" for op in OPS] + ["run_all.py", "run_all.py"]

# Flag -> {value: what it makes of the run}: OK, USAGE (exit 2 while parsing), or a later stage.
OK, USAGE, MISSING, GLOO_DTYPE, OUTPUT = "ok", "usage", "missing", "gloo-dtype", "output"
VALUES = {
    "--maxsize": {"2": OK, "3": OK, "7": OK, "12": OK, "40": OK, "1": USAGE, "41": USAGE,
                  "x": USAGE},
    "--trials": {"1": OK, "2": OK, "3": OK, "0": USAGE, "-2": USAGE, "many": USAGE},
    "--warmups": {"0": OK, "1": OK, "2": OK, "-1": USAGE, "1.5": USAGE},
    "--dtype": {"float": OK, "half": OK, "bfloat16": OK, "double": OK, "int8": OK, "uint8": OK,
                "int32": OK, "long": OK, "int16": GLOO_DTYPE, "float8_e4m3fn": GLOO_DTYPE,
                "complex64": USAGE, "bool": USAGE, "qint8": USAGE, "floaty": USAGE},
    "--mem-factor": {"0.000001": OK, "0.01": OK, "1": OK, "0": USAGE, "1.5": USAGE,
                     "nan": USAGE, "-0.1": USAGE},
    "--bw-unit": {"Gbps": OK, "GBps": OK, "MBps": USAGE},
    "--backend": {"gloo": OK, "nccl": MISSING, "mpi": MISSING, "ccl": MISSING, "tcp": USAGE},
    "--device": {"cpu": OK, "cuda": MISSING, "meta": MISSING, "CPU": USAGE, "cpu:0": USAGE},
    "--dist": {"torch": OK, "deepspeed": OK, "horovod": USAGE},
    "--output": {"r.jsonl": OK, "r.csv": OK, "r.json": OK, "r.txt": OUTPUT, ".": OUTPUT,
                 "no/such/dir/r.jsonl": OUTPUT},
    "--time-budget": {"0.05": OK, "0": USAGE, "-1": USAGE, "soon": USAGE},
    "--timeout": {"60": OK, "0": USAGE, "-5": USAGE, "inf": USAGE},
    "--local_rank": {"SELF": OK, "x": USAGE},
}
SWITCHES = ["--scan", "--raw", "--check", "--stats", "--async-op", "--debug", "--overwrite"] + \
    [f"--{op.replace('_', '-')}" for op in OPS]
# In the order the suite meets them: the first that applies decides the exit status.
STAGES = [(USAGE, 2), (MISSING, 1), (GLOO_DTYPE, 2), (OUTPUT, 1)]

# Lines DeepSpeed itself writes to stderr (its logger, and its extension loader).
DEEPSPEED_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\] \[(INFO|WARNING)\] |"
                            r"^DeepSpeed deepspeed\.ops\.comm\.deepspeed_shm_comm_op built ")
EXAMPLES = int(os.environ.get("COMMBENCH_PROPERTY_EXAMPLES", "60"))


@st.composite
def command_lines(draw):
    script = draw(st.sampled_from(SCRIPTS))
    world_size = draw(st.sampled_from([1, 2]))
    chosen = draw(st.lists(st.sampled_from(sorted(VALUES)), max_size=5, unique=True))
    # --dist torch mostly: DeepSpeed's import takes seconds.
    if "--dist" not in chosen:
        chosen.append("--dist")
    flags = {flag: draw(st.sampled_from(sorted(VALUES[flag]))) for flag in chosen}
    if flags["--dist"] == "deepspeed" and draw(st.integers(0, 3)):
        flags["--dist"] = "torch"
    switches = draw(st.lists(st.sampled_from(SWITCHES), max_size=4, unique=True))
    # Short runs: few trials always (the default 50 would take minutes at the largest sizes),
    # and mostly a scan of few sizes; the rest are single-size runs or long scans.
    flags.setdefault("--trials", "2")
    flags.setdefault("--warmups", "1")
    if draw(st.integers(0, 2)):
        flags.setdefault("--maxsize", draw(st.sampled_from(["2", "3", "7"])))
    unknown = draw(st.sampled_from([None, None, None, None, "--bogus", "stray"]))
    return script, world_size, flags, switches, unknown


def expected_status(script, world_size, flags, switches, unknown):
    effects = {VALUES[flag][value] for flag, value in flags.items()}
    if unknown:
        effects.add(USAGE)
    for effect, status in STAGES:
        if effect in effects:
            return status
    ops = [op for op in OPS if f"--{op.replace('_', '-')}" in switches]
    if world_size == 1 and (script == "pt2pt.py" or (script == "run_all.py" and "pt2pt" in ops)):
        return 1
    return 0


def rank_command(script, flags, switches, unknown, rank, folder):
    args = [sys.executable, script]
    for flag, value in flags.items():
        if flag == "--local_rank" and value == "SELF":
            value = str(rank)
        if flag == "--output" and value != "." and not value.startswith("no/"):
            value = str(folder / value)
        args.append(f"{flag}={value}")
    return args + switches + ([unknown] if unknown else [])


def run_ranks(script, world_size, flags, switches, unknown, folder, group, no_ccl):
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = base_env(MASTER_PORT=str(port), PYTHONPATH=no_ccl)
        if world_size > 1:
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                       LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1")
        procs.append(subprocess.Popen(rank_command(script, flags, switches, unknown, rank, folder),
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, preexec_fn=group.enter,
                                      stdin=subprocess.DEVNULL))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=120) + (proc.returncode,))
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        pytest.fail(f"a rank hung: {script} {flags} {switches} {unknown} at world size "
                    f"{world_size}")
    return outputs


@pytest.fixture(scope="module")
def no_ccl(tmp_path_factory):
    """The model above is of a venv without oneCCL's bindings (--backend ccl: MISSING, the CPU
    default gloo): the examples run where they do not import (test_ccl.py runs ccl)."""
    shim = tmp_path_factory.mktemp("no-ccl") / "oneccl_bindings_for_pytorch"
    shim.mkdir()
    (shim / "__init__.py").write_text("raise ImportError('hidden from the property examples')\n")
    return str(shim.parent)


@pytest.fixture(scope="module")
def cgroup(no_ccl):
    # DeepSpeed's shm extension is built (or found) before the examples start.
    env = base_env(MASTER_PORT=str(free_port()), PYTHONPATH=no_ccl)
    built = subprocess.run([sys.executable, "all_reduce.py", "--dist=deepspeed", "--scan",
                            "--maxsize=2", "--trials=1"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    with memory_cgroup(1800 * MIB) as group:
        yield group


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          derandomize=not os.environ.get("COMMBENCH_PROPERTY_RANDOM"),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(example=command_lines())
def test_random_command_lines(cgroup, no_ccl, tmp_path_factory, example):
    script, world_size, flags, switches, unknown = example
    folder = tmp_path_factory.mktemp("property")
    outputs = run_ranks(script, world_size, flags, switches, unknown, folder, cgroup, no_ccl)
    want = expected_status(*example)
    shown = f"{script} {flags} {switches} {unknown} at world size {world_size}:\n" + \
        "\n".join(f"--- rank {r}: exit {rc}\n{err}" for r, (_, err, rc) in enumerate(outputs))
    assert [rc for _, _, rc in outputs] == [want] * world_size, shown
    stderr = "".join(err for _, err, _ in outputs)
    assert "Traceback" not in stderr, shown
    for line in stderr.splitlines():
        assert not line.strip() or line.startswith("commbench: ") or DEEPSPEED_LINE.match(line), \
            f"stray stderr line {line!r} in {shown}"
    errors = [line for line in stderr.splitlines() if line.startswith("commbench: error:")]
    assert len(errors) == (0 if want == 0 else 1), shown
    if want == 0:
        tables = parse_tables(outputs[0][0])
        assert tables and all(table.rows for table in tables), shown
        assert all(not out for out, _, _ in outputs[1:]), shown  # the table is rank 0's alone
