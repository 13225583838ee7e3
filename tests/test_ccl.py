"""--backend ccl on real oneCCL (scripts/install-ccl.sh, `make ccl`): every op through
Intel's torch bindings, both layers, three launchers, world sizes 2 and 3, checked element by
element; oneCCL's settings the suite defaults, reports and leaves to a user who set them; the
exit of a finished run; and one line where the bindings or oneCCL's headers are missing.

`make test` installs the bindings first (make ccl) and CI sets COMMBENCH_REQUIRE_CCL=1, so
there a missing ccl backend fails these tests; in a venv without the bindings (pytest by hand)
they are skipped. The suite's other tests mean gloo and say so (support's launch()).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import (ROOT, assert_no_traceback, base_env, free_port, launch, require_ccl,
                      require_launcher)
from formulas import OPS

# The tests that start oneCCL's ranks run alone (make test's second part): they poll for each other,
# so with other tests beside them on 2 cores a run crawls; and /dev/shm is checked as a whole.
# Those whose ranks run gloo, or that end before oneCCL starts, run beside the others.
serial = pytest.mark.serial

SUITE_DEFAULTS = "CCL_WORKER_OFFLOAD=0 CCL_ATL_SHM=1 (the suite's defaults)"
# What oneCCL may still say at CCL_LOG_LEVEL=error: that the level itself was changed.
CCL_LOG_LINE = "|CCL_WARN| value of CCL_LOG_LEVEL changed to be error"


@pytest.fixture(scope="module")
def ccl():
    """The bindings import in this venv; else skip (fail in CI, which installs them)."""
    require_ccl()


@pytest.fixture
def no_bindings(tmp_path):
    """A PYTHONPATH on which `import oneccl_bindings_for_pytorch` fails, as where they are not
    installed (DeepSpeed then takes gloo too)."""
    shim = tmp_path / "no-ccl" / "oneccl_bindings_for_pytorch"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('hidden by the test: not installed')\n")
    return str(shim.parent)


def start(script, *args, nproc=2, launcher="ranks", env=None, timeout=300):
    """Run `script` as given, no flag added (the backend is what the suite detects unless
    args say): support's launch() (ranks: each rank started by hand with torchrun's
    environment, forked from the tests' fork server unless `env` asks for new interpreters;
    one rank: plain python, forked likewise)."""
    return launch(script, *args, nproc=nproc, launcher="python" if nproc == 1 else launcher,
                  env=env, timeout=timeout, backend=None)


def assert_quiet_oneccl(result):
    """No oneCCL warning but the one line saying its log level was set, and that on stderr:
    oneCCL logs to the C library's stdout, which is the table's."""
    warnings = [line for line in result.stderr.splitlines()
                if "|CCL_WARN|" in line and CCL_LOG_LINE not in line]
    assert not warnings, result
    assert "|CCL_" not in result.stdout, result


def read_results(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[0], [line for line in lines[1:] if line.get("type", "record") != "meta"]


# ------------------------------------------------------------------ every op, for real

# Each of these launchers once: DeepSpeed's layer at 2 and 3 ranks, torch's at 2 (3 ccl ranks
# poll 2 cores: 10 s a run); test_oneccl_under_open_mpi_and_slurm crosses both layers and both
# world sizes again under Open MPI and srun (torch's at 3). In one run of each layer no
# --backend is given: ccl is what the suite detects on CPU once the bindings import, as
# DeepSpeed decides it.
@serial
@pytest.mark.parametrize("launcher,dist,nproc,backend", [
    ("torchrun", "deepspeed", 2, "ccl"), ("deepspeed", "deepspeed", 3, "detected"),
    ("mpirun", "torch", 2, "detected")])
def test_six_ops_on_oneccl(ccl, tmp_path, launcher, dist, nproc, backend):
    """run_all's six ops over oneCCL, float32 and bfloat16, every element checked: 0 wrong,
    exit 0 (DeepSpeed's layer crashed every rank at exit before the suite's teardown); the
    start-up line says which backend is measured (detected, or asked for)."""
    output = tmp_path / "ccl.jsonl"
    shm_before = set(Path("/dev/shm").iterdir())
    asked = [] if backend == "detected" else [f"--backend={backend}"]
    result = start("run_all.py", "--device=cpu", *asked, f"--dist={dist}", "--scan",
                   "--maxsize=3", "--trials=3", "--warmups=1", "--check",
                   "--dtype=float32,bfloat16", f"--output={output}", nproc=nproc,
                   launcher=launcher)
    assert result.returncode == 0, result
    assert_no_traceback(result)
    assert [table.op for table in result.tables] == [op for op in OPS for _ in range(2)]
    assert [table.qualifiers["dtype"] for table in result.tables] == ["float32", "bfloat16"] * 6
    for table in result.tables:
        assert table.devices == (2 if table.op == "pt2pt" else nproc)
        assert table.rows and all(row.extra == ["0"] for row in table.rows), result
    assert f"backend ccl, device cpu, {nproc} ranks on 1 host(s)" in result.stderr
    assert SUITE_DEFAULTS in result.stderr
    # More ranks than CPUs: oneCCL's ranks poll, and the suite says what that does to the figures.
    crowded = f"WARNING: {nproc} ranks on a host of {os.cpu_count()} CPUs: oneCCL's ranks poll"
    assert (crowded in result.stderr) == (nproc > os.cpu_count()), result
    assert_quiet_oneccl(result)
    meta, records = read_results(output)
    assert meta["backend"] == "ccl" and meta["dist"] == dist
    env, suite = meta["ccl"]["env"], set(meta["ccl"]["set_by_suite"])
    assert env["CCL_WORKER_OFFLOAD"] == "0" and env["CCL_ATL_SHM"] == "1"
    assert {"CCL_WORKER_OFFLOAD", "CCL_ATL_SHM", "CCL_LOG_LEVEL"} <= suite
    assert meta["ccl"]["versions"]["oneccl"] and meta["ccl"]["versions"]["bindings"]
    assert records and all(record["wrong"] == 0 for record in records)
    # Nothing left in /dev/shm (memory): neither oneCCL's shm endpoints (libfabric's PID:N:N
    # files, closed by nobody on DeepSpeed's layer, whose teardown skips destroy) nor DeepSpeed's
    # all-reduce buffers.
    left = sorted(p.name for p in set(Path("/dev/shm").iterdir()) - shm_before)
    assert left == [], left


@serial
# Each launcher once, each layer and world size once between them (the layer's own start-up
# under MPI and Slurm is test_mpi_slurm.py's, on gloo).
@pytest.mark.parametrize("launcher,dist,nproc", [("openmpi", "deepspeed", 2),
                                                ("srun", "torch", 3)])
def test_oneccl_under_open_mpi_and_slurm(ccl, launcher, dist, nproc):
    """Open MPI's mpirun and Slurm's srun (scripts/test-services.sh up) start oneCCL ranks too:
    the suite finds rank, world and master in their environments; --check, 0 wrong."""
    require_launcher(launcher)
    shm_before = set(Path("/dev/shm").iterdir())
    result = start("run_all.py", "--device=cpu", "--backend=ccl", f"--dist={dist}", "--scan",
                   "--maxsize=3", "--trials=3", "--warmups=1", "--check", nproc=nproc,
                   launcher=launcher)
    assert result.returncode == 0, result
    assert_no_traceback(result)
    assert [table.op for table in result.tables] == OPS
    assert all(row.extra == ["0"] for table in result.tables for row in table.rows), result
    assert f"backend ccl, device cpu, {nproc} ranks on 1 host(s)" in result.stderr, result
    assert_quiet_oneccl(result)
    assert sorted(p.name for p in set(Path("/dev/shm").iterdir()) - shm_before) == []


@serial
def test_the_other_four_ops_on_oneccl(ccl):
    """reduce, gather, scatter, all_to_allv and barrier too (--all), with --op max, at world
    size 3."""
    result = start("run_all.py", "--device=cpu", "--backend=ccl", "--dist=torch", "--all",
                   "--op=max", "--scan", "--maxsize=5", "--trials=3", "--warmups=1", "--check",
                   nproc=3)
    assert result.returncode == 0, result
    assert [table.op for table in result.tables][6:] == ["reduce", "gather", "scatter",
                                                        "all_to_allv", "barrier"]
    assert all(row.extra == ["0"] for table in result.tables for row in table.rows), result


@serial
@pytest.mark.parametrize("nproc,flags", [
    (2, []), (3, ["--async-op"]),
    # both ways past oneCCL's eager size (its CPU isend returns when received: 6 KB hung when
    # both ranks sent first)
    (2, ["--bidirectional", "--maxsize=14"]), (3, ["--bidirectional", "--async-op", "--maxsize=14"]),
])
def test_pt2pt_alone_sends_and_exits_cleanly(ccl, nproc, flags):
    """send/recv (isend/irecv with --async-op), the patch the install applies to the bindings'
    CPU path; the last op is a send, whose tensors the bindings' worker thread releases after
    the caller has moved on: the run still ends with 0, every time. Both ways too."""
    result = start("pt2pt.py", "--device=cpu", "--backend=ccl", "--dist=torch", "--scan",
                   "--maxsize=8", "--trials=5", "--check", *flags, nproc=nproc, timeout=120)
    assert result.returncode == 0, result
    rows = result.table("pt2pt").rows
    assert len(rows) == (13 if "--maxsize=14" in flags else 7)
    assert all(row.extra[-1] == "0" for row in rows)


@serial
def test_a_killed_rank_leaves_none_hanging(ccl, tmp_path):
    """oneCCL mostly does not notice a peer that died (gloo does at once): rank 0 waits for it
    until --timeout, then ends with one line naming the op and size, and exit status 1. When
    oneCCL does notice (about 1 run in 4 here), the bindings' worker thread fails to set the
    op's error (a C++ check) and aborts the rank at once: SIGABRT, C++'s message on stderr and
    nothing the suite can add, but no rank left waiting, and no backtrace file in the working
    directory (libfabric's InfiniPath library writes one unless IPATH_NO_BACKTRACE is set)."""
    output, port = tmp_path / "r.jsonl", free_port()
    crash_files = set(ROOT.glob("*.btr"))
    procs = []
    for rank in range(2):
        env = base_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, "all_gather.py", "--device=cpu", "--backend=ccl", "--dist=torch",
             "--scan", "--maxsize=26", "--trials=50", "--timeout=5", f"--output={output}"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        started = time.monotonic()
        while time.monotonic() - started < 120 and (
                not output.exists() or len(output.read_text().splitlines()) < 4):
            time.sleep(0.2)
        procs[1].kill()
        _, stderr = procs[0].communicate(timeout=240)  # a hang guard only
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            # A killed rank cannot release its oneCCL shm endpoint (64 MiB of memory): by pid.
            for path in Path("/dev/shm").glob(f"{proc.pid}:*"):
                path.unlink(missing_ok=True)
    assert set(ROOT.glob("*.btr")) == crash_files
    if procs[0].returncode == -6 and "terminate called" in stderr:
        # oneCCL noticed: the bindings abort at once, before the deadline could speak
        assert "did not finish within" not in stderr, stderr
        return
    assert procs[0].returncode == 1, stderr
    ours = [line for line in stderr.splitlines() if line.startswith("commbench: error:")]
    assert len(ours) == 1 and ours[0].startswith("commbench: error: rank 0: all_gather at "), stderr
    assert "did not finish within 5 s" in ours[0] and "Traceback" not in stderr, stderr


# The two tests below wait out --timeout once rank 2 is stopped. It also bounds what comes before
# the stop, so it must outlast that with room on a busy 2-core machine: the rendezvous of 3 ranks
# and oneCCL's start at the first collective (process group up in 0.00-0.03 s, first collective
# done at 1.47-1.91 s at load average 4-6 on 2 cores), and replay's and DDP's slowest call
# (milliseconds). 4 s, not 8: 4 s less waited in each. Their ranks are started by hand, forked
# from the fork server (torchrun's 4 fresh interpreters are 3-4 s of a 2-core machine; the
# launchers' own oneCCL runs are test_six_ops_on_oneccl's), and each must end of itself. Rank 2
# is stopped SETTLE s after it has posted its first pass or step where rank 0 reads positions
# (the store), not a fixed 3 s after a line that comes before the set-up: a stop that landed in
# the set-up (no deadline there: oneCCL's ranks waited 34 s, then were stopped again) cannot.
STALL_TIMEOUT = 4
SETTLE = 0.5


@serial
def test_a_sigstopped_rank_mid_replay_is_named_by_replays_own_deadline(ccl, tmp_path):
    """oneCCL never times out a collective: replay.py's ranks beside a SIGSTOPped one would
    wait for ever (two such pairs polled for 30 minutes here). Replay's stall deadline (a call
    that has not moved for --timeout) ends them as gloo's timeout does: rank 0 names rank 2
    alone, with the pass and call, and keeps a failure record; every rank ends."""
    from test_trials import stop_rank_2_mid_replay
    stop_rank_2_mid_replay(tmp_path, "ccl", launcher="ranks", settle=SETTLE, timeout=STALL_TIMEOUT,
                           posted=True)


@serial
def test_a_sigstopped_rank_mid_training_is_named_by_parallel_bench_own_deadline(ccl, tmp_path):
    """The same for parallel_bench.py's steps (DDP at 3 ranks on oneCCL): rank 0 names rank 2
    with the strategy and step, a failure record; every rank ends."""
    from test_trials import stop_rank_2_mid_training
    stop_rank_2_mid_training(tmp_path, "ccl", launcher="ranks", settle=SETTLE,
                             timeout=STALL_TIMEOUT, posted=True)


# ------------------------------------------------------------------ detection and settings

@serial
def test_a_users_own_oneccl_settings_win(ccl, tmp_path):
    output = tmp_path / "r.jsonl"
    result = start("all_reduce.py", "--device=cpu", "--backend=ccl", "--dist=torch", "--scan",
                   "--maxsize=3", "--trials=3", f"--output={output}",
                   env={"CCL_WORKER_OFFLOAD": "1", "CCL_ATL_TRANSPORT": "ofi"})
    assert result.returncode == 0, result
    assert ("oneCCL CCL_WORKER_OFFLOAD=1 CCL_ATL_TRANSPORT=ofi (yours), CCL_ATL_SHM=1 (the "
            "suite's defaults), CCL_WORKER_COUNT=1 (oneCCL's)") in result.stderr
    meta, _ = read_results(output)
    assert meta["ccl"]["env"]["CCL_WORKER_OFFLOAD"] == "1"
    assert sorted(meta["ccl"]["set_by_suite"]) == ["CCL_ATL_SHM", "CCL_LOG_LEVEL"]
    assert meta["ccl"]["oneccl_defaults"] == ["CCL_WORKER_COUNT"]


def test_deepspeed_layer_measures_gloo_when_asked(ccl):
    """DeepSpeed starts its accelerator's backend (ccl, once the bindings import) whatever it is
    asked; --backend gloo is gloo all the same, and needs nothing of oneCCL. (What DeepSpeed
    does in each rank, whatever started it: the ranks by hand; the launchers' own runs of the
    deepspeed layer on oneCCL are test_six_ops_on_oneccl's.)"""
    result = start("run_all.py", "--device=cpu", "--backend=gloo", "--dist=deepspeed", "--scan",
                   "--maxsize=4", "--trials=2", "--check", "--all-reduce", "--pt2pt")
    assert result.returncode == 0, result
    assert "deepspeed (deepspeed.comm), backend gloo, device cpu, 2 ranks" in result.stderr
    assert "oneCCL" not in result.stderr and "ccl_comm_op" not in result.stderr, result
    assert all(row.extra == ["0"] for table in result.tables for row in table.rows)


def test_other_backends_record_no_oneccl_settings(tmp_path):
    output = tmp_path / "r.jsonl"
    result = start("all_reduce.py", "--device=cpu", "--backend=gloo", "--dist=torch", "--scan",
                   "--maxsize=3", "--trials=2", f"--output={output}")
    assert result.returncode == 0, result
    assert "backend gloo" in result.stderr and "oneCCL" not in result.stderr
    assert read_results(output)[0]["ccl"] is None


@serial
def test_oneccl_refusing_a_setting_is_one_line(ccl):
    result = start("all_reduce.py", "--device=cpu", "--backend=ccl", "--dist=torch", "--scan",
                   "--maxsize=3", env={"CCL_ATL_TRANSPORT": "carrier-pigeon"}, timeout=120)
    assert result.returncode == 1, result
    assert_no_traceback(result)
    assert "commbench: error: rank 0: oneCCL did not start: oneCCL: " in result.stderr, result
    assert "CCL_ATL_TRANSPORT" in result.stderr and result.tables == []


def test_no_average_on_oneccl(ccl):
    result = start("all_reduce.py", "--device=cpu", "--backend=ccl", "--dist=torch", "--op=avg",
                   "--scan", "--maxsize=3", nproc=1)
    assert result.returncode == 2, result
    ours = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    assert ours == ["commbench: error: --op avg: the ccl backend has no average (oneCCL's torch "
                    "bindings reduce with sum, prod, min and max); use one of those, or "
                    "--backend gloo"], result


# ------------------------------------------------------------------ DeepSpeed's oneCCL op

def test_deepspeed_told_where_oneccl_is_not(ccl, tmp_path):
    """CCL_ROOT pointing where oneCCL is not: DeepSpeed's build of its oneCCL op fails, and the
    run says so in one line naming CCL_ROOT (the build in a folder of its own, not the venv's)."""
    result = start("all_reduce.py", "--device=cpu", "--backend=ccl", "--dist=deepspeed",
                   "--scan", "--maxsize=3", nproc=1,
                   env={"CCL_ROOT": str(tmp_path / "nowhere"),
                        "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"),
                        # one compile at a time: ninja stops at oneCCL's source, the first,
                        # instead of compiling DeepSpeed's shm source beside it (20 s)
                        "MAX_JOBS": "1"})
    assert result.returncode == 1, result
    ours = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    assert len(ours) == 1 and "CCL_ROOT" in ours[0] and "oneCCL" in ours[0], result
    assert "Traceback" not in result.stderr, result


