"""doctor.py from start to verdict: the command line, the hosts, the three phases (within each
host, every pair of hosts in rounds, the retest of suspects), the verdict and the exit status.

Every rank runs the same steps; the ranks meet between steps at the rendezvous store
(control.py), never in a collective of the whole world, so a host that dies mid-check is named
unreachable and the rest goes on. One rank per host (its first) measures the pairs."""

import argparse
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed

from .. import defaults, provenance, results
from ..cli import add_rank_flags, add_store_flags
from ..comm import init_comm
from ..entry import guarded
from ..harness import open_results
from ..errors import BenchmarkError, UsageError
from ..flags import UsageParser, prog
from ..numbers import byte_count, float_in, int_at_least
from ..table import emit, note, output_failure
from . import control, fleet, measure, plan, render, schedule, topology, verdict, whole
from .control import Control

DEFAULT_MIN_FRACTION = 0.5


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
    p.add_argument("--min-fraction", type=_fraction, default=DEFAULT_MIN_FRACTION, metavar="F",
                   help="a host or link below F of its peers' median bandwidth (or above 1/F of "
                        "their latency), and beyond 3 robust deviations of them, is suspect "
                        f"(default {DEFAULT_MIN_FRACTION})")
    p.add_argument("--expect-gbps", type=_floor, default=None, metavar="GBPS",
                   help="also suspect any link (one way) or host (bus bandwidth) below this many "
                        "Gbps, whatever its peers do")
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
    p.add_argument("--bw-unit", choices=defaults.BW_UNITS, default=defaults.DEFAULT_UNIT)
    p.add_argument("--timeout", type=float_in(0, 1e6, "a positive number of seconds"),
                   default=120, metavar="SECONDS",
                   help="seconds a rank waits for a peer that hangs; a host that does not "
                        "answer within it is named unreachable (one whose rank died: as soon as "
                        "its heartbeat stands still, 10 s; default %(default)s)")
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


def parse(argv=None):
    args = parser().parse_args(argv)
    # What the suite's start-up reads of an op script's flags, fixed for the doctor.
    args.dtype, args.op, args.pin, args.groups = "float32", "sum", False, None
    args.topology_of = (topology.parse(args.topology) if args.topology not in (None, "none")
                        else None)
    if args.output:
        kind = results.output_format(args.output)
        if kind == ".csv":
            raise UsageError("--output: doctor.py writes .jsonl or .json (its records are not a "
                             "table of sizes)")
    return args


