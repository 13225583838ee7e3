"""No hang and no traceback when a peer dies or is stuck, or ranks disagree on arguments."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from commbench.ranks import builds
from commbench.records import results
from support import (ROOT, assert_no_traceback, base_env, finish, free_port, launcher_command,
                     rank_env, spawn)
from test_output_stats import kill_tree


@pytest.mark.parametrize("launcher,dist", [("torchrun", "deepspeed"), ("mpirun", "torch")])
def test_killed_rank_ends_the_job(tmp_path, launcher, dist):
    """SIGKILL rank 1 mid-scan: rank 0 ends non-zero, well within the timeout, with one line
    naming op and size or, when the launcher ends it first, the line saying it was stopped; the
    launcher fails; every size completed before is in the file."""
    path = tmp_path / "r.jsonl"
    port = free_port()
    env = base_env(MASTER_PORT=str(port))
    cmd = launcher_command(launcher, 2, port, env["PATH"]) + [
        "all_gather.py", "--scan", "--maxsize=24", "--trials=20", f"--dist={dist}",
        "--timeout=30", f"--output={path}", "--backend=gloo"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for_records(path, 3, proc=proc)
        ranks = [p for p in __import__("psutil").Process(proc.pid).children(recursive=True)
                 if "all_gather.py" in " ".join(p.cmdline()) and p.name().startswith("python")]
        victim = [p for p in ranks if p.environ().get("RANK", p.environ().get("PMI_RANK")) == "1"]
        assert victim, [p.cmdline() for p in ranks]
        victim[0].kill()
        _, stderr = proc.communicate(timeout=240)  # a hang guard only
    finally:
        kill_tree(proc.pid)
    assert proc.returncode != 0, stderr
    ours = [line for line in stderr.splitlines() if line.startswith("commbench: error:")]
    stopped = [line for line in stderr.splitlines() if line.startswith(
        "commbench: stopped by SIGTERM; the sizes measured so far are in the table and the "
        "results file")]
    # Well within the timeout: rank 0 learns of the lost peer from gloo, not from its deadline.
    assert not [line for line in ours if "did not finish within" in line], stderr
    # Who speaks first is a race, and either side may win it: rank 0 learning of the lost peer
    # from gloo (its one line naming the op and size), or the launcher ending rank 0 first
    # (torchrun's agent SIGTERMs the survivors as soon as a rank dies: then rank 0 says it was
    # stopped; MPICH's mpirun kills them, and rank 0 may say nothing). Either way every line of
    # ours is one of those, and under torchrun rank 0 says one of them.
    assert all(line.startswith("commbench: error: rank 0: all_gather at ") for line in ours), \
        stderr
    if launcher == "torchrun":
        assert ours or stopped, stderr
    frames = [line for line in stderr.splitlines() if line.strip().startswith('File "')]
    assert not [line for line in frames if f'"{ROOT}/' in line and "/.venv/" not in line], stderr
    records = results.read(str(path))[1]
    assert len(records) >= 3, (records, stderr)
    assert [r["numel"] for r in records] == [2 * 2 ** p for p in range(1, len(records) + 1)], \
        (records, stderr)


@pytest.mark.fast
def test_an_op_is_built_only_when_ninja_has_no_work(tmp_path):
    """builds.built: a library ninja would rebuild (its source newer, a build interrupted)
    counts as not built, so the rendezvous' deadline says that a build is under way."""
    ninja = shutil.which("ninja")
    if ninja is None:
        pytest.skip("no ninja here")
    (tmp_path / "a.cpp").write_text("a")
    (tmp_path / "build.ninja").write_text("rule cp\n  command = cp $in $out\n"
                                          "build op.so: cp a.cpp\n")
    assert not builds.built(str(tmp_path), "op")
    subprocess.run([ninja, "-C", str(tmp_path)], check=True, capture_output=True)
    assert builds.built(str(tmp_path), "op")
    later = time.time() + 5
    os.utime(tmp_path / "a.cpp", (later, later))
    assert not builds.built(str(tmp_path), "op")


