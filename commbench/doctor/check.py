"""A doctor.py check's state on each rank and the phases it measures: its hosts and their
ranks, the process groups it needs (made by every rank in the same order), the within-host
phase, rounds of pairs of hosts (with control pairs beside retests), and the meetings between
steps at the rendezvous store, where a rank that never comes makes its host unreachable."""

from datetime import timedelta

import torch
import torch.distributed

from ..ranks import pulse, whereabouts
from ..errors import UsageError
from ..table import note
from . import control, measure, plan, release, schedule, topology, verdict
from .control import Control


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
        # each rank's pulse, so that a lost host is told apart: its process gone, or the host
        # not answering (pulse.probe_all at rank 0 when its heartbeat stands still)
        comm.run.whereabouts = whereabouts.start(comm)
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

    def sync(self, name):
        """Every live rank at `name`; hosts of ranks that never came are unreachable."""
        new = self.control.step(name)
        firsts = {}  # each newly lost host's first rank: whose pulse says how it went
        for rank in sorted(new):
            host = self.hosts.index(self.comm.hostnames[rank])
            if host not in self.figures.unreachable:
                firsts.setdefault(host, rank)
        pulses = self._pulses(sorted(firsts.values()))
        for host, rank in firsts.items():
            self.figures.unreachable.add(host)
            if self.control.dead_why.get(rank) == "heartbeat":
                why = (f"rank {rank} stopped answering: its heartbeat in the store stood "
                       f"still for {control.DEAD_S:g} s")
            else:
                why = f"rank {rank} did not answer within --timeout {self.args.timeout:g} s"
            self.figures.unreachable_why[host] = f"{why} ({_step_words(name)})" + \
                pulses.get(rank, "")
            self.figures.lost_when[host] = _step_words(name)
            then = "the check stops after this phase (--on-loss stop)" \
                if self.args.on_loss == "stop" else "the check goes on without it"
            self.say(f"host {self.hosts[host]} is unreachable: "
                     f"{self.figures.unreachable_why[host]}; {then}")

    def _pulses(self, ranks):
        """Rank 0: {rank: what its pulse says} of lost `ranks` (pulse.py), all probed at
        once under one deadline (a host down costs its 1 s once, however many went at a step):
        "; its process is gone (...)" (refused), "; its host does not answer (...)" (no answer:
        a host or interface down), or nothing (alive but hung, or no pulse)."""
        found = whereabouts.of(self.comm)
        if self.comm.global_rank != 0 or found is None or not ranks:
            return {}
        texts = {rank: found.pulse_of(rank) for rank in ranks}
        states = pulse.probe_all({r: t for r, t in texts.items() if t})
        return {r: f"; {whereabouts.GONE[s]}" for r, s in states.items() if s in whereabouts.GONE}

    def stopping(self):
        """--on-loss stop and a host lost: no phase after the one under way (every rank knows
        the same lost hosts: rank 0 hands them out at each step)."""
        return self.args.on_loss == "stop" and bool(self.figures.unreachable)

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
            try:
                self.group(sorted((self.ranks[a][0], self.ranks[b][0])))
            except release.PeerLost:
                continue  # this rank's partner, lost: its measurement says so (pairs)

    def group(self, ranks):
        """The process group of these ranks, made now if not made yet: every rank asks for the
        same groups in the same order (the screen's pairs, --fleet-wide's groups), members or
        not, as torch names a group by how many the process has made."""
        ranks = tuple(ranks)
        if ranks not in self.groups:
            def make():
                return torch.distributed.new_group(list(ranks), timeout=self.timeout)
            if self.comm.global_rank not in ranks:
                self.groups[ranks] = make()  # no connection made: nothing to wait for
            else:  # its making waits for every member's address: released if one is gone
                try:
                    self.groups[ranks] = release.measured(self.control, ranks, make)
                except release.PeerLost as error:
                    self.groups[ranks] = None  # made by no one now: never asked for again
                    if error.left:
                        fresh_group_store()
                    raise
        if self.groups[ranks] is None:
            raise release.PeerLost(f"released: a rank of {list(ranks)} stopped answering")
        return self.groups[ranks]

    def within_hosts(self, phase="intra"):
        """Phase 1 (and its retest): every host's ranks among themselves: latency one host
        after the other (hosts that share cores would slow each other's round trips), then
        bandwidth, all hosts at once."""
        mine, args = self.ranks[self.my_host], self.args
        figures, host = {}, None
        try:
            host = measure.Host(self.comm, self.group(mine), list(mine), args.small_bytes,
                                args.large_bytes)
        except release.PeerLost as error:
            figures = {"failed": _first_line(error)}
        for turn in range(len(self.hosts)):
            if turn == self.my_host and host is not None:
                try:
                    figures = self.released(mine, host.latency, args.trials, args.repeat,
                                            args.warmups)
                except RuntimeError as error:
                    figures, host = {"failed": _first_line(error)}, None
            self.sync(f"{phase}-latency-{turn}")
        if host is not None:
            try:
                figures.update(self.released(mine, host.bandwidth, args.trials, args.repeat,
                                             args.warmups))
            except RuntimeError as error:
                figures = {"failed": _first_line(error)}
        if self.leader:
            self.control.post(f"{phase}/{self.my_host}", figures)
        self.sync(phase)
        if self.comm.global_rank == 0:
            table = self.figures.hosts if phase == "intra" else self.figures.hosts_retest
            for host in range(len(self.hosts)):
                found = self.control.fetch(f"{phase}/{host}", timeout=0) \
                    if host not in self.figures.unreachable else None
                if found and "failed" not in found and {"busbw_Bps", "latency_s"} <= set(found):
                    table[host] = verdict.Host(found["busbw_Bps"], found["latency_s"],
                                               (found.get("latency_ci_s") or [None])[0])
                if host in self.figures.unreachable:
                    found = {"failed": f"not measured: {self.hosts[host]} is unreachable"}
                self.record({"phase": phase, "host": self.hosts[host],
                              "ranks": self.ranks[host], **(found or {"failed": "no answer"})})

    def pairs(self, rounds, phase, controls=None, first=0):
        """Phase 2 (and 3, the retest): in each round, the pairs' latency one pair after the
        other (round trips of pairs at once wait for each other's CPU or switch port: on hosts
        that share cores they came out 20x too slow), then every pair's bandwidth at once; one
        rank of each host. A retest round is the pair retested, then its control pair (measured
        at the same time: the yardstick of that moment); `controls` (the screen's retests,
        several a round): one dict a round, control pair -> the pair it is measured beside in
        that round (a control serves different pairs in different rounds). `first`: the number
        of the first round."""
        for number, pairs in enumerate(rounds, first):
            if self.stopping():
                break
            self._ensure(pairs)
            partner = next((b if a == self.my_host else a for a, b in pairs
                            if self.my_host in (a, b)), None)
            mine = self.leader and partner is not None and partner not in self.figures.unreachable
            found, pair = {}, None
            if mine:
                found, pair = self._pair(partner)
            for turn, hosts in enumerate(pairs):
                if pair is not None and self.my_host in hosts and \
                        partner not in self.figures.unreachable:
                    try:
                        found = self.released([pair.peer], pair.latency, self.args.trials,
                                              self.args.repeat, self.args.warmups)
                    except RuntimeError as error:
                        found, pair = {"failed": _first_line(error)}, None
                self.sync(f"{phase}-{number}-latency-{turn}")
            if pair is not None and partner not in self.figures.unreachable:
                try:
                    found.update(self.released([pair.peer], pair.bandwidth, self.args.trials,
                                               self.args.repeat))
                except RuntimeError as error:
                    found = {"failed": _first_line(error)}
            if mine and self.my_host < partner:
                if "failed" not in found and not {"latency_s", "forward_Bps"} <= set(found):
                    found = {"failed": f"{self.hosts[partner]} became unreachable"}
                # a key per round: a pair measured in two rounds (a control twice) never
                # leaves a figure of the earlier round to be read as the later's
                self.control.post(f"{phase}/{number}/{self.my_host}-{partner}",
                                  {"round": number, **found})
            self.sync(f"{phase}-{number}")
            if self.comm.global_rank == 0:
                for index, (a, b) in enumerate(pairs):
                    found = self.control.fetch(f"{phase}/{number}/{a}-{b}", timeout=0)
                    gone = [self.hosts[h] for h in (a, b) if h in self.figures.unreachable]
                    if gone and found is None:  # no figure, only why
                        found = {"round": number, "failed": f"not measured: {gone[0]} is "
                                                            "unreachable"}
                    found = found or {"round": number, "failed": "no answer"}
                    if phase == "retest" and controls is not None:
                        beside = controls[number - first]
                        if (a, b) in beside:
                            self._take("control", a, b, found, control_for=beside[(a, b)])
                        else:
                            self._take(phase, a, b, found)
                    elif phase == "retest" and index:
                        self._take("control", a, b, found, control_for=pairs[0])
                    else:
                        self._take(phase, a, b, found)

    def _pair(self, partner):
        """({}, this host's Pair with `partner`), or ({"failed": why}, None) when the partner
        was lost while their group was being made."""
        me, peer = self.comm.global_rank, self.ranks[partner][0]
        try:
            return {}, measure.Pair(self.comm, self.group(sorted((me, peer))), me, peer,
                                    self.args.small_bytes, self.args.large_bytes)
        except RuntimeError as error:
            return {"failed": _first_line(error)}, None

    def released(self, peers, work, *args):
        """work(*args) on this rank, released with PeerLost (a RuntimeError) once one of
        `peers` (global ranks) is known gone (release.py)."""
        return release.measured(self.control, peers, lambda: work(*args))

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
        self.record({"phase": phase, "hosts": [self.hosts[a], self.hosts[b]],
                      "ranks": [self.ranks[a][0], self.ranks[b][0]], **extra, **found})

    def record(self, record):
        if self.writer is not None:
            self.writer.add({"type": "doctor", **record})


def fresh_group_store():
    """The process group's store client replaced by a clone of it, for the groups made from now
    on. A group's making left blocked on a lost peer (release.py) holds its client until
    --timeout: a TCPStore client does one request at a time, and its wait for the peer's address
    is one. Every group this rank made after it waited behind it, and rank 0 waited for the rank
    at the next step as long (16 simulated hosts, one SIGKILLed in round 2 of the screen: its
    live partner's next group was made, and the check went on, 120 s later, at --timeout)."""
    c10d = torch.distributed.distributed_c10d
    world = c10d._get_default_group()
    backend, store = c10d._world.pg_map[world]
    try:
        c10d._world.pg_map[world] = (backend, store.clone())
    except (AttributeError, RuntimeError):
        pass  # an older torch's store: the wait as before


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
