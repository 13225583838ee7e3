"""Which switch each host sits behind: Slurm's topology.conf (tree plugin) form,

    SwitchName=s1 Nodes=node[01-16]
    SwitchName=s2 Nodes=node[17-32]
    SwitchName=spine Switches=s[1-2]

(hostlist ranges as Slurm writes them: node[01-16,20], several ranges, zero-padded widths kept;
`#` starts a comment; other keys, LinkSpeed= and the like, are ignored). A bad file is a
UsageError naming its file and line: a line without SwitchName=, a host under two switches, a
switch that names an unknown switch or lies under two, a cycle of switches; and, held against
the check's hosts (`check`), a host of the file that the check does not run on or a host of the
check under no switch. All of it before any rank measures.

Under `srun` without --topology, the check reads Slurm's own (`slurm_text`: `scontrol show
topology`, the same form with Level= and LinkSpeed= besides) and keeps the switches of its own
hosts (`from_slurm`): a cluster's topology names every node it has, and a check runs on some.
When Slurm has none, or does not place every host of the check, the check runs without one and
says why in one line."""

import os
import re
import subprocess
from dataclasses import dataclass, field

from ..errors import UsageError


@dataclass
class Switch:
    name: str
    line: int  # where the file defines it
    hosts: list = field(default_factory=list)  # host names directly behind it (a leaf's)
    switches: list = field(default_factory=list)  # switch names directly below it


@dataclass
class Topology:
    path: str
    switches: dict  # name -> Switch, in the file's order
    leaf_of: dict  # host name -> the name of the switch it sits behind
    host_line: dict  # host name -> the line that put it there

    def leaves(self):
        """The switches with hosts behind them, in the file's order."""
        return [s for s in self.switches.values() if s.hosts]

    def leaf_index(self, names):
        """For the check's hosts `names` (in order): each one's leaf switch's index into
        leaves() (the form the planner and the verdict take)."""
        order = {s.name: n for n, s in enumerate(self.leaves())}
        return [order[self.leaf_of[name]] for name in names]


