"""The full plan's second pass: which pairs are measured again (each suspect host against its
partners, each suspect link itself, a control pair of good hosts beside each) and each suspect
named or cleared by its retest (verdict.py's first pass finds them).

A suspect host's retests over bandwidth name it by either of two rules: below `fraction` of the
good links' median and of the control pairs beside them; or, with control pairs, the retests
together below -3 against their controls, as the screen's retest does (each retest's log ratio
to its control over sqrt 2 x the spread of the good links' log bandwidths, never under the noise
model's; their sum over the root of their number, each below -1.5). A host capped at half of
its peers sits on the first rule's edge (a coin decides it); the second names it beside a
control at its own pace and clears it when the control was as slow."""

import math
import statistics

from .verdict import MAD_SCALE, SPREAD_PEERS, Finding, low_end, high, link_outlier, low


def good_hosts(figures, judgement):
    """Reachable hosts that are not suspects themselves (a suspect link's hosts are not): the
    ones suspect hosts are retested against."""
    suspects = {h for finding in judgement.suspects if finding.kind == "host"
                for h in finding.hosts}
    return [h for h in range(len(figures.names))
            if h not in suspects and h not in figures.unreachable]


def suspect_links(judgement):
    """The first pass's suspect links, as (i, j) with i < j."""
    return {tuple(sorted(f.hosts)) for f in judgement.suspects if f.kind == "link"}


def partners(figures, judgement, host):
    """The good hosts a suspect host is retested against, and judged by: never the other end of
    a link that is itself a first-pass suspect (on a busy machine, one noisy direction plus a
    slow link made a host's median low; its retest against the slow link's other end then
    "confirmed" it)."""
    avoid = suspect_links(judgement)
    return [g for g in good_hosts(figures, judgement) if (min(host, g), max(host, g)) not in avoid]


def retest_pairs(figures, judgement, per_host=2):
    """The pairs to measure again: each suspect host with up to `per_host` of its partners (good
    hosts, over a link that is no suspect itself), each suspect link itself."""
    pairs = []
    for finding in judgement.suspects:
        if finding.kind == "host" and finding.intra:
            continue  # retested by the within-host phase again
        if finding.kind == "host":
            (h,) = finding.hosts
            pairs += [(min(h, g), max(h, g)) for g in partners(figures, judgement, h)[:per_host]]
        else:
            pairs.append(tuple(sorted(finding.hosts)))
    return list(dict.fromkeys(pairs))


def control_pair(figures, judgement, pair, used=()):
    """A pair of good hosts, disjoint from `pair`, whose first-pass link is no suspect, to be
    measured at the same time as `pair`'s retest (the least used first, then the first in
    order); None where there are no such hosts (fewer than 4 hosts, or too many suspects)."""
    good = [g for g in good_hosts(figures, judgement) if g not in pair]
    avoid = suspect_links(judgement)
    candidates = [(a, b) for n, a in enumerate(good) for b in good[n + 1:]
                  if (a, b) not in avoid and (a, b) in figures.links]
    if not candidates:
        return None
    return min(candidates, key=lambda c: sum(1 for u in used if u == c))


def retest_rounds(figures, judgement, per_host=2):
    """The retest plan: a round per pair to measure again (retest_pairs), with its control pair
    beside it when there is one ([pair, control] or [pair]): the control's figures are the
    yardstick of that moment."""
    rounds, used = [], []
    for pair in retest_pairs(figures, judgement, per_host):
        control = control_pair(figures, judgement, pair, used)
        if control is None:
            rounds.append([pair])
        else:
            used.append(control)
            rounds.append([pair, control])
    return rounds


