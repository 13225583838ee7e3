"""The tests' helpers: launch real ranks of the suite and read what a user reads (the table,
stderr, the exit status); free ports, launcher command lines, memory cgroups, root checks.

Test files import from here (`from support import launch`); conftest.py holds only pytest's
hooks and fixtures, which use these."""

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# The single-size plan rank 0 prints on stderr (commbench.bench.sizes.plan_single_size).
PLAN = re.compile(r"commbench: (?P<op>\w+): per-rank memory (?P<memory>\d+) B \((?P<source>[^)]*)\); "
                  r"SPEC rule: \d+ B x (?P<factor>[\d.e-]+) = \d+ B -> (?P<nominal>\d+) elements of "
                  r"(?P<element_size>\d+) B; buffers \((?P<parts>[^)]*)\) x \d+ B \+ (?P<reserve>\d+) "
                  r"B reserve = (?P<need>\d+) B, (?P<verdict>within|over) the (?P<usable>\d+) B usable "
                  r"\(90%\)(?:, so capped)?; planned: (?P<numel>\d+) elements, (?P<planned>\d+) B$")
# The title line; a run of several dtypes or another --op names them after the device count.
HEADER = re.compile(r"^---- Performance of (\w+) on (\d+) devices((?:, [^,]+?)*) -+$")
# --groups: `, intra-host group 1 (ranks 2 3 on n2)`, `, inter-host group 0 (ranks 0 2)`;
# --split: `, split group 1 (ranks 1 3 on n1 n2)`
GROUP = re.compile(r"(intra|inter|split)(?:-host)? group (\d+) \(ranks ([\d ]+?)(?: on (.+))?\)")


def _ephemeral_ports():
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


_EPHEMERAL = _ephemeral_ports()
_PICK = random.SystemRandom()  # not the random module hypothesis seeds


