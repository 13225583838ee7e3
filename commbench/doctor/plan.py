"""Which pairs of hosts a check measures, round after round (a round: disjoint pairs measured at
the same time).

- `full`: every pair once (schedule.round_robin): N-1 rounds for N hosts, the gold standard up
  to a few dozen hosts, and the only plan that finds a slow link between two hosts that are
  fine with everyone else.
- `screen`: K rounds of perfect matchings (DLRover's node check, at fleet scale): the first
  drawn at random with the seed (with a topology: each switch's hosts paired among themselves,
  so that a switch's hosts are seen fine among themselves); from the second on, the hosts
  sorted by their last pair's figure and the slowest paired with the fastest, so that a slow
  host's partner is cleared (it gets a fast partner next) and a slow host is seen with
  different partners (with a topology: partners behind another switch, so the uplinks carry
  traffic). A pair measured before is avoided while another partner will do.
- `auto`: full up to AUTO_FULL_HOSTS hosts, screen above.

The screen is adaptive, so it is asked for one round at a time, with the figures of the last."""

import random

from . import schedule

PLANS = ("auto", "full", "screen")
AUTO_FULL_HOSTS = 16  # full: 15 rounds for 16 hosts; 1023 for 1024
DEFAULT_ROUNDS = 3
SCAN = 64  # partners looked at from the fast end before any constraint is relaxed


SCREEN_MIN_HOSTS = 8  # the screen judges a pair against its round's others: 4 pairs a round


def resolve(plan, count):
    """The plan a check of `count` hosts runs: `auto` becomes full or screen; a screen asked of
    fewer than SCREEN_MIN_HOSTS hosts becomes full (screen_fallback says why)."""
    if plan == "auto":
        return "full" if count <= AUTO_FULL_HOSTS else "screen"
    if plan == "screen" and count < SCREEN_MIN_HOSTS:
        return "full"
    return plan


def screen_fallback(asked, count):
    """The line that says a screen asked of too few hosts runs the full plan, or None."""
    if asked != "screen" or count >= SCREEN_MIN_HOSTS or count < 2:
        return None
    return (f"--plan screen judges each pair against the other pairs of its round, and {count} "
            f"hosts make {count // 2} a round: too few to tell a slow host whose pairs are the "
            f"majority (3 hosts, one slow: 2 of its 3 pairs); the full plan runs instead, every "
            f"pair in {count - 1 if count % 2 == 0 else count} rounds (the screen from "
            f"{SCREEN_MIN_HOSTS} hosts on)")


class Full:
    """Every pair once, the rounds known in advance."""

    def __init__(self, count):
        self.rounds = schedule.round_robin(count)

    def __len__(self):
        return len(self.rounds)

    def round(self, number, last=None, gone=()):
        return [(a, b) for a, b in self.rounds[number] if a not in gone and b not in gone]


class Screen:
    """K rounds of disjoint pairs of `count` hosts; `leaf`: each host's switch (an index), or
    None without a topology."""

    def __init__(self, count, rounds=DEFAULT_ROUNDS, seed=0, leaf=None):
        self.count, self.rounds, self.leaf = count, rounds, leaf
        self.random = random.Random(seed)
        self.met = set()

    def __len__(self):
        return self.rounds

    def round(self, number, last=None, gone=()):
        """Round `number`'s pairs (i, j), i < j; `last`: host -> its last pair's figure (higher
        is faster); `gone`: hosts to leave out (unreachable)."""
        hosts = [h for h in range(self.count) if h not in gone]
        if number == 0 or not last:
            pairs = self._first(hosts)
        else:
            pairs = self._sorted(hosts, last)
        pairs = sorted((min(a, b), max(a, b)) for a, b in pairs)
        self.met.update(pairs)
        return pairs

    def _first(self, hosts):
        hosts = list(hosts)
        self.random.shuffle(hosts)
        if self.leaf is None:
            return list(zip(hosts[0::2], hosts[1::2]))
        groups = {}
        for h in hosts:
            groups.setdefault(self.leaf[h], []).append(h)
        pairs, left = [], []
        for members in groups.values():
            pairs += zip(members[0:-1:2], members[1::2])
            if len(members) % 2:
                left.append(members[-1])
        return pairs + list(zip(left[0::2], left[1::2]))

    def _sorted(self, hosts, last):
        known = sorted(v for h, v in last.items() if v is not None)
        middle = known[len(known) // 2] if known else 0.0
        # slowest first; ties broken at random (seeded), not by host number
        keys = {h: (last.get(h) if last.get(h) is not None else middle, self.random.random())
                for h in hosts}
        order = sorted(hosts, key=keys.get)
        used = set()
        pairs = []
        top = len(order) - 1
        for slow in order:
            if slow in used:
                continue
            used.add(slow)
            while top >= 0 and order[top] in used:
                top -= 1
            if top < 0:
                break  # an odd one out sits this round out
            partner, looked, index = None, 0, top
            fallback = order[top]
            while index >= 0 and looked < SCAN:
                other = order[index]
                if other not in used:
                    looked += 1
                    if self._fits(slow, other):
                        partner = other
                        break
                index -= 1
            partner = fallback if partner is None else partner
            used.add(partner)
            pairs.append((slow, partner))
        return self._repair(pairs)

    def _repair(self, pairs):
        """The greedy pairing's last hosts may be left with a partner behind their own switch
        (or one already met): such a pair swaps partners with another pair where all four then
        fit (a perfect matching across switches exists whenever no switch holds more than
        half of the hosts)."""
        pairs = list(pairs)
        for n in range(len(pairs)):
            a, b = pairs[n]
            if self._fits(a, b):
                continue
            swap = next(((m, x, y) for m, (c, d) in enumerate(pairs) if m != n
                         for x, y in ((c, d), (d, c))
                         if self._fits(a, x) and self._fits(b, y)), None)
            if swap is not None:
                m, x, y = swap
                pairs[n], pairs[m] = (a, x), (b, y)
        return pairs

    def _fits(self, a, b):
        if (min(a, b), max(a, b)) in self.met:
            return False
        return self.leaf is None or self.leaf[a] != self.leaf[b]


def make(plan, count, rounds=DEFAULT_ROUNDS, seed=0, leaf=None):
    """The planner of `plan` (full or screen; resolve auto first)."""
    if plan == "full":
        return Full(count)
    return Screen(count, rounds, seed, leaf)