def confirm_intra(figures, judgement, finding):
    """A host slow among its own ranks: the within-host phase ran again (every host at once);
    kept when it is still an outlier there in what it was suspected of (a bandwidth suspect
    by bandwidth: a latency blip of the retest, measured one host after another on a busy
    machine, named a host whose bandwidth retest was the fastest of all)."""
    (h,) = finding.hosts
    again = figures.hosts_retest.get(h)
    others = [o for k, o in figures.hosts_retest.items() if k != h]
    if again is None or not others:
        finding.text += " (not retested)"
        judgement.findings.append(finding)
        return
    slow = low(again.busbw_Bps, [o.busbw_Bps for o in others if o.busbw_Bps], figures.fraction)
    late = high(low_end(again), [o.latency_s for o in others if o.latency_s], figures.fraction)
    if (slow if finding.measure == "bandwidth" else late if finding.measure == "latency"
            else slow or late):
        finding.retested = True
        finding.text += (f"; again when retested: {figures.bw(again.busbw_Bps)}, "
                         f"{figures.duration(again.latency_s)}")
        judgement.findings.append(finding)
    else:
        judgement.cleared.append(f"host {figures.names[h]} was slow among its ranks in the first "
                                 f"pass ({finding.text}) but not when retested: noise")


def _controls(figures, pairs):
    """The control pairs measured beside the retests of `pairs`: ([their links], "k-l X Gbps,
    ..." to say them)."""
    found = [(figures.control_of.get(p), figures.controls[p]) for p in pairs
             if p in figures.controls]
    words = ", ".join(f"{figures.pair(*c) if c else 'a control'} "
                      f"{figures.bw(lk.bandwidth) if lk.bandwidth is not None else '-'}"
                      for c, lk in found)
    return [lk for _, lk in found], words


def _below_controls(figures, retested, good_links, bar=3.0):
    """Whether the retests of `retested` pairs are together below -bar against the control
    pairs measured beside them (the screen's rule; module docstring). False without controls."""
    from .noise import SIGMA
    logs = [math.log(lk.bandwidth) for lk in good_links if lk.bandwidth]
    sigma = SIGMA
    if len(logs) >= SPREAD_PEERS:
        middle = statistics.median(logs)
        sigma = max(sigma, MAD_SCALE * statistics.median(abs(x - middle) for x in logs))
    zs = []
    for pair in retested:
        again, control = figures.retests.get(pair), figures.controls.get(pair)
        if again and control and again.bandwidth and control.bandwidth:
            zs.append(math.log(again.bandwidth / control.bandwidth) / (sigma * math.sqrt(2)))
    return bool(zs) and max(zs) < -bar / 2 and sum(zs) / math.sqrt(len(zs)) < -bar


def _beside(measure, value, controls, fraction):
    """Whether `value` (a retest's bandwidth or latency) is still out of line against the
    control pairs measured at the same time: under fraction x their median bandwidth, or over
    their median latency / fraction (True without controls: nothing says otherwise)."""
    if measure == "latency":
        lats = [lk.latency_s for lk in controls if lk.latency_s is not None]
        return not lats or value > statistics.median(lats) / fraction
    bws = [lk.bandwidth for lk in controls if lk.bandwidth is not None]
    return not bws or value < fraction * statistics.median(bws)


def confirm(figures, judgement):
    """Each suspect kept when its retest still shows it (or when nothing could retest it), else
    cleared, hosts before links; then every unreachable host. A suspect host is judged by its
    retests against its partners only (never over a suspect link); a retest with a control pair
    measured at the same time must be out of line against that control too. Fills
    judgement.findings and .cleared."""
    judgement.suspects.sort(key=lambda f: f.kind != "host")
    good = good_hosts(figures, judgement)
    avoid = suspect_links(judgement)
    late_links = {tuple(sorted(f.hosts)) for f in judgement.suspects
                  if f.kind == "link" and f.measure == "latency"}
    between = [((i, j), lk) for (i, j), lk in figures.links.items() if i in good and j in good]
    # the yardsticks: for bandwidth, the links between good hosts that are no suspect; for
    # latency, also one suspect of bandwidth alone (a link capped in rate is not late: with 4
    # hosts, two late suspects and a slow link between the other two, it is the only one left)
    good_links = [lk for pair, lk in between if pair not in avoid]
    on_time = [lk for pair, lk in between if pair not in late_links]
    for finding in judgement.suspects:
        if finding.kind == "host" and finding.intra:
            confirm_intra(figures, judgement, finding)
        elif finding.kind == "host":
            _confirm_host(figures, judgement, finding, good_links, on_time)
        else:
            _confirm_link(figures, judgement, finding)
    for h in sorted(figures.unreachable):
        judgement.findings.append(Finding("unreachable", (h,), figures.unreachable_why.get(
            h, "did not answer within --timeout")))
    return judgement


