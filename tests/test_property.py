"""Random command lines, valid and not, at world sizes 1 and 2 (hypothesis).

Every run must end (no hang) with the exit status its flags call for: 0, or 2 for a usage
error, or 1 for a part that is missing; a failing run says so in exactly one
`commbench: error:` line, a successful one prints its tables and no error line; no run prints a
traceback or any stderr line that is neither ours nor DeepSpeed's own log.

World size 2 is started by hand (RANK, WORLD_SIZE, ... per process, as a hand-made launch script
does) so that each rank's exit status and stderr are seen apart, with no launcher's report in
between. Every run lives in a memory cgroup, so that single-size runs (SPEC's rule at
--mem-factor 1 asks for more than the machine has) and --maxsize 40 scans stay small and fast: the
suite plans against the cgroup's limit. Each rank is forked from a fork server of this module's
own (tests/forkserver.py, support.Forked), started inside that cgroup with oneCCL's bindings
hidden from its interpreter: the same cgroup and imports as a new interpreter's, without its
`import torch` again for every rank. Examples are derandomized (the same ones each
CI run); COMMBENCH_PROPERTY_RANDOM=1 explores new ones, COMMBENCH_PROPERTY_EXAMPLES=N sets how
many.
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commbench.records import results
from support import MIB, ROOT, Forked, base_env, free_port, memory_cgroup, parse_tables
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
    "--precision": {"50%": OK, "0%": USAGE, "5": USAGE},
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
EXAMPLES = int(os.environ.get("COMMBENCH_PROPERTY_EXAMPLES", "8"))


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


def run_ranks(script, world_size, flags, switches, unknown, folder, server, no_ccl):
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = base_env(MASTER_PORT=str(port), PYTHONPATH=no_ccl)
        if world_size > 1:
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                       LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1")
        procs.append(Forked(server, rank_command(script, flags, switches, unknown, rank, folder),
                            env))
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


@pytest.fixture(scope="module")
def server(cgroup, no_ccl, tmp_path_factory):
    """A fork server (tests/forkserver.py) inside the cgroup, its interpreter started with the
    bindings hidden (PYTHONPATH): the ranks it forks are in the cgroup from their first
    instruction and cannot import the bindings, as new interpreters started so would be."""
    path = str(tmp_path_factory.mktemp("forkserver") / "socket")
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "forkserver.py"), path],
                            cwd=ROOT, env=base_env(PYTHONPATH=no_ccl), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, text=True, preexec_fn=cgroup.enter)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield path
    finally:
        proc.kill()
        proc.wait()
        # What it forked and is still ending (a waiter that has just said its rank's status)
        # keeps the cgroup busy: gone before the cgroup is removed.
        members = cgroup.path / "cgroup.procs"
        deadline = time.monotonic() + 30
        while (pids := members.read_text().split()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.05)


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          derandomize=not os.environ.get("COMMBENCH_PROPERTY_RANDOM"),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(example=command_lines())
def test_random_command_lines(server, no_ccl, tmp_path_factory, example):
    script, world_size, flags, switches, unknown = example
    folder = tmp_path_factory.mktemp("property")
    outputs = run_ranks(script, world_size, flags, switches, unknown, folder, server, no_ccl)
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


# --------------------------------------------------------------------------- faults
#
# Valid command lines (their flags drawn from the OK values above) at world sizes 1-3, crossed
# with a fault made for real once rank 0 has printed its first row: a rank killed (SIGKILL),
# SIGINT or SIGTERM to every rank (Ctrl-C to the job, scancel), rank 0's reader closing the pipe,
# the results file on a full disk, or a stale build lock of DeepSpeed's left by a killed build.
# Every rank must end within its --timeout (20 s) with its documented status, say at most one
# `commbench: error:` line of its own (several ranks' lines are counted per rank: a failure all
# ranks share is said by rank 0 alone, one a rank meets alone by that rank), print no traceback
# of ours, and leave a results file every line of which parses.

FAULTS = ["kill", "SIGINT", "SIGTERM", "closed pipe", "full disk", "stale lock"]
# Examples per fault (every fault is tried; the command lines and world sizes are drawn).
FAULT_EXAMPLES = int(os.environ.get("COMMBENCH_PROPERTY_FAULT_EXAMPLES", "1"))
OK_VALUES = {flag: sorted(v for v, effect in values.items() if effect == OK)
             for flag, values in VALUES.items()
             if flag not in ("--timeout", "--output", "--local_rank", "--backend", "--device")}


@st.composite
def faulted_runs(draw):
    script = draw(st.sampled_from(SCRIPTS))
    world_size = draw(st.sampled_from([1, 2, 3]))
    chosen = draw(st.lists(st.sampled_from(sorted(OK_VALUES)), max_size=4, unique=True))
    flags = {flag: draw(st.sampled_from(OK_VALUES[flag])) for flag in chosen}
    flags.setdefault("--dist", draw(st.sampled_from(["torch", "torch", "deepspeed"])))
    flags.setdefault("--trials", "3")
    flags.setdefault("--warmups", "1")
    flags["--maxsize"] = draw(st.sampled_from(["10", "12", "14"]))  # long enough to meet it
    flags["--output"] = draw(st.sampled_from(["r.jsonl", "r.csv", "r.json"]))
    switches = draw(st.lists(st.sampled_from(["--check", "--stats", "--async-op", "--raw"]),
                             max_size=2, unique=True))
    if script == "pt2pt.py" and world_size == 1:
        script = "all_reduce.py"
    return script, world_size, flags, switches


class _Rank0Reader:
    """Reads rank 0's stdout in a thread; `first_row` is set at its first table row. With
    `close_after_row`, the reading end is closed there (a reader that has what it wanted)."""

    def __init__(self, stream, close_after_row):
        import threading
        self.stream, self.close_after_row = stream, close_after_row
        self.lines, self.first_row = [], threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for line in self.stream:
                self.lines.append(line)
                if re.match(r"^\d|^[\d.]+ [KMG]?B ", line):
                    self.first_row.set()
                    if self.close_after_row:
                        self.stream.close()
                        return
        except (OSError, ValueError):
            pass
        self.first_row.set()


@contextlib.contextmanager
def _small_disk(folder):
    mount = folder / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _stale_lock(folder):
    """The lock a killed build of DeepSpeed's shm op leaves, a file nobody holds, in a build
    directory of the test's own: a copy of the venv's (support.base_env), which the ranks are
    given (TORCH_EXTENSIONS_DIR), so that no other test's run meets it or removes it first.
    Returns (the lock, the directory)."""
    own = Path(base_env()["TORCH_EXTENSIONS_DIR"]) / "deepspeed_shm_comm"
    extensions = folder / "extensions"
    if own.is_dir():  # built by the cgroup fixture's run; ninja finds the copy up to date
        shutil.copytree(own, extensions / own.name, ignore=shutil.ignore_patterns("lock"))
    (extensions / own.name).mkdir(parents=True, exist_ok=True)
    lock = extensions / own.name / "lock"
    lock.touch()
    return lock, extensions


def run_faulted(script, world_size, flags, switches, fault, folder, server, no_ccl):
    """Start the ranks, make the fault once rank 0 printed its first row, wait for every rank.
    Returns ([(stdout, stderr, status) per rank], the results path, the stale lock or None)."""
    port = free_port()
    lock, extensions = _stale_lock(folder) if fault == "stale lock" else (None, None)
    with contextlib.ExitStack() as stack:
        where = stack.enter_context(_small_disk(folder)) if fault == "full disk" else folder
        args = [sys.executable, script] + [f"{k}={where / v if k == '--output' else v}"
                                           for k, v in flags.items()] + \
            switches + ["--backend=gloo", "--timeout=20"]
        procs = []
        for rank in range(world_size):
            env = base_env(MASTER_PORT=str(port), PYTHONPATH=no_ccl)
            if extensions is not None:
                env["TORCH_EXTENSIONS_DIR"] = str(extensions)
            if world_size > 1:
                env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                           LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1")
            procs.append(Forked(server, args, env))
        reader = _Rank0Reader(procs[0].stdout, close_after_row=fault == "closed pipe")
        others = [proc.stdout.read for proc in procs[1:]]
        errs = [None] * world_size

        def drain(index):
            errs[index] = procs[index].stderr.read()
        import threading
        drains = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(world_size)]
        outs = [threading.Thread(target=read, daemon=True) for read in others]
        for thread in drains + outs:
            thread.start()
        reader.first_row.wait(timeout=90)
        if fault == "kill":
            procs[-1].kill()
        elif fault in ("SIGINT", "SIGTERM"):
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(getattr(signal, fault))
        try:
            for proc in procs:
                proc.wait(timeout=120)  # each rank's --timeout is 20 s: this is a hang
        except subprocess.TimeoutExpired:
            for proc in procs:
                proc.kill()
            pytest.fail(f"a rank hung after {fault}: {script} {flags} {switches} at world size "
                        f"{world_size}")
        for thread in drains + outs + [reader.thread]:
            thread.join(timeout=30)
        output = where / flags["--output"]
        parsed = None
        if output.exists():
            parsed = results.read(str(output))  # every line (the whole document) parses
    return [("".join(reader.lines) if r == 0 else "", errs[r], p.returncode)
            for r, p in enumerate(procs)], parsed, lock


@settings(max_examples=FAULT_EXAMPLES, deadline=None, database=None,
          derandomize=not os.environ.get("COMMBENCH_PROPERTY_RANDOM"),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(example=faulted_runs())
@pytest.mark.parametrize("fault", FAULTS)
def test_random_command_lines_under_faults(server, no_ccl, tmp_path_factory, fault, example):
    script, world_size, flags, switches = example
    # Derandomized examples are the same for every fault: turn the world size and the script
    # by the fault's place, so that each fault meets other command lines.
    shift = FAULTS.index(fault)
    world_size = (world_size - 1 + shift) % 3 + 1
    script = SCRIPTS[(SCRIPTS.index(script) + shift) % len(SCRIPTS)]
    if script == "pt2pt.py" and world_size == 1:
        script = "all_reduce.py"
    if fault == "full disk" and os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = tmp_path_factory.mktemp("faults")
    outputs, parsed, lock = run_faulted(script, world_size, flags, switches, fault, folder,
                                        server, no_ccl)
    shown = f"{fault}: {script} {flags} {switches} at world size {world_size}:\n" + \
        "\n".join(f"--- rank {r}: exit {rc}\n{err}" for r, (_, err, rc) in enumerate(outputs))
    statuses = [rc for _, _, rc in outputs]
    stderr = "".join(err for _, err, _ in outputs)
    assert "Traceback" not in stderr, shown
    for _, err, rc in outputs:
        mine = [line for line in err.splitlines() if line.startswith("commbench: error:")]
        assert len(mine) <= 1, shown  # at most one line of its own per rank
        assert not mine or rc != 0, shown
        for line in err.splitlines():
            assert not line.strip() or line.startswith("commbench: ") or \
                DEEPSPEED_LINE.match(line), f"stray stderr line {line!r} in {shown}"
    if fault == "kill":
        assert statuses[-1] == -signal.SIGKILL, shown
        # the others lose their peer (1, one line each: their own) or had finished (0)
        for _, err, rc in outputs[:-1]:
            assert rc in (0, 1), shown
            assert (rc == 1) == ("commbench: error:" in err), shown
    elif fault in ("SIGINT", "SIGTERM"):
        code = {"SIGINT": 130, "SIGTERM": 143}[fault]
        assert all(rc in (0, code) for rc in statuses), shown
        if statuses[0] == code:
            assert f"commbench: stopped by {fault}" in outputs[0][1], shown
        assert "commbench: error:" not in stderr, shown
    elif fault == "closed pipe":
        assert statuses == [0] * world_size, shown
        assert "commbench: error:" not in stderr, shown
    elif fault == "full disk":
        if statuses[0] == 1:
            assert "No space left on device" in outputs[0][1], shown
            assert all(rc == 1 for rc in statuses), shown
        else:
            assert statuses == [0] * world_size, shown
    else:  # a stale lock: removed by --dist deepspeed, which loads its op; none of torch's
        try:
            assert statuses == [0] * world_size, shown
            if flags["--dist"] == "deepspeed":
                assert f"commbench: removed {lock}: a build lock no process holds" in stderr, shown
                assert not lock.exists(), shown
            else:
                assert "build lock" not in stderr, shown
        finally:
            lock.unlink(missing_ok=True)
    assert parsed is not None or statuses[0] != 0 or fault in ("kill", "SIGINT", "SIGTERM"), shown
