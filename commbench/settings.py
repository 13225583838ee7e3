"""The op scripts' settings (SPEC §2): what their command line says, typed and frozen, every
default in one place and the checks across flags beside them.

benchmark_parser() parses into an argparse Namespace, as the original's scripts expect of it
(they read `args.scan`, and may set a field of their own), and settles it here (`settle`: the
defaults that depend on other flags, the checks across flags). The run reads a Settings, made
once where a Namespace enters it (`Settings.of`), never the Namespace; a field the Namespace
lacks (a script that builds its own) is at its default here, not at each reader. A variant of a
run (one dtype of several, the file written beside another's) is `settings.but(dtype=...)`.

What starts the ranks (comm.init_comm) is a RankSettings, which each front end builds field by
field (`Settings.ranks` for the op scripts and run_all.py; doctor.py's, replay.py's and
parallel_bench.py's own): a flag of a front end's that happens to share a name with one of the
op scripts' settings (`--op`, `--pin`) never reaches how the ranks start.
"""

from argparse import Namespace
from dataclasses import dataclass, fields, replace
from typing import Any

from . import defaults
from .bounds.spec import PeakSpec


@dataclass(frozen=True)
class RankSettings:
    """What comm.init_comm reads to start a run's ranks, built by each front end explicitly.
    Besides the layer, backend, device and --timeout: the dtypes and the reduction checked
    against the backend before anything starts, --pin, the layouts of --groups / --split,
    --peak (the bound found at start-up), and the front end's whole command line, whose digest
    every rank compares with rank 0's."""

    dist: str = defaults.DEFAULT_DIST
    backend: str | None = defaults.DEFAULT_BACKEND
    device: str | None = defaults.DEFAULT_DEVICE
    timeout: float = defaults.DEFAULT_TIMEOUT
    dtype: str = defaults.DEFAULT_TYPE
    op: str = defaults.DEFAULT_REDUCE_OP
    pin: bool = False
    groups: tuple[str, ...] = ()
    split: tuple | None = None
    # --peak: the bound the rows are held against, found at start-up (docs/peak.md)
    peak: PeakSpec | None = None
    peak_refresh: bool = False
    # (flag, value) pairs of every flag, sorted: `command_line(args)`
    command_line: tuple[tuple[str, Any], ...] = ()


def command_line(args: Any) -> tuple[tuple[str, Any], ...]:
    """A parsed command line (a Namespace, or a front end's frozen settings) as sorted (flag,
    value) pairs: what the ranks' start-up digest compares, every flag of it."""
    return tuple(sorted(vars(args).items()))


@dataclass(frozen=True)
class Settings:
    # the ranks: which layer, backend and device (cli.add_rank_flags)
    local_rank: int | None = None
    backend: str | None = defaults.DEFAULT_BACKEND
    dist: str = defaults.DEFAULT_DIST
    device: str | None = defaults.DEFAULT_DEVICE
    timeout: float = defaults.DEFAULT_TIMEOUT
    # each size's loop
    trials: int = defaults.DEFAULT_TRIALS
    warmups: int = defaults.DEFAULT_WARMUPS
    async_op: bool = False
    time_budget: float | None = None
    # the sizes: exponents as the original's, or bytes as nccl-tests'; a sweep or the largest
    scan: bool = False
    maxsize: int = defaults.DEFAULT_MAXSIZE
    minsize: int = defaults.DEFAULT_MINSIZE
    min_bytes: int | None = None
    max_bytes: int | None = None
    step_factor: float | None = None
    mem_factor: float = defaults.DEFAULT_MEM_FACTOR
    # what runs: run_all.py's ops (those named by their flags, in defaults.OPS' order), the
    # buffers' dtype (a name, a comma list or `all`) and the reduction
    ops: tuple = ()
    all: bool = False
    dtype: str = defaults.DEFAULT_TYPE
    op: str = defaults.DEFAULT_REDUCE_OP
    # the table
    bw_unit: str = defaults.DEFAULT_UNIT
    raw: bool = False
    # --peak: what the rows' busbw is held against (docs/peak.md); None: no `% of peak` column
    peak: PeakSpec | None = None
    peak_refresh: bool = False
    debug: bool = False
    # checks and statistics
    check: bool = False
    check_every: bool = False
    stats: bool = False
    per_trial: bool = False
    repeat: int = 1
    precision: float | None = None
    max_windows: int | None = None
    # traffic (docs/traffic.md): all_to_allv's splits, pt2pt's pairs
    a2a_matrix: str | None = None
    a2a_skew: tuple | None = None
    seed: int = 0
    pairs: str = "one"
    bidirectional: bool = False
    # where the ops run
    groups: list | None = None
    split: tuple | None = None
    pin: bool = False
    # --overlap's compute phase
    overlap: bool = False
    overlap_factor: float = 1.0
    compute_cpus: frozenset | None = None
    # outputs
    output: str | None = None
    overwrite: bool = False
    db: str | None = None
    tag: str | None = None
    prometheus: str | None = None
    # not a flag: the columns an op adds to its table (pt2pt's pairs: Msgs/s), set per run
    op_columns: tuple = ()

    @classmethod
    def of(cls, args):
        """The settings of the op scripts' parsed command line (benchmark_parser's Namespace,
        which a script may have added a field of its own to, or Settings already): each field
        missing at its default; run_all.py's op flags become `ops`. Another front end's
        settings are no Namespace of these flags: refused, not read by their fields' names."""
        if isinstance(args, cls):
            return args
        if not isinstance(args, Namespace):
            raise TypeError(f"Settings.of takes the op scripts' Namespace, not "
                            f"{type(args).__name__}")
        given = vars(args)
        known = {f.name: given[f.name] for f in fields(cls) if f.name in given}
        known["ops"] = tuple(op for op in defaults.OPS if given.get(op))
        if known.get("compute_cpus") is not None:
            known["compute_cpus"] = frozenset(known["compute_cpus"])
        return cls(**known)

    def but(self, **changes):
        """These settings with `changes` (a variant of the run: one dtype of several)."""
        return replace(self, **changes)

    def ranks(self, given: Any = None) -> RankSettings:
        """What starts the op scripts' ranks; `given`: the command line as parsed (its digest,
        every flag; these settings without it)."""
        return RankSettings(dist=self.dist, backend=self.backend, device=self.device,
                            timeout=self.timeout, dtype=self.dtype, op=self.op, pin=self.pin,
                            groups=tuple(self.groups or ()), split=self.split,
                            peak=self.peak, peak_refresh=self.peak_refresh,
                            command_line=command_line(self if given is None else given))

    @property
    def adaptive(self):
        """Whether --precision measures each size until its interval is tight enough."""
        return self.precision is not None

    @property
    def layouts(self):
        """The layouts each op runs in, in turn (--groups, then --split's): the world alone
        without them."""
        return self.groups or ["world"]