def squared(fraction):
    """The bar for a figure that nothing measured at the same time vouches for: fraction**2 of
    the peers' bandwidth, or their latency / fraction**2 (4x at the default --min-fraction).
    Latency is what a busy machine moves most, and one pass or an uncontrolled retest is one
    moment of it: beside two busy loops, 2 of 40 checks of 4 simulated hosts named healthy hosts
    2.2-3.5x late on one pass, and 1 of 20 of 4 hosts with one slow named a second, healthy host
    late on a retest with no control beside it (benchmarks/doctor_check.py)."""
    return fraction ** 2


def _far_out(finding, fraction):
    """Whether a suspect host's first pass is past the squared bar (True for a host below
    --expect-gbps, which no peer decides)."""
    if finding.times is None:
        return True
    if finding.measure == "latency":
        return finding.times >= 1 / squared(fraction)
    return finding.times <= squared(fraction)


def _unjudged(figures, judgement, finding, names):
    """A suspect host with no retest to judge it by (no partner answered), or none to hold its
    retests against (no link between two hosts judged good: 3 hosts with one suspect, or 4 with
    a second suspect or a suspect link): named on its first pass only past the squared bar, else
    cleared with the reason. In a clean CI run, 4 hosts with a slow link between hosts 1 and 2
    named healthy hosts 3 and 4 this way (bandwidth suspects beside make test's neighbours, no
    good link left), before the bar held bandwidth too."""
    fraction = figures.fraction
    (h,) = finding.hosts
    against = (f"retested against {names}, but no link between two hosts judged good was left "
               "to hold the retest against" if names else
               "not retested: no host judged good, over a link not itself suspect, to retest it "
               "against")
    if _far_out(finding, fraction):
        finding.text += f" ({against})"
        judgement.findings.append(finding)
        return
    what = "late" if finding.measure == "latency" else "slow"
    bar = (f"{1 / squared(fraction):.0f}x the other hosts' latency" if what == "late" else
           f"{squared(fraction):.2f}x the other hosts' bandwidth")
    judgement.cleared.append(
        f"host {figures.names[h]} was {what} in the first pass ({finding.text}), {against}, "
        f"and one pass short of {bar} is not enough to name it (run the check again, on more "
        "hosts or a quieter machine)")


