"""doctor.py --fleet-wide on real ranks: after the verdict on the pairs, one all_reduce across
every live host not named (one rank a host), held against what its pairs predict; when it is
slower, its halves at once, and the slower half split again (bisect.py decides, as it does on
model.py's fabric; this module measures).

Rank 0 runs bisect.run. Each round it asks for goes to every rank through the rendezvous store
(`fleet/N`: the groups of hosts to measure at once); every rank makes the groups' process
groups in the same order (torch names a group by how many the process has made), each group's
ranks time their all_reduce's bus bandwidth (measure.Host: the large message, --repeat
windows), its first rank posts the figure, and rank 0 reads them once every live rank has come
to the round's step. `fleet/end` closes it. A group with a host that stops answering gives no
figure (bisect.py reads that as a slow half), and the host is named unreachable as in the other
phases."""

import time

from . import bisect, measure

POLL_S = 0.05


def run(check, judgement, first):
    """Every rank: the fleet-wide collective and its bisection from round `first`; rank 0's
    findings go to `judgement`. Returns the rounds taken (rank 0) or followed."""
    control = check.control
    if check.comm.global_rank == 0:
        def collective(groups, number):
            groups = [sorted(group) for group in groups]
            if number == first:
                left = len(check.hosts) - len(groups[0])
                check.say(f"doctor: the whole fleet at once: one all_reduce across "
                          f"{len(groups[0])} hosts" + (f" ({left} named or unreachable sit "
                                                       "out)" if left else "") +
                          "; while slower than its pairs predict, its halves at once")
            control.post(f"fleet/{number}", groups)
            return _round(check, groups, number)
        try:
            return bisect.run(check.figures, judgement, collective, first)
        finally:
            control.post("fleet/end", 1)
    number = first
    deadline = time.monotonic() + 2 * check.args.timeout + 30
    while time.monotonic() < deadline:
        if control.present([f"fleet/{number}"]):
            _round(check, control.fetch(f"fleet/{number}", timeout=0), number)
            number += 1
            deadline = time.monotonic() + 2 * check.args.timeout + 30
        elif control.present(["fleet/end"]):
            break
        else:
            time.sleep(POLL_S)
    return number - first


def _round(check, groups, number):
    """One round: each group of hosts' all_reduce at once. Rank 0: [a host's bus bandwidth in
    each group, or None], each also a record of its own (phase "fleet")."""
    args, control = check.args, check.control
    leaders = [tuple(sorted(check.ranks[h][0] for h in group)) for group in groups]
    for ranks in leaders:  # every rank, in the same order
        try:
            check.group(ranks)
        except RuntimeError:
            pass  # a member lost while it was made: this rank's measurement below says so
    mine = next((n for n, group in enumerate(groups) if check.my_host in group), None)
    if mine is not None and check.leader and \
            not any(h in check.figures.unreachable for h in groups[mine]):
        ranks = leaders[mine]
        found = {}
        try:
            host = measure.Host(check.comm, check.group(ranks), list(ranks),
                                args.small_bytes, args.large_bytes)
            found = check.released(ranks, host.bandwidth, args.trials, args.repeat,
                                   args.warmups)
        except RuntimeError as error:
            found = {"failed": str(error).strip().splitlines()[0][:300] if str(error) else
                     type(error).__name__}
        if ranks[0] == check.comm.global_rank:
            control.post(f"fleet/{number}/{mine}", found)
    check.sync(f"fleet-{number}")
    if check.comm.global_rank != 0:
        return None
    out = []
    for n, group in enumerate(groups):
        found = control.fetch(f"fleet/{number}/{n}", timeout=0) or {"failed": "no answer"}
        check.record({"phase": "fleet", "round": number,
                      "hosts": [check.hosts[h] for h in group], **found})
        out.append(found.get("busbw_Bps"))
    return out