@pytest.mark.fast  # in-process
def test_no_oneccl_to_build_deepspeeds_op_against(monkeypatch):
    """Neither CCL_ROOT nor oneCCL's headers beside the bindings or in the venv: --dist
    deepspeed stops before DeepSpeed's build, in one line saying what to set; --dist torch
    does not need them."""
    from commbench.ranks import ccl as oneccl
    from commbench.errors import BenchmarkError
    monkeypatch.setattr(oneccl, "_ccl_settings", {})
    monkeypatch.setattr(oneccl, "_ccl_root", lambda: None)
    monkeypatch.setattr(os, "environ", {name: value for name, value in os.environ.items()
                                        if not name.startswith("CCL_") and name != "CPATH"})
    with pytest.raises(BenchmarkError, match="set CCL_ROOT to oneCCL's directory"):
        oneccl.environment("deepspeed")
    settings = oneccl.environment("torch")
    assert settings["ccl_root"] is None and "CPATH" not in os.environ
    assert os.environ["CCL_WORKER_OFFLOAD"] == "0" and os.environ["CCL_ATL_SHM"] == "1"


@pytest.mark.fast  # in-process
def test_ccl_root_and_cpath_found_for_deepspeed(monkeypatch, tmp_path):
    from commbench.ranks import ccl as oneccl
    (tmp_path / "include" / "oneapi").mkdir(parents=True)
    (tmp_path / "include" / "oneapi" / "ccl.hpp").touch()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libccl.so").touch()
    monkeypatch.setattr(oneccl, "_ccl_settings", {})
    monkeypatch.setattr(oneccl.sys, "prefix", str(tmp_path))
    monkeypatch.setattr(os, "environ", {**{name: value for name, value in os.environ.items()
                                           if not name.startswith("CCL_")}, "CPATH": "/elsewhere"})
    settings = oneccl.environment("deepspeed")
    assert settings["ccl_root"] == os.environ["CCL_ROOT"] == str(tmp_path)
    assert os.environ["CPATH"] == f"{tmp_path}/include:/elsewhere"


