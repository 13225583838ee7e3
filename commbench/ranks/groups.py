"""--groups: each op run concurrently in sub-groups of the world instead of the whole world, to
see where the time goes between nodes. `intra`: the ranks of each host together (every host
at once); `inter`: one rank per host (every local-rank column at once); `world`: the whole
world, as without the flag.

A layout is made once per run (every rank creates every group, in the same order, as torch
requires); the op scripts are unchanged: in a layout, `comm.dist` is a view of the layer whose
calls carry `group=` and translate roots from group ranks to global ranks, and `comm.rank` /
`comm.world_size` are the rank in the group and the group's size.
"""

import functools
from dataclasses import dataclass, field

from ..errors import UsageError

KINDS = ("world", "intra", "inter")
TITLES = {"world": "world", "intra": "intra-host", "inter": "inter-host", "split": "split"}
RULES = ("blocks", "strided")


def kinds(text):
    """--groups' value: a comma list of world, intra, inter, each once, in the order given."""
    names = [name.strip() for name in text.split(",")]
    unknown = [name for name in names if name not in KINDS]
    if unknown or not names:
        raise ValueError(f"'{unknown[0] if unknown else text}' is not a group layout: use world, "
                         "intra or inter (or a comma list of them)")
    if len(set(names)) != len(names):
        raise ValueError(f"'{text}' names a layout twice")
    return names


def split_rule(text):
    """--split's value: (N, rule) from `N`, `N:blocks` or `N:strided`, N >= 2."""
    count, _, rule = text.partition(":")
    rule = rule or "blocks"
    try:
        number = int(count)
    except ValueError:
        number = 0
    if number < 2 or rule not in RULES:
        raise ValueError(f"'{text}' is not a split: use N (N >= 2 groups of consecutive ranks), "
                         "N:blocks (the same) or N:strided (every N-th rank together: across "
                         "hosts when ranks fill hosts in order)")
    return number, rule


def split_groups(split, world):
    """--split's groups as lists of global ranks. Raises UsageError where N does not divide the
    world into groups of 2 or more."""
    count, rule = split
    if world % count or world // count < 2:
        why = "does not divide" if world % count else "leaves groups of one rank in"
        raise UsageError(f"--split {count}: {count} groups {why} a world of {world} rank"
                         f"{'s' if world > 1 else ''}; use a divisor of {world} that leaves 2 or "
                         "more ranks a group")
    size = world // count
    if rule == "blocks":
        return [list(range(g * size, (g + 1) * size)) for g in range(count)]
    return [list(range(g, world, count)) for g in range(count)]


def layout(kind, hostnames, split=None):
    """The groups of `kind` as lists of global ranks, hosts in the order their first rank comes
    (split: --split's rule). Raises UsageError for a layout this world cannot make (groups of
    one rank, uneven hosts, a split that does not divide the world)."""
    world = len(hostnames)
    if kind == "world":
        return [list(range(world))]
    if kind == "split":
        return split_groups(split, world)
    hosts = list(dict.fromkeys(hostnames))
    per_host = [[rank for rank, name in enumerate(hostnames) if name == host] for host in hosts]
    counts = sorted({len(ranks) for ranks in per_host})
    if len(counts) > 1:
        shape = ", ".join(f"{host} {len(ranks)}" for host, ranks in zip(hosts, per_host))
        raise UsageError(f"--groups {kind} needs the same number of ranks on every host ({shape})")
    groups = per_host if kind == "intra" else [list(column) for column in zip(*per_host)]
    if len(groups[0]) < 2:
        where = (f"{world} rank{'s' if world > 1 else ''} on 1 host" if kind == "inter" else
                 f"1 rank on each of {len(hosts)} hosts")
        raise UsageError(f"--groups {kind}: {where} make groups of one rank; {kind} needs "
                         + ("ranks on 2 or more hosts" if kind == "inter" else
                            "2 or more ranks per host"))
    return groups


def header_qualifier(kind, index, ranks, hostnames):
    """The header's words for group `index` of a layout: `intra-host group 1 (ranks 2 3 on n2)`."""
    hosts = list(dict.fromkeys(hostnames[rank] for rank in ranks))
    where = f" on {hostnames[ranks[0]]}" if kind == "intra" else \
        f" on {' '.join(hosts)}" if kind == "split" and len(set(hostnames)) > 1 else ""
    return f"{TITLES[kind]} group {index} (ranks {' '.join(map(str, ranks))}{where})"


# The calls whose root argument (at this position) is a rank: given as a group rank by the
# op scripts, passed on as the global rank, as torch and deepspeed.comm both want it.
_ROOT_POSITION = {"broadcast": 1, "reduce": 1, "send": 1, "recv": 1, "isend": 1, "irecv": 1,
                  "gather": 2, "scatter": 2}


class InGroup:
    """A view of a communication module (torch.distributed or deepspeed.comm) whose calls run in
    one process group: `group=` added, roots translated. Anything else passes through."""

    def __init__(self, module, group, ranks):
        self._module, self._group, self._ranks = module, group, ranks

    def __getattr__(self, name):
        attribute = getattr(self._module, name)
        if not callable(attribute) or isinstance(attribute, type) or name[:1].isupper():
            return attribute  # ReduceOp and the like
        if name in _ROOT_POSITION:
            return _rooted(attribute, _ROOT_POSITION[name], self._ranks, self._group)
        return functools.partial(attribute, group=self._group)


def _rooted(function, position, ranks, group):
    def call(*args, **kwargs):
        args = list(args)
        args[position] = ranks[args[position]]
        return function(*args, group=group, **kwargs)
    return call


@dataclass
class Layout:
    kind: str
    groups: list  # lists of global ranks
    index: int  # this rank's group
    dist: object  # the layer's view for this rank's group (InGroup), or the layer itself
    all_gather: object
    reduce_scatter: object
    # rank 0: the rows of groups after the first, per group, for their tables after the op's
    pending: dict = field(default_factory=dict)
    # rank 0, --split: every group's record of each size, for the aggregate table
    totals: dict = field(default_factory=dict)

    @property
    def ranks(self):
        return self.groups[self.index]