def wait_for_records(path, count, limit=120, proc=None):
    """Until the results file holds `count` measured sizes (a run is mid-scan); with `proc`,
    a run that ended before is an error that shows its output."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if path.exists() and len(results.read(str(path))[1]) >= count:
            return
        if proc is not None and proc.poll() is not None:
            stdout, stderr = proc.communicate()
            raise AssertionError(f"the run ended ({proc.returncode}) before {path} held {count} "
                                 f"records:\n{stdout}\n{stderr}")
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {count} records")


def test_stuck_rank_hits_the_timeout(run):
    """Rank 1 sleeps 1000 s before its first trial (test hook) under --timeout 4: both ranks end
    with one line naming the op and the size. The sleep outlasts run()'s hang guard (240 s)
    four times over, so a run that ends at all was ended by the deadline, not by the sleep."""
    result = run("all_reduce.py", "--scan", "--maxsize=3", "--stats", "--timeout=4",
                 "--dist=torch", nproc=2, env={"COMMBENCH_INJECT_DELAY": "1:1000"})
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    assert any(line.startswith("commbench: error: rank 0: all_reduce at 4 elements of float")
               for line in lines), result
    assert "Traceback" not in result.stderr


def _hand_launch(args_by_rank):
    """Start each rank by hand (RANK, WORLD_SIZE, ...), as a home-made launch script would
    (forked from the fork server, each with its own command line)."""
    port = free_port()
    procs = [spawn([sys.executable, "all_reduce.py", "--backend=gloo", *args],
                   rank_env(rank, len(args_by_rank), port))
             for rank, args in enumerate(args_by_rank)]
    outputs = finish(procs, "all_reduce.py", 60)
    return [(p.returncode, *output) for p, output in zip(procs, outputs)]


def test_mismatched_arguments_are_refused():
    outcomes = _hand_launch([["--scan", "--maxsize=4", "--dist=torch", "--trials=5"],
                             ["--scan", "--maxsize=4", "--dist=torch", "--trials=6"],
                             ["--scan", "--maxsize=4", "--dist=torch", "--trials=5"]])
    assert [status for status, _, _ in outcomes] == [2, 2, 2]
    assert all(stdout == "" for _, stdout, _ in outcomes)
    stderr = "".join(err for _, _, err in outcomes)
    assert stderr.count("commbench: error:") == 1
    assert ("commbench: error: ranks were started with different arguments (rank 1 differs from "
            "rank 0 in --trials: 5 on rank 0, 6 on rank 1); start every rank with the same "
            "command line") in stderr
    assert "Traceback" not in stderr


def test_mismatched_arguments_under_mpirun(run):
    """MPICH's MPMD form starts ranks with different command lines."""
    port = free_port()
    env = base_env(MASTER_PORT=str(port))
    mpirun = launcher_command("mpirun", 1, port, env["PATH"])[0]
    cmd = [mpirun, "-np", "1", sys.executable, "all_reduce.py", "--scan", "--dist=torch",
           "--maxsize=5", "--backend=gloo", ":", "-np", "1", sys.executable, "all_reduce.py",
           "--scan", "--dist=torch", "--maxsize=6", "--backend=gloo"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("ranks were started with different arguments") == 1
    assert "Traceback" not in proc.stderr


# One case per step that reads the environment (the rank variables, the port, the address);
# each rule's other cases in-process: test_units.py, test_logic_harness.py.
@pytest.mark.parametrize("environ,text", [
    ({"RANK": "abc", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "RANK='abc' is not an integer"),
    ({"MASTER_PORT": "99999"}, "MASTER_PORT=99999 is not a port number"),
    ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "node1;reboot"},
     "MASTER_ADDR='node1;reboot' is not a host name or an IP address"),
])
def test_malformed_launcher_environment(run, environ, text):
    result = run("all_reduce.py", "--scan", "--maxsize=3", "--dist=torch", env=environ)
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines()[-1].startswith("commbench: error:")
    assert text in result.stderr
    assert "within" not in result.stderr  # refused at start, not at a deadline
    assert_no_traceback(result)


@pytest.mark.parametrize("launcher,how", [("torchrun", "SIGINT to the launcher"),
                                          ("torchrun", "SIGTERM to the launcher"),
                                          ("deepspeed", "Ctrl-C: SIGINT to the process group"),
                                          ("python", "SIGTERM to the rank"),
                                          ("python", "SIGINT to the rank")])