def _confirm_host(figures, judgement, finding, good_links, on_time):
    """A suspect host: named when its retests (against its partners, never over a suspect link)
    are still out of line, beside their control pairs too; else cleared, as noise or as a busy
    machine. `good_links`: the first pass's links between good hosts that are no suspect (the
    bandwidth yardstick); `on_time`: those and the ones suspect of bandwidth alone (latency's)."""
    fraction = figures.fraction
    (h,) = finding.hosts
    retested = [(min(h, g), max(h, g)) for g in partners(figures, judgement, h)
                if figures.link(h, g, retest=True) is not None]
    names = ", ".join(figures.names[b if a == h else a] for a, b in retested)
    if not retested or not (on_time if finding.measure == "latency" else good_links):
        _unjudged(figures, judgement, finding, names)
        return
    again = [figures.retests[p] for p in retested]
    bws = [lk.bandwidth for lk in again if lk.bandwidth is not None]
    lats = [lk.latency_s for lk in again if lk.latency_s is not None]
    ref_bw = [lk.bandwidth for lk in good_links if lk.bandwidth is not None]
    ref_lat = [lk.latency_s for lk in on_time if lk.latency_s is not None]
    bw = statistics.median(bws) if bws else None
    lat = statistics.median(lats) if lats else None
    # late in every retest, each at its interval's low end (a pair's latency is out of
    # line only when its interval is): one descheduled window is not a late host
    least = min((lk.latency_low_s if lk.latency_low_s is not None else lk.latency_s
                 for lk in again if lk.latency_s is not None), default=None)
    slow = bool(bws and ref_bw and bw < fraction * statistics.median(ref_bw))
    controls, control_words = _controls(figures, retested)
    # without a control pair beside the retest (3 hosts, or 4 with two suspects), nothing of
    # that moment says the machine was quiet: a late retest is held to the squared bar
    on_time_lat = statistics.median(ref_lat) if lats and ref_lat else None
    late_past_fraction = on_time_lat is not None and least > on_time_lat / fraction
    late = late_past_fraction if controls else \
        on_time_lat is not None and least > on_time_lat / squared(fraction)
    still = (slow and _beside("bandwidth", bw, controls, fraction)) or \
        (late and _beside("latency", least, controls, fraction)) or \
        (finding.measure == "bandwidth" and
         _below_controls(figures, retested, good_links))
    measured = f"{figures.bw(bw) if bws else '-'}, {figures.duration(lat) if lats else '-'}"
    first = f"host {figures.names[h]} was slow in the first pass ({finding.text})"
    if still:
        finding.retested = True
        finding.text += (f"; retested against {names}: {measured}" +
                         (f" (at the same time, {control_words})" if controls else ""))
        judgement.findings.append(finding)
    elif late_past_fraction and not controls and not slow:
        judgement.cleared.append(
            f"{first} and late when retested against {names} ({figures.duration(lat)}), but "
            "with no pair measured beside the retest to say the machine was quiet, under "
            f"{1 / squared(fraction):.0f}x the good hosts' latency is not enough to name it "
            "(run the check again, on more hosts or a quieter machine)")
    elif slow or late:
        judgement.cleared.append(
            f"{first} and when retested ({measured}) but not against {names} beside the pairs "
            f"measured at the same time ({control_words}): the machine was busy, not the host")
    else:
        judgement.cleared.append(f"{first} but not against {names}: noise")


def _confirm_link(figures, judgement, finding):
    """A suspect link: named when its retest is still an outlier (beside its control pair, when
    relative to its peers); passed over when one of its hosts is named."""
    fraction = figures.fraction
    i, j = finding.hosts
    named = {h for f in judgement.findings if f.kind == "host" for h in f.hosts}
    if i in named or j in named:
        return  # its host is named: that explains it
    again = figures.link(i, j, retest=True)
    if again is None:
        finding.text += " (not retested)"
        judgement.findings.append(finding)
        return
    outlier = link_outlier(figures, i, j, again)
    pair = (min(i, j), max(i, j))
    controls, control_words = _controls(figures, [pair])
    if outlier and not outlier[2]:  # relative to its peers: the control's word too
        value = again.latency_s if outlier[0] == "latency" else again.bandwidth
        beside = _beside(outlier[0], value, controls, fraction)
    else:
        beside = True
    if outlier and beside:
        finding.text = f"{finding.text}; retested: {outlier[1]}" + \
            (f" (at the same time, {control_words})" if controls else "")
        finding.retested = True
        judgement.findings.append(finding)
    elif outlier:
        judgement.cleared.append(
            f"link {figures.pair(i, j)} was slow in the first pass ({finding.text}) and "
            f"when retested, but not beside the pair measured at the same time "
            f"({control_words}): the machine was busy, not the link")
    else:
        judgement.cleared.append(f"link {figures.pair(i, j)} was slow in the first pass "
                                 f"({finding.text}) but not when retested: noise")