def _port_range():
    """20000-40000, or under pytest-xdist a part of it per worker (gw0, gw1, ...): two workers
    that checked the same port free at the same moment would both take it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2:
        return 20000, 40000
    width = 20000 // count
    low = 20000 + int(worker[2:]) * width
    return low, low + width


def free_port():
    """A free TCP port for MASTER_PORT, outside the kernel's ephemeral range: a port the kernel
    hands out (port 0) is free now, but srun, mpirun and the daemons take their own from that
    range, and one took a test's port between the check and rank 0's bind (rank 0 exits 1,
    its peer waits out --timeout). Not 29400-29599 either (torchrun's and DeepSpeed's defaults)."""
    low, high = _port_range()
    for _ in range(200):
        port = _PICK.randrange(low, high)
        if port in _EPHEMERAL or 29400 <= port < 29600:
            continue
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Row:
    size: str
    description: str
    duration: str
    throughput: str
    busbw: str
    extra: list = field(default_factory=list)  # --stats and --check columns

    @property
    def numel(self):
        return int(self.description.split("x")[0])

    @property
    def element_size(self):
        return int(self.description.split("x")[1])


@dataclass
class Table:
    op: str
    devices: int
    columns: list
    rows: list = field(default_factory=list)
    qualifiers: dict = field(default_factory=dict)  # {"dtype": "bfloat16", "op": "max"}


@dataclass
class Run:
    cmd: list
    returncode: int
    stdout: str
    stderr: str
    tables: list

    def table(self, op):
        found = [t for t in self.tables if t.op == op]
        assert len(found) == 1, f"expected one {op} table, got {len(found)}\n{self}"
        return found[0]

    @property
    def ops(self):
        return [t.op for t in self.tables]

    def __str__(self):
        return (f"$ {' '.join(map(str, self.cmd))}\nexit {self.returncode}\n"
                f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr[-6000:]}")


def split_row(line):
    # Columns are padded to 20, 25, 20, 20, 20 characters, one space apart (SPEC §6); the
    # --stats and --check columns after them are separated by runs of spaces.
    cuts = [(0, 20), (21, 46), (47, 67), (68, 88), (89, 109)]
    return [line[a:b].strip() for a, b in cuts] + [re.split(r"\s{2,}", line[110:].strip())
                                                    if line[110:].strip() else []]


def parse_tables(stdout):
    tables, current, lines = [], None, stdout.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        match = HEADER.match(line)
        if match:
            *columns, extra = split_row(lines[i + 1])
            columns += extra
            # 100 dashes under the original's columns (SPEC §6); a wider table's span its columns
            width = len(lines[i + 1].rstrip()) if extra else 100
            assert lines[i + 2] == "-" * width, f"no dash line under the header:\n{stdout}"
            qualifiers = {}
            for part in match.group(3).split(", ")[1:]:
                group = GROUP.fullmatch(part)
                if group:
                    qualifiers.update(layout=group.group(1), group=int(group.group(2)),
                                      ranks=[int(r) for r in group.group(3).split()],
                                      host=group.group(4))
                else:  # `dtype bfloat16`, `splits zipf:1.5 (seed 0)`, `both ways`
                    key, _, value = part.partition(" ")
                    qualifiers[key] = value
            current = Table(match.group(1), int(match.group(2)), columns, qualifiers=qualifiers)
            tables.append(current)
            i += 3
            continue
        if current is not None:
            if not line.strip():
                current = None
            elif not line.startswith("["):  # launcher log lines (deepspeed) are not rows
                current.rows.append(Row(*split_row(line)))
        i += 1
    return tables


def base_env(**extra):
    env = dict(os.environ)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE",
                 "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                 "PMI_SIZE", "MPI_LOCALRANKID"):
        env.pop(name, None)
    env.setdefault("TORCH_EXTENSIONS_DIR", str(BIN.parent / "torch_extensions"))
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


OPEN_MPI = "/usr/bin/mpirun.openmpi"


def launcher_command(launcher, nproc, port, path):
    """The command line that starts `nproc` ranks with `launcher`, up to the script."""
    if launcher == "python":
        assert nproc == 1
        return [sys.executable]
    if launcher == "torchrun":
        return [str(BIN / "torchrun"), f"--nproc_per_node={nproc}", f"--master_port={port}"]
    if launcher == "deepspeed":
        return [str(BIN / "deepspeed"), f"--num_gpus={nproc}", f"--master_port={port}"]
    if launcher == "mpirun":  # MPICH, from the mpich package in the venv
        return [str(BIN / "mpirun"), "-np", str(nproc), sys.executable]
    if launcher == "openmpi":  # Open MPI from Debian, kept apart from the venv's MPICH
        # Debian's Open MPI puts /usr/bin first on the ranks' PATH; `env PATH=...` keeps the
        # venv's tools (its ninja, which DeepSpeed's JIT build uses) first, as everywhere else.
        return [OPEN_MPI, "--allow-run-as-root", "--oversubscribe", "-np", str(nproc),
                "env", f"PATH={path}", sys.executable]
    if launcher == "srun":
        return ["srun", "-n", str(nproc), "--overcommit", sys.executable]
    raise ValueError(launcher)


def require_launcher(launcher):
    """Skip a test whose launcher is not installed here, unless CI says every launcher must run."""
    program = {"openmpi": OPEN_MPI, "srun": "srun"}.get(launcher)
    if program is None:
        return
    ready = shutil.which(program) is not None
    if launcher == "srun" and ready:
        ready = subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode == 0
    if not ready:
        why = f"{launcher} is not available here (scripts/test-services.sh up sets it up, as root)"
        if os.environ.get("COMMBENCH_REQUIRE_LAUNCHERS"):
            pytest.fail(why)
        pytest.skip(why)


# The suite's own scripts (the op scripts and run_all.py, or copies of them), which take --backend.
SUITE_SCRIPTS = {"run_all.py"} | {f"{op}.py" for op in ("all_reduce", "all_gather", "all_to_all",
                                                        "reduce_scatter", "pt2pt", "broadcast",
                                                        "reduce", "gather", "scatter", "barrier",
                                                        "all_to_allv", "replay")}


def gloo(script, args, backend="gloo"):
    """`args` for `script`, with --backend=gloo added when they name no backend and the script
    is one of the suite's: with oneCCL's bindings in the venv (make ccl) the suite detects ccl
    on CPU, and the tests written for gloo mean gloo (test_ccl.py runs ccl, and detection)."""
    args = [str(a) for a in args]
    if backend and Path(script).name in SUITE_SCRIPTS and "--help" not in args and \
            not any(a == "--backend" or a.startswith("--backend=") for a in args):
        args.append(f"--backend={backend}")
    return args


def rank_env(rank, nproc, port, **extra):
    """The environment torchrun and the deepspeed launcher give rank `rank` of `nproc` on one
    host: what a hand-made launch script sets too."""
    return base_env(**{"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
                       "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port), **extra})


# Hand-started ranks come from a fork server that has imported torch (tests/forkserver.py:
# what each rank would pay again, most of a short run's cost), unless the test's environment
# changes what Python or the OpenMP runtime read as they start, or COMMBENCH_TEST_FORK=0.
_FRESH_PREFIXES = ("PYTHON", "OMP_", "KMP_", "GOMP_", "MKL_", "LD_", "MALLOC_", "TORCH_CPP_")


def fresh(env, preexec_fn=None):
    """Whether a rank with these extra variables must start as a new interpreter."""
    return (preexec_fn is not None or os.environ.get("COMMBENCH_TEST_FORK", "1") == "0"
            or any(name.startswith(_FRESH_PREFIXES) for name in (env or {})))


class Forked:
    """A rank forked by the fork server, as much of subprocess.Popen as the tests use: pid,
    poll, wait, kill, send_signal, communicate, returncode, text stdout and stderr. Its
    /proc/PID/cmdline is the fork server's (`python tests/forkserver.py`): a test that finds
    ranks by their command line starts them with a launcher or fresh interpreters."""

    def __init__(self, server, cmd, env):
        self.args, self.returncode = cmd, None
        ends = [os.pipe(), os.pipe()]
        stdin = os.open(os.devnull, os.O_RDONLY)
        self._connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._connection.connect(server)
            request = {"argv": cmd[1:], "env": env, "cwd": str(ROOT)}
            socket.send_fds(self._connection, [json.dumps(request).encode()],
                            [stdin, ends[0][1], ends[1][1]])
            self.pid = int(self._connection.recv(64))
        finally:
            for fd in (stdin, ends[0][1], ends[1][1]):
                os.close(fd)
        self.stdout = open(ends[0][0], encoding="utf-8", errors="replace")
        self.stderr = open(ends[1][0], encoding="utf-8", errors="replace")

    def poll(self):
        if self.returncode is None:
            self._connection.setblocking(False)
            try:
                self._status(self._connection.recv(64))
            except BlockingIOError:
                pass
            finally:
                self._connection.setblocking(True)
        return self.returncode

    def _status(self, answer):
        self._connection.close()
        if not answer:  # the waiter ended without saying: the status is not known
            raise RuntimeError(f"the fork server's waiter of rank {self.pid} ({self.args}) "
                               "ended without its exit status")
        self.returncode = int(answer)

    def wait(self, timeout=None):
        if self.returncode is None:
            self._connection.settimeout(timeout)
            try:
                self._status(self._connection.recv(64))
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        return self.returncode

    def send_signal(self, number):
        if self.returncode is None:
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:
                pass

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout=None):
        """Both streams read to their end (at once: a rank blocked on a full pipe would stall),
        then the status; TimeoutExpired past `timeout`, the rank left running, as Popen's."""
        if not hasattr(self, "_read"):
            self._read = {}
            self._readers = [threading.Thread(target=self._drain, args=(name,), daemon=True)
                             for name in ("stdout", "stderr")]
            for reader in self._readers:
                reader.start()
        end = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers:
            reader.join(None if end is None else max(0.0, end - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if end is None else max(0.0, end - time.monotonic()))
        return self._read["stdout"], self._read["stderr"]

    def _drain(self, name):
        with getattr(self, name) as stream:
            self._read[name] = stream.read()


_SERVER = {}


def _fork_server():
    """This process's fork server (one per pytest worker), started on first use; it ends when
    this process does (it watches its parent), and at exit it is killed by pid."""
    if "path" not in _SERVER:
        import atexit
        import tempfile
        folder = tempfile.mkdtemp(prefix="commbench-forkserver-")
        path = os.path.join(folder, "socket")
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("forkserver.py")),
                                 path], cwd=ROOT, env=base_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, text=True)
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the tests' fork server did not start")

        def stop():
            proc.kill()
            proc.wait()
            shutil.rmtree(folder, ignore_errors=True)
        atexit.register(stop)
        _SERVER["path"] = path
    return _SERVER["path"]