def test_interrupt_mid_scan(tmp_path, launcher, how):
    import signal
    path = tmp_path / "r.json"
    port = free_port()
    env = base_env(MASTER_PORT=str(port))
    nproc = 1 if launcher == "python" else 2
    cmd = launcher_command(launcher, nproc, port, env["PATH"]) + [
        "all_gather.py", "--scan", "--maxsize=24", "--trials=20", "--dist=torch",
        f"--output={path}", "--backend=gloo"]
    if launcher == "python":  # the rank itself, forked from the fork server
        proc = spawn(cmd, env)
    else:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    number = signal.SIGTERM if "SIGTERM" in how else signal.SIGINT
    try:
        wait_for_records(path, 3)
        if "process group" in how:
            os.killpg(proc.pid, number)
        else:
            proc.send_signal(number)
        stdout, stderr = proc.communicate(timeout=240)  # a hang guard only
    finally:
        if launcher == "python":
            proc.kill()
        else:
            kill_tree(proc.pid)
    if launcher == "python":
        assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[number]
    else:
        assert proc.returncode != 0
    # A launcher may pass the stop on as SIGTERM before the ranks see the SIGINT itself.
    said = re.findall(r"commbench: stopped by (SIGINT|SIGTERM)", stderr)
    assert said == [number.name] or (launcher != "python" and said == ["SIGTERM"]), stderr[-3000:]
    meta, records = results.read(str(path))  # a whole document, never half-written
    # stopped at once: the scan (23 sizes) was not run to its end
    assert meta["ops"] == ["all_gather"] and 3 <= len(records) < 23
    assert not list(tmp_path.glob("*.tmp*"))
    frames = [line for line in stderr.splitlines() if line.strip().startswith('File "')]
    assert not [line for line in frames if f'"{ROOT}/' in line and "/.venv/" not in line]


def test_environment_values_are_never_executed(run, tmp_path):
    """A MASTER_ADDR or a Slurm node list carrying shell syntax is refused or read as text;
    nothing runs it (the suite starts no shell)."""
    marker = tmp_path / "ran"
    result = run("all_reduce.py", "--scan", "--maxsize=2", "--dist=torch",
                 env={"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                      "MASTER_ADDR": f"$(touch {marker})"})
    assert result.returncode == 2 and "is not a host name or an IP address" in result.stderr
    result = run("all_reduce.py", "--scan", "--maxsize=2", "--dist=torch",
                 env={"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "1",
                      "SLURM_NODELIST": f"node[1-2]`touch {marker}`"})
    assert result.returncode == 0, result
    assert not marker.exists()
    # And statically: no module of the suite imports subprocess or calls eval, exec or os.system.
    import ast
    for path in ROOT.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert "subprocess" not in names, path
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                assert name not in ("eval", "exec", "system", "popen"), (path, node.lineno)


def test_master_addr_that_does_not_resolve(run):
    result = run("all_reduce.py", "--scan", "--maxsize=2", "--dist=torch", "--timeout=600",
                 env={"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                      "MASTER_ADDR": "no-such-host.invalid"})
    assert result.returncode == 1, result
    # its own line, not a retry loop until the deadline (which would outlast run()'s 240 s)
    assert result.stderr.strip().splitlines()[-1].startswith(
        "commbench: error: rank 0: MASTER_ADDR no-such-host.invalid does not resolve")


def test_a_stall_deadline_ends_a_block_only_once_its_calls_stop_moving(tmp_path):
    """guard.stall_deadline (replay's passes, where oneCCL never times a call out): a block that
    keeps moving runs past the limit; once it stands still for the limit, one line, exit 1.
    The block then sleeps 600 s, ten times the hang guard: the process ended at all, with the
    deadline's line, only because the deadline ended it (no clock is read here)."""
    code = textwrap.dedent("""
        import time
        from commbench.ranks.guard import stall_deadline
        steps = [0]
        with stall_deadline(0.6, lambda: steps[0], "rank 0: replay: a call did not finish"):
            for _ in range(15):  # 1.5 s in all, a step every 0.1 s
                time.sleep(0.1)
                steps[0] += 1
            print("moved", flush=True)
            time.sleep(600)
        print("not reached")
    """)
    script = tmp_path / "stall.py"
    script.write_text(code)
    proc = spawn([sys.executable, str(script)], base_env())  # forked: torch is imported there
    [(stdout, stderr)] = finish([proc], [script], 60)  # a hang guard only
    assert (proc.returncode, stdout) == (1, "moved\n"), (proc.returncode, stdout, stderr)
    assert stderr.splitlines() == ["commbench: error: rank 0: replay: a call did not finish"]