class Check:
    """One check's state on this rank."""

    def __init__(self, comm, args):
        self.comm, self.args = comm, args
        names = list(dict.fromkeys(comm.hostnames))
        self.hosts = names
        self.ranks = [[r for r, h in enumerate(comm.hostnames) if h == name] for name in names]
        counts = {len(ranks) for ranks in self.ranks}
        if len(counts) > 1:
            shape = ", ".join(f"{h} {len(r)}" for h, r in zip(names, self.ranks))
            raise UsageError(f"uneven ranks per host ({shape}): start the same number of ranks "
                             "on every host")
        self.plan = plan.resolve(args.plan, len(names))
        self.my_host = names.index(comm.hostnames[comm.global_rank])
        self.leader = self.ranks[self.my_host][0] == comm.global_rank
        self.control = Control(comm, args.timeout)
        self.topology, self.topology_note = topology.for_check(
            args.topology_of, args.topology, names, comm.global_rank, self.control)
        self.figures = verdict.Figures(
            names, args.min_fraction, args.bw_unit,
            expect_Bps=args.expect_gbps * 1e9 / 8 if args.expect_gbps else None,
            expect_latency_s=args.expect_latency_us * 1e-6 if args.expect_latency_us else None)
        self.figures.full = self.plan == "full"
        if self.topology is not None:
            self.figures.leaf = self.topology.leaf_index(names)
            self.figures.switch_names = [s.name for s in self.topology.leaves()]
        self.writer = None
        self.timeout = timedelta(seconds=args.timeout)
        self.groups = self._make_groups()

    # ------------------------------------------------------------------ steps

    def _dead_hosts(self):
        return {self.comm.hostnames[r] for r in self.control.gone}

    def _sync(self, name):
        """Every live rank at `name`; hosts of ranks that never came are unreachable."""
        new = self.control.step(name)
        for rank in sorted(new):
            host = self.hosts.index(self.comm.hostnames[rank])
            if host not in self.figures.unreachable:
                self.figures.unreachable.add(host)
                if self.control.dead_why.get(rank) == "heartbeat":
                    why = (f"rank {rank} stopped answering: its heartbeat in the store stood "
                           f"still for {control.DEAD_S:g} s")
                else:
                    why = f"rank {rank} did not answer within --timeout {self.args.timeout:g} s"
                self.figures.unreachable_why[host] = f"{why} ({_step_words(name)})"
                self.say(f"host {self.hosts[host]} is unreachable: "
                         f"{self.figures.unreachable_why[host]}; the check goes on without it")

    def say(self, line):
        note(self.comm, line)

    def _make_groups(self):
        """Every group the check may use, made now, while every host answers, by every rank in
        the same order (torch names a group by its ranks and by how many groups the process
        already has: ranks that made groups in different orders wait for each other forever;
        PARAM's replay met the same): each host's ranks, then one rank of each pair of hosts
        (the full plan; the screen's pairs are known a round at a time: `_ensure`)."""
        wanted = []
        if len(self.ranks[0]) > 1:
            wanted += [tuple(ranks) for ranks in self.ranks]
        leaders = [ranks[0] for ranks in self.ranks]
        if self.plan == "full":
            wanted += [(leaders[a], leaders[b]) for pairs in schedule.round_robin(len(self.hosts))
                       for a, b in pairs]
        return {ranks: torch.distributed.new_group(list(ranks), timeout=self.timeout)
                for ranks in wanted}

    def _ensure(self, pairs):
        """The groups of `pairs` (host indices) not made yet, made by every rank in the same
        order (pairs with an unreachable host left out: every rank knows the same ones)."""
        for a, b in pairs:
            if a in self.figures.unreachable or b in self.figures.unreachable:
                continue
            ranks = tuple(sorted((self.ranks[a][0], self.ranks[b][0])))
            if ranks not in self.groups:
                self.groups[ranks] = torch.distributed.new_group(list(ranks),
                                                                 timeout=self.timeout)

    def _ensure_ranks(self, ranks):
        """The group of these ranks, made by every rank in the same order if not made yet."""
        if tuple(ranks) not in self.groups:
            self.groups[tuple(ranks)] = torch.distributed.new_group(list(ranks),
                                                                    timeout=self.timeout)

    def _group(self, ranks):
        return self.groups[tuple(ranks)]

    def within_hosts(self, phase="intra"):
        """Phase 1 (and its retest): every host's ranks among themselves: latency one host
        after the other (hosts that share cores would slow each other's round trips), then
        bandwidth, all hosts at once."""
        mine = self.ranks[self.my_host]
        host = measure.Host(self.comm, self._group(mine), list(mine), self.args.small_bytes,
                            self.args.large_bytes)
        figures = {}
        for turn in range(len(self.hosts)):
            if turn == self.my_host and host is not None:
                try:
                    figures = host.latency(self.args.trials, self.args.repeat, self.args.warmups)
                except RuntimeError as error:
                    figures, host = {"failed": _first_line(error)}, None
            self._sync(f"{phase}-latency-{turn}")
        if host is not None:
            try:
                figures.update(host.bandwidth(self.args.trials, self.args.repeat,
                                              self.args.warmups))
            except RuntimeError as error:
                figures = {"failed": _first_line(error)}
        if self.leader:
            self.control.post(f"{phase}/{self.my_host}", figures)
        self._sync(phase)
        if self.comm.global_rank == 0:
            table = self.figures.hosts if phase == "intra" else self.figures.hosts_retest
            for host in range(len(self.hosts)):
                found = self.control.fetch(f"{phase}/{host}", timeout=0) \
                    if host not in self.figures.unreachable else None
                if found and "failed" not in found and {"busbw_Bps", "latency_s"} <= set(found):
                    table[host] = verdict.Host(found["busbw_Bps"], found["latency_s"])
                if host in self.figures.unreachable:
                    found = {"failed": f"not measured: {self.hosts[host]} is unreachable"}
                self._record({"phase": phase, "host": self.hosts[host],
                              "ranks": self.ranks[host], **(found or {"failed": "no answer"})})

    def pairs(self, rounds, phase, controls=None, first=0):
        """Phase 2 (and 3, the retest): in each round, the pairs' latency one pair after the
        other (round trips of pairs at once wait for each other's CPU or switch port: on hosts
        that share cores they came out 20x too slow), then every pair's bandwidth at once; one
        rank of each host. A retest round is the pair retested, then its control pair (measured
        at the same time: the yardstick of that moment); `controls` (the screen's retests,
        several a round): control pair -> the pair it is measured beside. `first`: the number of
        the first round."""
        for number, pairs in enumerate(rounds, first):
            self._ensure(pairs)
            partner = next((b if a == self.my_host else a for a, b in pairs
                            if self.my_host in (a, b)), None)
            mine = self.leader and partner is not None and partner not in self.figures.unreachable
            found, pair = {}, None
            if mine:
                me, peer = self.comm.global_rank, self.ranks[partner][0]
                pair = measure.Pair(self.comm, self._group(sorted((me, peer))), me, peer,
                                    self.args.small_bytes, self.args.large_bytes)
            for turn, hosts in enumerate(pairs):
                if pair is not None and self.my_host in hosts and \
                        partner not in self.figures.unreachable:
                    try:
                        found = pair.latency(self.args.trials, self.args.repeat,
                                             self.args.warmups)
                    except RuntimeError as error:
                        found, pair = {"failed": _first_line(error)}, None
                self._sync(f"{phase}-{number}-latency-{turn}")
            if pair is not None and partner not in self.figures.unreachable:
                try:
                    found.update(pair.bandwidth(self.args.trials, self.args.repeat))
                except RuntimeError as error:
                    found = {"failed": _first_line(error)}
            if mine and self.my_host < partner:
                if "failed" not in found and not {"latency_s", "forward_Bps"} <= set(found):
                    found = {"failed": f"{self.hosts[partner]} became unreachable"}
                # a key per round: a pair measured in two rounds (a control twice) never
                # leaves a figure of the earlier round to be read as the later's
                self.control.post(f"{phase}/{number}/{self.my_host}-{partner}",
                                  {"round": number, **found})
            self._sync(f"{phase}-{number}")
            if self.comm.global_rank == 0:
                for index, (a, b) in enumerate(pairs):
                    found = self.control.fetch(f"{phase}/{number}/{a}-{b}", timeout=0)
                    gone = [self.hosts[h] for h in (a, b) if h in self.figures.unreachable]
                    if gone and found is None:  # no figure, only why
                        found = {"round": number, "failed": f"not measured: {gone[0]} is "
                                                            "unreachable"}
                    found = found or {"round": number, "failed": "no answer"}
                    if phase == "retest" and controls is not None:
                        if (a, b) in controls:
                            self._take("control", a, b, found, control_for=controls[(a, b)])
                        else:
                            self._take(phase, a, b, found)
                    elif phase == "retest" and index:
                        self._take("control", a, b, found, control_for=pairs[0])
                    else:
                        self._take(phase, a, b, found)

    def _take(self, phase, a, b, found, control_for=None):
        extra = {}
        if "failed" not in found and {"latency_s", "forward_Bps", "backward_Bps",
                                      "both_Bps"} <= set(found):
            link = verdict.Link(found["latency_s"], found["forward_Bps"], found["backward_Bps"],
                                found["both_Bps"], (found.get("latency_ci_s") or [None])[0])
            if control_for is not None:
                self.figures.controls[control_for] = link
            else:
                (self.figures.retests if phase == "retest" else self.figures.links)[(a, b)] = link
            if phase == "pairs":
                self.figures.measured.append((found.get("round"), a, b, link))
            else:
                self.figures.retest_log.append((found.get("round"), (a, b), link, control_for))
        if control_for is not None:
            self.figures.control_of[control_for] = (a, b)
            extra = {"control_for": [self.hosts[h] for h in control_for]}
        self._record({"phase": phase, "hosts": [self.hosts[a], self.hosts[b]],
                      "ranks": [self.ranks[a][0], self.ranks[b][0]], **extra, **found})

    def _record(self, record):
        if self.writer is not None:
            self.writer.add({"type": "doctor", **record})