def spawn(cmd, env, preexec_fn=None, fresh=False):
    """`cmd` (sys.executable and a script at the root with its arguments) as a rank: forked
    from the fork server, or, `fresh`, a new interpreter (subprocess.Popen)."""
    if fresh or cmd[0] != sys.executable or cmd[1].startswith("-"):
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                                preexec_fn=preexec_fn)
    return Forked(_fork_server(), cmd, env)


def launch_ranks(cmd, nproc, port, env=None, timeout=240, preexec_fn=None):
    """Start `nproc` ranks of `cmd` (a Python command line) by hand, each with rank_env(), and
    wait for all: (exit status, stdout, stderr) with the ranks' outputs in rank order and the
    first non-zero status in rank order. Every rank is killed when the timeout passes."""
    procs = [spawn(cmd, rank_env(rank, nproc, port, **(env or {})), preexec_fn,
                   fresh=fresh(env, preexec_fn))
             for rank in range(nproc)]
    outputs = finish(procs, cmd, timeout)
    codes = [proc.returncode for proc in procs]
    status = next((code for code in codes if code != 0), 0)
    return status, "".join(out for out, _ in outputs), "".join(err for _, err in outputs)


def finish(procs, cmd, timeout):
    """Every process's (stdout, stderr) once all have ended; past `timeout`, every one killed
    and subprocess.TimeoutExpired. Every process's pipes are read at once: a rank blocked on a
    full pipe would hold the others in their next collective."""
    outputs = [None] * len(procs)

    def read(index):
        outputs[index] = procs[index].communicate()
    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(len(procs))]
    for reader in readers:
        reader.start()
    end = time.monotonic() + timeout
    for reader in readers:
        reader.join(max(0.0, end - time.monotonic()))
    if any(reader.is_alive() for reader in readers):
        for proc in procs:
            proc.kill()
        for reader in readers:
            reader.join()
        raise subprocess.TimeoutExpired(cmd, timeout)
    return outputs


