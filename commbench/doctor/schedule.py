"""Which hosts are measured together. Every pair of hosts once, in rounds of disjoint pairs
measured at the same time (the circle method: N-1 rounds of N/2 pairs for N even; N rounds with
one host sitting out each for N odd), so that a check of N hosts takes about N rounds, not
N²/2. (Retests run one pair at a time, each beside a control pair of good hosts.)"""


def round_robin(count):
    """Rounds of disjoint pairs (i, j), i < j, covering every pair of `count` hosts once."""
    hosts = list(range(count)) + ([None] if count % 2 else [])
    size = len(hosts)
    rounds = []
    for _ in range(size - 1):
        pairs = [(min(a, b), max(a, b)) for a, b in
                 ((hosts[i], hosts[size - 1 - i]) for i in range(size // 2))
                 if a is not None and b is not None]
        rounds.append(sorted(pairs))
        hosts = [hosts[0], hosts[-1]] + hosts[1:-1]  # the first stays, the others turn
    return rounds