def screen_rounds(check, planner):
    """The screen's rounds, each planned on rank 0 from the last one's figures (slowest with
    fastest) and handed to every rank through the store."""
    last = {}
    for number in range(len(planner)):
        key = f"screen-round/{number}"
        if check.comm.global_rank == 0:
            pairs = planner.round(number, last, gone=check.figures.unreachable)
            check.control.post(key, pairs)
        else:
            pairs = check.control.fetch(key, timeout=2 * check.args.timeout + 30)
            if pairs is None:
                raise BenchmarkError(f"rank {check.comm.global_rank}: rank 0 did not hand out "
                                     f"round {number + 1} of the screen", rank_local=True)
        pairs = [tuple(pair) for pair in pairs]
        check.pairs([pairs], "pairs", first=number)
        if check.comm.global_rank == 0:
            for found, a, b, link in check.figures.measured:
                if found == number:
                    last[a] = last[b] = link.bandwidth


def _step_words(name):
    """`pairs-1` -> `round 2 of the pairs`; `intra` -> `within the hosts`."""
    phase, _, rest = name.partition("-")
    number = rest.split("-")[0]
    if phase == "intra":
        return "within the hosts" + (", retest" if rest.startswith("retest") else "")
    return f"round {int(number) + 1} of the {'retests' if phase == 'retest' else 'pairs'}"


