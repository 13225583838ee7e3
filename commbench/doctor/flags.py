"""doctor.py's command line: its flags, their checks, and its typed, frozen settings
(`DoctorSettings`; a bad --topology file is refused here, before any rank measures), and what
starts its ranks (`rank_settings`: the layer, backend, device and --timeout; the suite's
start-up's other settings at their defaults)."""

import argparse
from dataclasses import dataclass

from .. import defaults
from ..records import results
from ..cli import add_rank_flags, add_store_flags, add_timeout_flag, settle_layer
from ..errors import UsageError
from ..flags import UsageParser, prog
from ..numbers import byte_count, int_at_least
from ..settings import RankSettings, command_line, frozen
from ..bounds import parse_peak
from . import bound, plan, topology

DEFAULT_MIN_FRACTION = 0.5
# shorter than the suite's (defaults.DEFAULT_TIMEOUT): a host that does not answer within it is
# named unreachable, and the check goes on without it
DEFAULT_TIMEOUT = 120
ON_LOSS = ("continue", "stop")


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return value


def _floor(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not value >= 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def parser():
    p = UsageParser(prog=prog("doctor.py"),
                description="Check a cluster's hosts and links: each host's ranks among "
                            "themselves, every pair of hosts both ways, a verdict naming the "
                            "slow or broken host or link. Exit 0 healthy, 1 anything suspect "
                            "or unreachable, 2 bad usage.")
    add_rank_flags(p, "communication layer to start")
    p.add_argument("--plan", choices=plan.PLANS, default="auto",
                   help="full: every pair of hosts (N-1 rounds); screen: --rounds rounds of "
                        "disjoint pairs, slowest with fastest, then the suspects' retests; auto: "
                        f"full up to {plan.AUTO_FULL_HOSTS} hosts, screen above (default auto)")
    p.add_argument("--rounds", type=int_at_least(1), default=plan.DEFAULT_ROUNDS, metavar="K",
                   help=f"the screen's rounds of pairs (default {plan.DEFAULT_ROUNDS})")
    p.add_argument("--seed", type=int_at_least(0), default=0,
                   help="the screen's first round of pairs is drawn with it (default 0)")
    p.add_argument("--topology", metavar="FILE",
                   help="which switch each host is behind, in Slurm's topology.conf form "
                        "(SwitchName=s1 Nodes=node[01-16]): the screen pairs hosts across "
                        "switches and names a switch whose hosts are slow only to the outside "
                        "(under srun: Slurm's own when it has one; 'none': no topology)")
    p.add_argument("--fleet-wide", action="store_true",
                   help="after the verdict on the pairs, one all_reduce across every live host "
                        "not named, held against what its pairs predict; when slower, its "
                        "halves at once, the slower one split again (about log2 N rounds) to "
                        "name the group that slows the fleet")
    p.add_argument("--on-loss", choices=ON_LOSS, default="continue",
                   help="a host lost mid-check (its rank dead or silent): continue: name it "
                        "unreachable, measure and judge the rest without it (default: the "
                        "check runs when something is wrong, and stopping at the first loss "
                        "would leave the rest unjudged); stop: no phase after the one under "
                        "way, the verdict at once on what was measured (first-pass suspects "
                        "then not retested)")
    _measuring_flags(p)
    p.add_argument("--bw-unit", choices=defaults.BW_UNITS, default=defaults.DEFAULT_UNIT)
    add_timeout_flag(p, DEFAULT_TIMEOUT, metavar="SECONDS",
                     help="seconds a rank waits for a peer that hangs; a host that does not "
                          "answer within it is named unreachable (one whose rank died: as soon "
                          "as its heartbeat stands still, 10 s; default %(default)s)")
    p.add_argument("--output", metavar="PATH",
                   help="write a meta record, a record per measurement and the verdict to PATH "
                        "(.jsonl or .json)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --output file")
    add_store_flags(p)
    p.add_argument("--baseline", metavar="URL", default=None,
                   help="also judge each host and link against its own last 10 checks in this "
                        "results database (--db's; the same --tag; docs/history.md)")
    return p


def _measuring_flags(p):
    """How a check measures and judges: the bars, the message sizes, the trials, the retests."""
    p.add_argument("--min-fraction", type=_fraction, default=DEFAULT_MIN_FRACTION, metavar="F",
                   help="a host or link below F of its peers' median bandwidth is suspect and "
                        "retested before it is cleared (a latency: above 1/F of theirs and "
                        f"beyond 3 robust deviations; default {DEFAULT_MIN_FRACTION})")
    p.add_argument("--expect-gbps", type=_floor, default=None, metavar="GBPS",
                   help="also suspect any link (one way) or host (bus bandwidth) below this many "
                        "Gbps, whatever its peers do")
    p.add_argument("--peak", type=parse_peak, default=None, metavar="auto|RATE|FILE",
                   help="also hold every link against what the network can carry: auto (each "
                        "host's interface's line rate, from sysfs), a RATE (100gbit, 12.5GB/s) "
                        "or a FILE of expected figures (its pt2pt line at --large-bytes); a "
                        "link, a host or the whole fleet below --peak-fraction of it is named, "
                        "even when every host is alike (docs/doctor.md)")
    p.add_argument("--peak-fraction", type=_fraction, default=bound.DEFAULT_FRACTION,
                   metavar="F", help="with --peak: the share of the bound a link must reach "
                                     f"(default {bound.DEFAULT_FRACTION})")
    p.add_argument("--expect-latency-us", type=_floor, default=None, metavar="US",
                   help="also suspect any link whose small-message latency is above this")
    p.add_argument("--small-bytes", type=byte_count, default=8, metavar="BYTES",
                   help="the latency message (default 8)")
    p.add_argument("--large-bytes", type=byte_count, default=16 << 20, metavar="BYTES",
                   help="the bandwidth message (default 16M)")
    p.add_argument("--trials", type=int_at_least(1), default=20,
                   help="trials of a latency window (bandwidth windows: a fifth, at least 2; "
                        "default 20)")
    p.add_argument("--warmups", type=int_at_least(0), default=2,
                   help="untimed rounds before each measurement (default 2)")
    p.add_argument("--repeat", type=int_at_least(2), default=3, metavar="R",
                   help="windows per figure, for its 95%% interval (default 3)")
    p.add_argument("--retest", type=int_at_least(0), default=2, metavar="K",
                   help="re-measure each suspect host against K hosts judged good before naming "
                        "it (default 2; 0: name first-pass suspects)")


@dataclass(frozen=True)
class DoctorSettings:
    # the ranks (cli.add_rank_flags)
    local_rank: int | None
    backend: str | None
    dist: str
    device: str | None
    timeout: float
    # the plan: which pairs, round after round, and the switches
    plan: str
    rounds: int
    seed: int
    topology: str | None  # the file, "none", or None: Slurm's own under srun
    topology_of: object  # the file's topology.Topology, read at parse time; None without one
    fleet_wide: bool
    on_loss: str  # "continue" or "stop": what a host lost mid-check does to the rest
    # how it measures and judges
    min_fraction: float
    expect_gbps: float | None
    expect_latency_us: float | None
    peak: object  # bounds.PeakSpec or None: what links are held against (bound.py)
    peak_fraction: float
    small_bytes: int
    large_bytes: int
    trials: int
    warmups: int
    repeat: int
    retest: int
    bw_unit: str
    # outputs
    output: str | None
    overwrite: bool
    db: str | None
    tag: str | None
    prometheus: str | None
    baseline: str | None


def parse(argv=None):
    args = parser().parse_args(argv)
    settle_layer(args)
    switches = topology.parse(args.topology) if args.topology not in (None, "none") else None
    if args.output:
        kind = results.output_format(args.output)
        if kind == ".csv":
            raise UsageError("--output: doctor.py writes .jsonl or .json (its records are not a "
                             "table of sizes)")
    return frozen(DoctorSettings, args, topology_of=switches)


def rank_settings(args):
    """What starts doctor.py's ranks (comm.init_comm)."""
    return RankSettings(dist=args.dist, backend=args.backend, device=args.device,
                        timeout=args.timeout, command_line=command_line(args))