# ------------------------------------------------------------------ the bindings absent

@pytest.mark.parametrize("dist", ["torch", "deepspeed"])
def test_ccl_without_bindings_is_one_line(no_bindings, dist):
    result = start("all_reduce.py", "--backend=ccl", f"--dist={dist}", nproc=1,
                   env={"PYTHONPATH": no_bindings})
    assert result.returncode == 1, result
    ours = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    assert ours == ["commbench: error: --backend ccl needs oneccl_bindings_for_pytorch, which is "
                    "not installed: `make ccl` in the checkout builds it into .venv (another "
                    "venv: scripts/install-ccl.sh VENV; docs/ccl.md), or use --backend gloo"], result
    assert "Traceback" not in result.stderr and result.tables == []


# Detection is each rank's (the bindings hidden from its interpreter): ranks by hand, new
# interpreters (PYTHONPATH), both layers.
@pytest.mark.parametrize("dist", ["torch", "deepspeed"])
def test_gloo_detected_without_bindings(no_bindings, dist):
    result = start("all_reduce.py", "--device=cpu", f"--dist={dist}", "--scan", "--maxsize=3",
                   "--trials=2", env={"PYTHONPATH": no_bindings})
    assert result.returncode == 0, result
    assert "backend gloo, device cpu, 2 ranks" in result.stderr