def frozen(cls, namespace, **derived):
    """A front end's typed settings (a frozen dataclass `cls`) from its parsed, checked
    Namespace, and the fields it derives (`derived`). A field the Namespace lacks is an error:
    each front end's test holds its parser's flags equal to its class's fields."""
    given = {**vars(namespace), **derived}
    return cls(**{f.name: given[f.name] for f in fields(cls)})


def settle(args, refuse):
    """Checks across the flags of a parsed Namespace, and the defaults that depend on other
    flags; `refuse(message)` raises. A size range (either form) is a sweep: it implies --scan."""
    exponents = args.minsize is not None or args.maxsize is not None
    in_bytes = any(v is not None for v in (args.min_bytes, args.max_bytes, args.step_factor))
    if exponents and in_bytes:
        refuse("give message sizes as exponents (--minsize/--maxsize) or in bytes "
               "(--min-bytes/--max-bytes/--step-factor), not both")
    if args.minsize is not None:
        args.scan = True
    args.minsize = defaults.DEFAULT_MINSIZE if args.minsize is None else args.minsize
    args.maxsize = defaults.DEFAULT_MAXSIZE if args.maxsize is None else args.maxsize
    if args.minsize >= args.maxsize:
        refuse(f"--minsize {args.minsize} must be below --maxsize {args.maxsize} (the scan "
               f"runs n x 2^p elements for p = minsize .. maxsize-1)")
    if in_bytes:
        args.scan = True
        args.min_bytes = args.min_bytes or defaults.DEFAULT_MIN_BYTES
        args.max_bytes = args.max_bytes or max(defaults.DEFAULT_MAX_BYTES, args.min_bytes)
        args.step_factor = args.step_factor or defaults.DEFAULT_STEP_FACTOR
        if args.min_bytes > args.max_bytes:
            refuse(f"--min-bytes {args.min_bytes} is above --max-bytes {args.max_bytes}")
    _settle_statistics(args, refuse)
    if args.split is not None:
        args.groups = (args.groups or []) + ["split"]
    if args.a2a_matrix and args.a2a_skew:
        refuse("--a2a-matrix and --a2a-skew both set all_to_allv's splits: give one")
    if args.peak_refresh and (args.peak is None or args.peak.mode != "auto"):
        refuse("--peak-refresh times --peak auto's memory copy again; give --peak auto too")
    if args.compute_cpus and not args.overlap:
        refuse("--compute-cpus places --overlap's windows; give --overlap too")
    _settle_dtypes(args, refuse, in_bytes)


def _settle_statistics(args, refuse):
    if args.precision is not None and args.repeat > 1:
        refuse("--precision measures each size until its interval is tight enough; "
               "--repeat sets a fixed count: give one of them")
    if args.max_windows is not None and args.precision is None:
        refuse("--max-windows caps --precision's windows; give --precision too")
    if args.precision is not None and args.max_windows is None:
        args.max_windows = defaults.DEFAULT_MAX_WINDOWS
    if args.check_every:
        args.check = True  # the Wrong column and the exit status are --check's


def _settle_dtypes(args, refuse, in_bytes):
    from .dtypes import dtype_list, get_dtype  # torch's: only a command line that runs ranks
    names = dtype_list(args.dtype)
    if in_bytes:
        for name in names or ():
            size = get_dtype(name).itemsize
            if args.min_bytes < size:
                refuse(f"--min-bytes {args.min_bytes} is below one element of {name} "
                       f"({size} bytes)")
    if args.op == "avg":
        integers = [name for name in names or () if not get_dtype(name).is_floating_point]
        if integers:
            refuse(f"--op avg on an integer dtype ({', '.join(integers)}): an integer "
                   "average is no reduction every backend has (gloo fails it and breaks "
                   "the process group); use a floating dtype, or --op sum")
