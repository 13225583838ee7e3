"""What `report.py trials RUN` prints (render): each size's lines (its trials, spikes and
period, the witnesses, the drift), who was late by each witness and the straggler they name or
why none, and the period in time of the run's spikes; from trials.py's figures."""

from ..bench import lateness
from .. import units
from .trials import run_period

MATERIAL = lateness.MATERIAL  # a witness's waiting, at least this share of the trials' time
WITNESSES = {"clock": "the clocks", "call time": "the call times", "not run": "the time not run"}


def _why_none(s):
    if s["how"] == "disagree":
        said = [f"{WITNESSES[name]} name rank {rank}" for name, (rank, _) in s["witnesses"].items()
                if rank is not None]
        return "the witnesses disagree: " + ", ".join(said)
    if s["how"] == "unconfirmed":
        rank = s["witnesses"]["clock"][0]
        caused = next(row["caused_s"] for row in s["by_call"] if row["rank"] == rank)
        late = next(row["total_late_s"] for row in s["stragglers"] if row["rank"] == rank)
        return (f"the clocks name rank {rank}, last by {units.duration(late)} in all, but by the "
                f"call times the others waited {units.duration(caused)} for it: a staggered "
                "rhythm, not a straggler")
    waiting = sum(row["total_late_s"] for row in s["stragglers"])
    top = s["stragglers"][0]
    parts = []
    if waiting <= 0:
        parts.append("no lead beyond the clocks' error" if s["undecided"] else
                     "no rank came late")
    elif top["total_late_s"] <= waiting / 2:
        parts.append("by the clocks, no rank caused more than half of the waiting")
    else:
        share = s["witnesses"]["clock"][1]
        parts.append(f"by the clocks, rank {top['rank']} caused most of the waiting, "
                     f"{units.duration(top['total_late_s'])}, {share:.0%} of the trials' time: "
                     + _short_of(share, s["chances"]["clock"]))
    if s["by_call"] is not None:
        lead = s["by_call"][0]
        share = s["witnesses"]["call time"][1]
        parts.append(f"by the call times, rank {lead['rank']} caused "
                     f"{units.duration(lead['caused_s'])}, {share:.0%}"
                     + _chance_words(s["chances"]["call time"]) if lead["caused_s"] > 0
                     else "by the call times, no rank was waited for")
    if s["by_stopped"] is not None:
        lead = s["by_stopped"][0]
        share = s["witnesses"]["not run"][1]
        parts.append(f"by the time not run, rank {lead['rank']} {units.duration(lead['caused_s'])}"
                     f", {share:.0%}" + _chance_words(s["chances"]["not run"])
                     if lead["caused_s"] > 0 else "by the time not run, every rank ran")
    return "; ".join(parts)


def _short_of(share, chance):
    if share < MATERIAL:
        return f"under the {MATERIAL:.0%} that names one"
    if chance is not None and chance > lateness.CHANCE:
        return f"so much on one rank could be chance (p={chance:.2f})"
    return "but not more than half of the waiting"


def _chance_words(chance):
    return "" if chance is None or chance <= lateness.CHANCE else f" (chance: p={chance:.2f})"


def _clock_words(s):
    if s["clock"] == "shared":
        return "arrivals on one clock (one host)"
    if s["clock"] == "measured":
        return (f"arrivals on rank 0's clock, hosts' offsets measured within "
                f"+-{units.duration(s['clock_error_s'])}")
    return f"arrivals within +-{units.duration(s['clock_error_s'])}, a barrier's exit"


def _spike_words(s):
    kinds = s["spike_kinds"]
    if not kinds or len(s["ranks"]) < 2:
        return ""
    late: dict = {}
    stopped: dict = {}
    inside: list = []
    for kind, who, _ in kinds.values():
        if kind == "late":
            late[who] = late.get(who, 0) + 1
        elif kind == "stopped":
            stopped[who] = stopped.get(who, 0) + 1
        else:
            inside.append(who)
    parts = [f"{n} a late call by rank {rank}" for rank, n in
             sorted(late.items(), key=lambda item: -item[1])]
    parts += [f"{n} rank {rank} not running inside the call" for rank, n in
              sorted(stopped.items(), key=lambda item: -item[1])]
    if inside:
        long = sorted({r for who in inside for r in who})
        parts.append(f"{len(inside)} a stall inside the call (long calls: "
                     + (f"rank{'s' if len(long) > 1 else ''} {' '.join(map(str, long))}"
                        if long else "none stood out") + ")")
    return "; " + ", ".join(parts)


def _period_line(sizes):
    found, why = run_period(sizes)
    if found is None:
        return f"period in time  none: {why}"
    return (f"period in time  every {units.duration(found.seconds)}: {found.near} of "
            f"{found.events} spike events within a tenth of a period of it (Rayleigh test over "
            f"periods {units.duration(found.low)} to {units.duration(found.high)}, "
            f"p={found.p:.3f} against {lateness.SHUFFLES} shuffles of the spikes among the "
            f"trials; false alarms {lateness.FALSE_ALARM:.0%})")