@serial
def test_parallel_strategies_on_oneccl(ccl, tmp_path):
    """parallel_bench.py --backend ccl: DDP, TP and PP train through oneCCL and their traffic is
    counted; ZeRO (DeepSpeed's own oneCCL op, past the accounting) is refused in one line. With
    no --backend it measures gloo, even here."""
    output = tmp_path / "strategies.jsonl"
    tiny = ["--hidden=64", "--layers=3", "--heads=4", "--vocab=256", "--seq=16", "--micro-batch=4",
            "--micro-batches=2", "--steps=3", "--warmup=1"]
    result = start("parallel_bench.py", "--backend=ccl", "--strategy=ddp,tp,pp", *tiny,
                   f"--output={output}")
    assert result.returncode == 0, result
    meta, *records = [json.loads(line) for line in output.read_text().splitlines()]
    assert meta["backend"] == "ccl"
    assert [record["strategy"] for record in records] == ["ddp", "tp", "pp"]
    moved = {record["strategy"]: sorted(record["comm"]) for record in records}
    assert "all_reduce" in moved["ddp"] and "all_reduce" in moved["tp"], moved
    assert moved["pp"] == ["pt2pt"], moved
    assert all(record["comm"][op]["bytes"] > 0 for record in records for op in record["comm"])
    assert all(record["loss"][-1] < record["loss"][0] for record in records)

    refused = start("parallel_bench.py", "--backend=ccl", "--strategy=zero2", *tiny)
    assert refused.returncode == 2, refused
    ours = [line for line in refused.stderr.splitlines() if line.startswith("commbench: error:")]
    assert len(ours) == 1 and "--strategy zero2 on --backend ccl is not measured" in ours[0]
    assert_no_traceback(refused)

    detected = start("parallel_bench.py", "--strategy=tp", *tiny)
    assert detected.returncode == 0, detected
    assert "backend gloo" in detected.stderr and "backend ccl" not in detected.stderr
