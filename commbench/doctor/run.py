"""doctor.py from start to verdict: the plan, the three phases (within each host, every pair of
hosts in rounds or the screen's, the retest of suspects), the verdict and the exit status.

Every rank runs the same steps; the ranks meet between steps at the rendezvous store
(control.py), never in a collective of the whole world, so a host that dies mid-check is named
unreachable and the rest goes on. One rank per host (its first) measures the pairs. The command
line: flags.py; each rank's state and the phases it measures: check.py."""

import os
import sys
import time

from ..records import provenance
from ..ranks.comm import init_comm
from ..entry import guarded
from ..errors import BenchmarkError
from ..bench.harness import open_results
from ..table import emit, note, output_failure
from . import bound, fleet, fleet_retest, plan, render, retest, verdict, whole
from .check import Check
from .flags import parse, rank_settings


def screen_rounds(check, planner):
    """The screen's rounds, each planned on rank 0 from the last one's figures (slowest with
    fastest) and handed to every rank through the store."""
    last = {}
    for number in range(len(planner)):
        if check.stopping():
            break
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


def meta(args, comm, check):
    return {"ops": ["doctor"], **provenance.placed(comm), "hosts": check.hosts,
            "ranks_per_host": len(check.ranks[0]), "bw_unit": args.bw_unit,
            "doctor": {"plan": check.plan, "rounds": args.rounds, "seed": args.seed,
                       "fleet_wide": args.fleet_wide, "on_loss": args.on_loss,
                       "topology": check.topology.path if check.topology else args.topology,
                       "min_fraction": args.min_fraction, "expect_gbps": args.expect_gbps,
                       "expect_latency_us": args.expect_latency_us,
                       "peak": bound.spec_record(args.peak), "peak_fraction": args.peak_fraction,
                       "small_bytes": args.small_bytes, "large_bytes": args.large_bytes,
                       "trials": args.trials, "warmups": args.warmups, "repeat": args.repeat,
                       "retest": args.retest, "timeout": args.timeout},
            "startup": comm.startup, **provenance.stamped()}


def main(local_rank, args):
    """The check; returns the exit status (0 healthy, 1 anything suspect or unreachable)."""
    started = time.monotonic()
    comm = init_comm(local_rank, rank_settings(args))
    check = Check(comm, args)
    check.writer = open_results(args, comm, lambda: meta(args, comm, check))
    screen = check.plan == "screen"
    planner = plan.make(check.plan, len(check.hosts), args.rounds, args.seed, check.figures.leaf)
    _say_plan(check, planner)
    bound.settle(check)
    if len(check.ranks[0]) > 1:
        check.within_hosts()
    if screen:
        screen_rounds(check, planner)
    else:
        check.pairs([planner.round(n) for n in range(len(planner))], "pairs")
    if check.stopping():
        check.say(f"doctor: --on-loss stop: {render.lost_words(render.lost(check.figures))} "
                  "lost; no retest or phase after it, the verdict on what was measured")
    # The verdict's first pass on rank 0; the suspects' retests, which every rank runs.
    judgement = None
    if comm.global_rank == 0:
        judgement = fleet.first_pass(check.figures) if screen else \
            fleet.consistent_hosts(check.figures, verdict.first_pass(check.figures))
    rounds = _retest(check, judgement, first=len(planner) if screen else 0)
    if comm.global_rank == 0:
        (fleet_retest if screen else retest).confirm(check.figures, judgement)
    # against what the network carries (--peak): links below it measured again, then judged
    if not check.stopping():
        rounds += bound.retest(check, first=(len(planner) if screen else 0) + rounds)
    if comm.global_rank == 0:
        bound.judge(check.figures, judgement)
    if args.fleet_wide and not check.stopping():  # every rank: the whole fleet at once
        whole.run(check, judgement, len(planner) + rounds)
    status = _verdict(check, judgement, started) if comm.global_rank == 0 else _hear_verdict(check)
    check.control.close()
    if check.figures.unreachable or check.control.gone or check.control.released:
        # A lost peer: tearing the process group down could wait on it; the result is out.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _say_plan(check, planner):
    """The check's first line on stderr: hosts, ranks and the plan's rounds."""
    hosts, per_host, args = len(check.hosts), len(check.ranks[0]), check.args
    screen = check.plan == "screen"
    note(check.comm, f"doctor: {hosts} host{'s' if hosts > 1 else ''} x {per_host} rank"
                     f"{'s' if per_host > 1 else ''}; " +
                     ("within each host, then " if per_host > 1 else "") +
                     ((f"the screen: {len(planner)} rounds of disjoint pairs of hosts (--seed "
                       f"{args.seed}{', across switches' if check.topology else ''})" if screen
                       else f"{hosts * (hosts - 1) // 2} pairs of hosts in {len(planner)} rounds")
                      if hosts > 1 else "no links between hosts to check (one host)"))
    fallback = plan.screen_fallback(args.plan, hosts)
    if fallback:
        note(check.comm, f"doctor: {fallback}")
    if check.topology_note:
        note(check.comm, f"doctor: {check.topology_note}")