def _first_line(error):
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:300]


def meta(args, comm, check):
    return {"ops": ["doctor"], "dist": comm.name, "backend": comm.backend,
            "device": comm.device.type, "world_size": comm.world_size,
            "hostnames": comm.hostnames, "hosts": check.hosts,
            "ranks_per_host": len(check.ranks[0]), "bw_unit": args.bw_unit,
            "doctor": {"plan": check.plan, "rounds": args.rounds, "seed": args.seed,
                       "fleet_wide": args.fleet_wide,
                       "topology": check.topology.path if check.topology else args.topology,
                       "min_fraction": args.min_fraction, "expect_gbps": args.expect_gbps,
                       "expect_latency_us": args.expect_latency_us,
                       "small_bytes": args.small_bytes, "large_bytes": args.large_bytes,
                       "trials": args.trials, "warmups": args.warmups, "repeat": args.repeat,
                       "retest": args.retest, "timeout": args.timeout},
            "startup": comm.startup, "versions": provenance.versions(),
            **provenance.invocation()}


def main(local_rank, args):
    """The check; returns the exit status (0 healthy, 1 anything suspect or unreachable)."""
    started = time.monotonic()
    comm = init_comm(local_rank, args)
    check = Check(comm, args)
    check.writer = open_results(args, comm, lambda: meta(args, comm, check))
    hosts, per_host = len(check.hosts), len(check.ranks[0])
    screen = check.plan == "screen"
    planner = plan.make(check.plan, hosts, args.rounds, args.seed, check.figures.leaf)
    note(comm, f"doctor: {hosts} host{'s' if hosts > 1 else ''} x {per_host} rank"
               f"{'s' if per_host > 1 else ''}; " +
               ("within each host, then " if per_host > 1 else "") +
               ((f"the screen: {len(planner)} rounds of disjoint pairs of hosts (--seed "
                 f"{args.seed}{', across switches' if check.topology else ''})" if screen else
                 f"{hosts * (hosts - 1) // 2} pairs of hosts in {len(planner)} rounds")
                if hosts > 1 else "no links between hosts to check (one host)"))
    if check.topology_note:
        note(comm, f"doctor: {check.topology_note}")
    if per_host > 1:
        check.within_hosts()
    if screen:
        screen_rounds(check, planner)
    else:
        check.pairs([planner.round(n) for n in range(len(planner))], "pairs")
    # The verdict's first pass on rank 0; the suspects' retests, which every rank runs.
    judgement = None
    retests = {"intra": False, "pairs": [], "controls": None}
    if comm.global_rank == 0:
        judgement = fleet.first_pass(check.figures) if screen else \
            fleet.consistent_hosts(check.figures, verdict.first_pass(check.figures))
        if args.retest:
            # Each suspect beside a control pair of good hosts measured at the same time where
            # there are hosts for one: a second opinion with its own yardstick of that moment
            # (a busy machine slows the control too). The full plan: one pair at a time (few
            # pairs: the suspects'); the screen: as many at once as are disjoint.
            retests["intra"] = any(f.kind == "host" and f.intra for f in judgement.suspects)
            if screen:
                rounds, controls = fleet.retest_plan(check.figures, judgement, args.retest)
                retests["pairs"] = rounds
                retests["controls"] = [[list(c), list(p)] for c, p in controls.items()]
            else:
                retests["pairs"] = verdict.retest_rounds(check.figures, judgement, args.retest)
        check.control.post("retest-plan", retests)
    else:
        retests = check.control.fetch("retest-plan", timeout=2 * args.timeout + 30) or retests
    if retests["intra"]:
        check.within_hosts("intra-retest")
    rounds = [[tuple(pair) for pair in pairs] for pairs in retests["pairs"]]
    controls = None if retests.get("controls") is None else \
        {tuple(c): tuple(p) for c, p in retests["controls"]}
    if rounds:
        check.pairs(rounds, "retest", controls=controls, first=len(planner) if screen else 0)
    status = 0
    if comm.global_rank == 0:
        (fleet if screen else verdict).confirm(check.figures, judgement)
    if args.fleet_wide:  # every rank: the whole fleet at once, and its bisection (whole.py)
        whole.run(check, judgement, len(planner) + len(rounds))
    if comm.global_rank == 0:
        for line in render.report(check.figures, judgement, per_host):
            emit(sys.stdout, line)
        for line in render.findings(check.figures, judgement):
            emit(sys.stderr, f"commbench: {line}")
        final = render.verdict_record(check.figures, judgement)
        final["seconds"] = time.monotonic() - started
        if args.baseline:  # each against its own past (doctor/baseline.py)
            from . import baseline
            final["baseline"] = baseline.report(args.baseline, check.figures, final, args.tag)
        if check.writer is not None:
            check.writer.add(final)
            check.writer.close()
        status = 0 if final["healthy"] else 1
        if status:  # before any rank exits, so before any launcher's error lines
            emit(sys.stderr, f"commbench: {render.exit_line(status)}")
        check.control.post("status", status)
        # Rank 0 holds the store: it stays until every live rank has read the status.
        live = [r for r in range(1, comm.world_size) if r not in check.control.gone]
        check.control.wait_for([f"done/{r}" for r in live],
                               ranks={f"done/{r}": r for r in live})
    else:
        status = check.control.fetch("status", timeout=2 * args.timeout + 30)
        status = 1 if status is None else status
        if status and check.leader:  # each host's log says it, before its launcher's lines
            emit(sys.stderr, f"commbench: {render.exit_line(status, check.hosts[check.my_host])}")
        check.control.post(f"done/{comm.global_rank}", 1)
    check.control.close()
    if check.figures.unreachable or check.control.gone:
        # A lost peer: tearing the process group down could wait on it; the result is out.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def command(argv=None):
    """doctor.py's entry point (also `commbench doctor`): the exit status, 0 healthy, 1 anything
    suspect or unreachable, 2 bad usage."""
    status = 0

    def body():
        nonlocal status
        try:
            args = parse(argv)
        except OSError as error:  # --help into a closed pipe or onto a full disk
            raise output_failure(error, sys.stdout, "the help") from None
        status = main(args.local_rank, args)
    return guarded(body) or status