def launch(script, *args, nproc=1, launcher=None, env=None, timeout=240, preexec_fn=None,
           backend="gloo"):
    """Run `script` (a file at the repository root) on `nproc` local ranks and parse its output.

    launcher: python (one rank), ranks (each rank started by hand with the environment torchrun
    sets: what most tests need, a second faster than torchrun's agent), torchrun, deepspeed,
    mpirun (MPICH), openmpi or srun; default python for one rank, ranks otherwise. preexec_fn
    runs in the launcher's process (each rank's, for ranks) before it starts (to enter a memory
    cgroup, say). backend: the --backend the suite's scripts get when args name none (gloo());
    None leaves it to the suite's detection.
    """
    launcher = launcher or ("python" if nproc == 1 else "ranks")
    require_launcher(launcher)
    port = free_port()
    arguments = [script] + gloo(script, args, backend)
    if launcher == "ranks":
        cmd = [sys.executable] + arguments
        status, stdout, stderr = launch_ranks(cmd, nproc, port, env, timeout, preexec_fn)
        return Run(cmd, status, stdout, stderr, parse_tables(stdout))
    environment = base_env(**{"MASTER_PORT": str(port), **(env or {})})
    cmd = launcher_command(launcher, nproc, port, environment["PATH"]) + arguments
    if launcher == "python":
        proc = spawn(cmd, environment, preexec_fn, fresh=fresh(env, preexec_fn))
        [(stdout, stderr)] = finish([proc], cmd, timeout)
        return Run(cmd, proc.returncode, stdout, stderr, parse_tables(stdout))
    proc = subprocess.run(cmd, cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)
    return Run(cmd, proc.returncode, proc.stdout, proc.stderr, parse_tables(proc.stdout))


sys.path.insert(0, str(ROOT))


# torchrun's agents meet at an exit barrier on the store node 0's agent serves. When node 0's
# agent arrives last it may exit before another agent's wait is answered; that agent then logs
# "Error waiting on exit barrier" with a traceback and still exits 0 (pytorch/pytorch#69520, open).
# Its lines are torch's, not ours: only they are set aside, and only where that error is logged.
EXIT_BARRIER_RACE = re.compile(r"^E\d{4} [\d:.]+ +\d+ torch/distributed/elastic/agent/server/api\.py:\d+\] ")


def without_exit_barrier_race(stderr):
    """`stderr` less torchrun's exit-barrier report (EXIT_BARRIER_RACE), where it is there."""
    if "Error waiting on exit barrier" not in stderr:
        return stderr
    return "\n".join(line for line in stderr.splitlines() if not EXIT_BARRIER_RACE.match(line))