def _retest(check, judgement, first):
    """Every rank: the suspects' retests, planned by rank 0 (`judgement`) and handed to the
    others through the store. Returns the rounds of pairs retested."""
    args, screen = check.args, check.plan == "screen"
    retests = {"intra": False, "pairs": [], "controls": None}
    if check.comm.global_rank == 0:
        if args.retest and not check.stopping():
            # Each suspect beside a control pair of good hosts measured at the same time where
            # there are hosts for one: a second opinion with its own yardstick of that moment
            # (a busy machine slows the control too). The full plan: one pair at a time (few
            # pairs: the suspects'); the screen: as many at once as are disjoint.
            retests["intra"] = any(f.kind == "host" and f.intra for f in judgement.suspects)
            if screen:
                rounds, controls = fleet_retest.retest_plan(check.figures, judgement, args.retest)
                retests["pairs"] = rounds
                retests["controls"] = [[[list(c), list(p)] for c, p in beside.items()]
                                       for beside in controls]  # one list a round
            else:
                retests["pairs"] = retest.retest_rounds(check.figures, judgement, args.retest)
        check.control.post("retest-plan", retests)
    else:
        retests = check.control.fetch("retest-plan", timeout=2 * args.timeout + 30) or retests
    if retests["intra"]:
        check.within_hosts("intra-retest")
    rounds = [[tuple(pair) for pair in pairs] for pairs in retests["pairs"]]
    controls = None if retests.get("controls") is None else \
        [{tuple(c): tuple(p) for c, p in beside} for beside in retests["controls"]]
    if rounds:
        check.pairs(rounds, "retest", controls=controls, first=first)
    return len(rounds)


def _verdict(check, judgement, started):
    """Rank 0: the report, the findings, the verdict record (and --baseline's), the exit status
    handed to every rank; it holds the store until every live rank has read it."""
    args, comm = check.args, check.comm
    for line in render.report(check.figures, judgement, len(check.ranks[0])):
        emit(sys.stdout, line)
    for line in render.findings(check.figures, judgement):
        emit(sys.stderr, f"commbench: {line}")
    final = render.verdict_record(check.figures, judgement)
    final["seconds"] = time.monotonic() - started
    final["on_loss"] = args.on_loss
    final["stopped"] = check.stopping()  # --on-loss stop cut the check short
    if args.baseline:  # each against its own past (doctor/baseline.py)
        from . import baseline
        final["baseline"] = baseline.report(args.baseline, check.figures, final, args.tag)
    if check.writer is not None:
        check.writer.add(final)
        check.writer.close()
    status = 0 if final["healthy"] else 1
    if status:  # before any rank exits, so before any launcher's error lines
        emit(sys.stderr, f"commbench: {render.exit_line(status, gone=final['lost'])}")
    check.control.post("status", status)
    live = [r for r in range(1, comm.world_size) if r not in check.control.gone]
    check.control.wait_for([f"done/{r}" for r in live], ranks={f"done/{r}": r for r in live})
    return status


def _hear_verdict(check):
    """A rank other than 0: the exit status rank 0 hands out (1 if it never comes)."""
    status = check.control.fetch("status", timeout=2 * check.args.timeout + 30)
    status = 1 if status is None else status
    if status and check.leader:  # each host's log says it, before its launcher's lines
        emit(sys.stderr, "commbench: " + render.exit_line(status, check.hosts[check.my_host],
                                                           render.lost(check.figures)))
    check.control.post(f"done/{check.comm.global_rank}", 1)
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