def expand(text):
    """Slurm's hostlist: `n[01-03,7],m1` -> n01 n02 n03 n7 m1 (brackets may repeat:
    r[1-2]n[1-2] -> r1n1 r1n2 r2n1 r2n2). ValueError on a malformed one."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError(f"unbalanced brackets in '{text}'")
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced brackets in '{text}'")
    parts.append(text[start:])
    names = []
    for part in parts:
        if not part:
            raise ValueError(f"an empty name in '{text}'")
        names += _expand_one(part, text)
    return names


def _expand_one(part, whole):
    match = re.match(r"([^\[]*)\[([^\]]*)\](.*)$", part)
    if not match:
        if re.search(r"[\[\]\s=]", part):
            raise ValueError(f"'{part}' is not a host name")
        return [part]
    prefix, ranges, rest = match.groups()
    heads = []
    for item in ranges.split(","):
        bounds = item.split("-")
        if len(bounds) == 1 and bounds[0].isdigit():
            heads.append(bounds[0])
        elif len(bounds) == 2 and all(b.isdigit() for b in bounds) and \
                int(bounds[0]) <= int(bounds[1]):
            width = len(bounds[0]) if bounds[0].startswith("0") else 0
            heads += [str(n).zfill(width) for n in range(int(bounds[0]), int(bounds[1]) + 1)]
        else:
            raise ValueError(f"'{item}' in '{whole}' is not a number or a range a-b")
    tails = _expand_one(rest, whole) if rest else [""]
    return [prefix + head + tail for head in heads for tail in tails]


def _fields(line):
    found = {}
    for token in line.split():
        key, equals, value = token.partition("=")
        if not equals or not value:
            raise ValueError(f"'{token}' is not KEY=VALUE")
        found[key.lower()] = value
    return found


def parse(path, text=None):
    """The topology of file `path` (its `text` if given); UsageError `PATH:LINE: why`."""
    if text is None:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as error:
            raise UsageError(f"--topology {path}: {error.strerror or error}") from None
    switches, leaf_of, host_line, parent_of = {}, {}, {}, {}

    def bad(number, why):
        return UsageError(f"--topology {path}:{number}: {why}")

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            fields = _fields(line)
            name = fields.get("switchname")
            if not name:
                raise ValueError("a line names its switch with SwitchName=")
            hosts = expand(fields["nodes"]) if "nodes" in fields else []
            below = expand(fields["switches"]) if "switches" in fields else []
        except ValueError as error:
            raise bad(number, str(error)) from None
        if name in switches:
            raise bad(number, f"switch {name} is defined twice (first on line "
                              f"{switches[name].line})")
        for host in hosts:
            if host in leaf_of:
                raise bad(number, f"host {host} is under two switches, {leaf_of[host]} (line "
                                  f"{host_line[host]}) and {name}")
            leaf_of[host], host_line[host] = name, number
        for child in below:
            if child in parent_of:
                raise bad(number, f"switch {child} is under two switches, {parent_of[child][0]} "
                                  f"(line {parent_of[child][1]}) and {name}")
            parent_of[child] = (name, number)
        switches[name] = Switch(name, number, hosts, below)
    for name, (parent, number) in parent_of.items():
        if name not in switches:
            raise bad(number, f"switch {parent} names switch {name}, which no SwitchName= line "
                              "defines")
    for name in switches:  # up from each switch: a cycle comes back to where it started
        seen, at = [name], name
        while at in parent_of:
            at, number = parent_of[at]
            if at in seen:
                chain = " -> ".join(seen[seen.index(at):] + [at])
                raise bad(number, f"a cycle of switches: {chain}")
            seen.append(at)
    if not switches:
        raise UsageError(f"--topology {path}: no SwitchName= line")
    return Topology(path, switches, leaf_of, host_line)


def check(topology, names):
    """The topology held against the check's hosts `names`: every host of the file is one of
    them and every one of them is behind a switch of the file (UsageError otherwise)."""
    known = set(names)
    for host, number in topology.host_line.items():
        if host not in known:
            raise UsageError(f"--topology {topology.path}:{number}: unknown host {host}: the "
                             f"check runs on {few(names)}")
    missing = [name for name in names if name not in topology.leaf_of]
    if missing:
        raise UsageError(f"--topology {topology.path}: host {missing[0]} of the check is under "
                         "no switch of the file (a SwitchName= line with Nodes= naming it)")
    return topology


SLURM = "Slurm's (scontrol show topology)"


def slurm_text(timeout_s=10.0, environ=None):
    """What `scontrol show topology` prints for the job this rank runs in, or (None, why): not
    under Slurm, no scontrol, no answer in time, or no switch in it (a cluster without the tree
    plugin)."""
    environ = os.environ if environ is None else environ
    if "SLURM_JOB_ID" not in environ:
        return None, "not under Slurm"
    try:
        done = subprocess.run(["scontrol", "show", "topology"], capture_output=True, text=True,
                              timeout=timeout_s, check=False, env=environ)
    except FileNotFoundError:
        return None, "scontrol is not on PATH"
    except subprocess.TimeoutExpired:
        return None, f"scontrol show topology did not answer in {timeout_s:g} s"
    except OSError as error:
        return None, f"scontrol: {error.strerror or error}"
    if done.returncode != 0 or "SwitchName=" not in done.stdout:
        said = (done.stderr or done.stdout).strip().splitlines()
        return None, f"Slurm has no switches to say ({said[0][:120] if said else 'no output'})"
    return done.stdout, ""


def from_slurm(text, names):
    """Slurm's topology `text` cut to the check's hosts `names`: (Topology, "") or (None, why).
    A host of the check is Slurm's node of the same name, or of its name up to the first dot
    (a node is named by its short host name, a host may say its full one); switches with none
    of the check's hosts keep their place in the tree and hold no hosts."""
    # scontrol lists under an upper switch every node beneath it, as Nodes= beside Switches=;
    # the file's form puts a host under its leaf alone.
    lines = [" ".join(t for t in line.split() if not t.lower().startswith("nodes="))
             if re.search(r"(^|\s)switches=", line, re.I) else line for line in text.splitlines()]
    try:
        whole = parse(SLURM, "\n".join(lines))
    except UsageError as error:
        return None, f"Slurm's topology is not one this check reads: {error}"
    node_of = {}
    for name in names:
        for candidate in (name, name.split(".", 1)[0]):
            if candidate in whole.leaf_of:
                node_of[name] = candidate
                break
        else:
            return None, f"host {name} of the check is under no switch in it"
    host_of = {node: name for name, node in node_of.items()}
    switches = {n: Switch(n, s.line, [host_of[h] for h in s.hosts if h in host_of], s.switches)
                for n, s in whole.switches.items()}
    leaf_of = {name: whole.leaf_of[node] for name, node in node_of.items()}
    host_line = {name: whole.host_line[node] for name, node in node_of.items()}
    return Topology(SLURM, switches, leaf_of, host_line), ""


def for_check(given, flag, names, rank, control):
    """The check's topology: --topology's file (`given`) held against its hosts; under srun
    without one (`flag` None), Slurm's own, read by rank 0 (one scontrol call for the job, not
    one a rank) and passed on through the store of `control`. (Topology or None, a line saying
    what was used or why not, or "")."""
    if given is not None:
        return check(given, names), ""
    if flag == "none" or "SLURM_JOB_ID" not in os.environ:
        return None, ""
    if rank == 0:
        text, why = slurm_text()
        control.post("slurm-topology", [text, why])
    else:
        text, why = control.fetch("slurm-topology") or (None, "rank 0 did not pass it on")
    if text is None:
        return None, "" if why.startswith("Slurm has no switches") else \
            f"Slurm's topology not used: {why}"
    found, why = from_slurm(text, names)
    if found is None:
        return None, f"Slurm's topology not used: {why}; the check runs without one"
    leaves = sorted({found.leaf_of[name] for name in names})
    return found, (f"topology: {SLURM}: the hosts are behind {len(leaves)} switch"
                   f"{'es' if len(leaves) > 1 else ''} ({few(leaves)})")


def few(names, most=6):
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most
                                      else "")