def assert_no_traceback(result):
    """No Python traceback from our code. torchrun's agent reports a failed child with a
    traceback of its own (frames in the venv), which is torchrun's, not ours."""
    if "Traceback" not in result.stderr:
        return
    frames = [line for line in result.stderr.splitlines() if line.strip().startswith('File "')]
    ours = [line for line in frames if f'"{ROOT}/' in line and "/.venv/" not in line]
    assert "torchrun" in " ".join(map(str, result.cmd)) and not ours, result


# --------------------------------------------------------------------------- memory cgroups

MIB = 1 << 20
V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


class MemoryCgroup:
    """A memory cgroup (v1 or v2) with a limit; processes started with `enter` run inside it."""

    def __init__(self, limit):
        name = f"commbench-test-{uuid.uuid4().hex[:8]}"
        if (V2 / "cgroup.controllers").exists() and \
                "memory" in (V2 / "cgroup.subtree_control").read_text().split():
            self.path, self.limit_file, self.peak_file = V2 / name, "memory.max", "memory.peak"
        else:
            self.path = V1 / name
            self.limit_file, self.peak_file = "memory.limit_in_bytes", "memory.max_usage_in_bytes"
        self.path.mkdir()
        (self.path / self.limit_file).write_text(str(limit))
        self.limit = limit

    def enter(self):  # runs in the child between fork and exec
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak(self):
        file = self.path / self.peak_file
        return int(file.read_text()) if file.exists() else None

    def oom_kills(self):
        for name in ("memory.oom_control", "memory.events"):
            file = self.path / name
            if file.exists():
                fields = dict(line.split() for line in file.read_text().splitlines())
                return int(fields.get("oom_kill", 0))
        return 0

    def remove(self):
        for pid in (self.path / "cgroup.procs").read_text().split():
            os.kill(int(pid), 9)  # nothing may outlive the test; none should be left
        self.path.rmdir()


@contextmanager
def memory_cgroup(limit):
    try:
        group = MemoryCgroup(limit)
    except OSError as error:
        why = f"cannot make a memory cgroup here ({error}); run the tests as root"
        if os.environ.get("COMMBENCH_REQUIRE_LAUNCHERS"):
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield group
    finally:
        group.remove()


SIM_HOSTS = ROOT / "scripts" / "sim-hosts.sh"


def sim_host_names():
    """A name and a subnet for simulated hosts (scripts/sim-hosts.sh up NAME N SUBNET), unique
    per use, so that tests running side by side bring up hosts of their own: (name, subnet)."""
    return "cb" + uuid.uuid4().hex[:6], f"10.{random.randint(64, 127)}.{random.randint(0, 255)}"


def require_root(why):
    """Skip a test that needs root, unless CI says every part must run (then fail)."""
    if os.geteuid() != 0:
        if os.environ.get("COMMBENCH_REQUIRE_LAUNCHERS"):
            pytest.fail(why)
        pytest.skip(why)


def usage_error(argv, parser=None):
    """In-process: the message of the UsageError that `parser` (default: the op scripts' and
    run_all.py's, harness.benchmark_parser()) raises for `argv`, as the process says it after
    "commbench: error: " with exit status 2 (UsageError.exit_code). Each family of such checks
    keeps one run with real ranks for the line and the status themselves."""
    from commbench.errors import UsageError
    if parser is None:
        from commbench.cli import benchmark_parser
        parser = benchmark_parser()
    try:
        parser.parse_args([str(a) for a in argv])
    except UsageError as error:
        assert error.exit_code == 2
        text = str(error)
        assert "\n" not in text.strip(), text
        return text
    raise AssertionError(f"no usage error for {argv}")


def require_ccl():
    """The ccl backend's bindings import in this venv; else skip the test (fail in CI, whose
    .ci/run installs them and sets COMMBENCH_REQUIRE_CCL)."""
    probe = subprocess.run([sys.executable, "-c", "import oneccl_bindings_for_pytorch"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or [""])[-1]
        text = f"the ccl backend is not installed in {BIN.parent} ({why}); make ccl installs it"
        if os.environ.get("COMMBENCH_REQUIRE_CCL"):
            pytest.fail(text)
        pytest.skip(text)