def _mark(s, witness, rank):
    """The arrow on a witness's line: that witness named this rank, and it is the straggler."""
    named = s["witnesses"].get(witness, (None, 0))[0]
    return "   <- straggler" if rank == s["straggler"] and named == rank else ""


def _sharing(sizes):
    """A note when a host's ranks outnumber its CPUs (rank 0's host's count), or None."""
    for s in sizes:
        cpus = s.get("cpus")
        if not cpus:
            continue
        for host in dict.fromkeys(s["hosts"]):
            count = s["hosts"].count(host)
            if count > cpus:
                return (f"note: {count} ranks share {cpus} CPUs on {host}: a rank waits its turn "
                        "for a core, and a busy-waiting backend (oneCCL's) makes that turn long; "
                        "lateness there is the sharing's as much as a straggler's")
    return None


def render(sizes):
    lines = [line for line in [_sharing(sizes)] if line]
    for s in sizes:
        lines += _size_lines(s)
    if sizes:
        lines.append(_period_line(sizes))
    return "\n".join(lines)


def _size_lines(s):
    """One size's lines: its trials, spikes and period, the witnesses, the drift."""
    lines = []
    group = f", group {s['group']}" if s.get("group") is not None else ""
    size = f" {units.size(s['size_bytes'])}" if s["size_bytes"] is not None else ""
    lines.append(f"{s['op']}{size}{group}: {s['trials']} trials on "
                 f"{len(s['ranks'])} ranks ({_clock_words(s)})")
    ratio = s["first_s"] / s["steady_s"] if s["steady_s"] > 0 else float("nan")
    lines.append(f"  first trial   {units.duration(s['first_s'])}, {ratio:.1f}x the steady "
                 f"median {units.duration(s['steady_s'])} (trials 2-{s['trials']})")
    shown = ", ".join(map(str, s["spikes"][:12])) + (" ..." if len(s["spikes"]) > 12 else "")
    text = (f"  spikes        {len(s['spikes'])} over {s['factor']:g}x the steady median"
            + (f" (trials {shown})" if s["spikes"] else "") + _spike_words(s))
    p = s["period"]
    if p is not None:
        when = f", every {units.duration(p['seconds'])}" if p["seconds"] is not None else ""
        text += (f"; period {p['trials']} trials{when} (from trial {p['first']}, "
                 f"{p['on_comb']} spikes on it)")
    else:
        text += "; no period in trials"
    lines.append(text)
    lines += _witness_lines(s)
    d = s["drift"]
    if d is None:
        lines.append("  drift         - (fewer than 4 steady trials)")
    else:
        slope, low, high = d
        verdict = "drift" if low > 0 or high < 0 else "no drift"
        lines.append(f"  drift         {_signed(slope)} a trial (95% interval {_signed(low)} "
                     f"to {_signed(high)}): {verdict}")
    return lines


def _witness_lines(s):
    """Who was late by each witness, and the straggler they name (or why none)."""
    lines = []
    many = len(s["ranks"]) > 1
    for row in s["stragglers"] if many else []:
        index = s["ranks"].index(row["rank"])
        if not row["last"]:
            continue
        mark = _mark(s, "clock", row["rank"])
        lines.append(f"  last to call  rank {row['rank']} on {s['hosts'][index]}: "
                     f"{row['last']} of {s['trials']} trials beyond the clocks' error, by "
                     f"{units.duration(row['total_late_s'] / row['last'])} on average, "
                     f"{units.duration(row['total_late_s'])} in all{mark}")
    if many and s["undecided"]:
        lines.append(f"  last to call  {s['undecided']} of {s['trials']} trials: no lead "
                     "beyond the clocks' error (not counted)")
    leads = (("by_call", "call time", "shortest call", lambda r: (
                 f"{r['shortest']} of {s['trials']} trials, the others waited "
                 f"{units.duration(r['caused_s'])} in all for it")),
             ("by_stopped", "not run", "not run      ", lambda r: (
                 f"the longest in {r['longest']} of {s['trials']} trials, "
                 f"{units.duration(r['caused_s'])} in all beyond the others")))
    for key, witness, label, said in leads if many else ():
        lead = (s[key] or [None])[0]  # the rank the witness puts first, if it caused any wait
        if lead is not None and lead["caused_s"] > 0:
            host = s["hosts"][s["ranks"].index(lead["rank"])]
            lines.append(f"  {label} rank {lead['rank']} on {host}: {said(lead)}"
                         f"{_mark(s, witness, lead['rank'])}")
    if not many:
        lines.append("  last to call  - (one rank: no arrivals to compare)")
    elif s["straggler"] is None:
        lines.append(f"  straggler     none ({_why_none(s)})")
    else:
        how = " and ".join(WITNESSES[name] for name in s["how"].split(" and "))
        lines.append(f"  straggler     rank {s['straggler']} (named by {how})")
    return lines


def _signed(seconds):
    return ("+" if seconds >= 0 else "-") + units.duration(abs(seconds))
