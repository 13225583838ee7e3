"""all_to_allv's traffic: how much each rank sends each other rank. An n x n matrix (row = sender)
read from a CSV file (--a2a-matrix: bytes, or weights under --scan), or made for any world
size from a named skew (--a2a-skew zipf:S or hot:K[:F], drawn with --seed), or even.

The scan's size is the busiest sender's: at each size the matrix is scaled so that the rank
that sends most sends exactly that many elements, and every entry is a whole number of elements
(largest remainders), so the records' byte counts are exact.
"""

import csv
import math
import random

from ..errors import UsageError

HOT_FACTOR = 8.0  # hot:K's default: a hot receiver gets 8 times what another rank gets
MATRIX_RECORDED = 64  # records carry the whole matrix up to this many ranks


class MatrixError(ValueError):
    pass


def read_matrix(path):
    """The rows of an n x n CSV of non-negative numbers (blank lines and # comments skipped).
    Raises MatrixError with the reason."""
    try:
        with open(path, newline="") as file:
            lines = [row for row in csv.reader(
                line for line in file if line.strip() and not line.lstrip().startswith("#"))]
    except OSError as error:
        raise MatrixError(f"cannot read {path}: {error.strerror or error}") from None
    except (UnicodeDecodeError, csv.Error) as error:
        raise MatrixError(f"{path} is not a CSV file ({error})") from None
    if not lines:
        raise MatrixError(f"{path} holds no matrix")
    rows = []
    for number, line in enumerate(lines, 1):
        row = []
        for column, cell in enumerate(line, 1):
            try:
                value = float(cell)
            except ValueError:
                raise MatrixError(f"{path}: row {number}, column {column}: '{cell.strip()}' is "
                                  "not a number") from None
            if not math.isfinite(value) or value < 0:
                raise MatrixError(f"{path}: row {number}, column {column}: {cell.strip()} is not "
                                  "a byte count or weight (it must be 0 or more)")
            row.append(value)
        rows.append(row)
    n = len(rows)
    for number, row in enumerate(rows, 1):
        if len(row) != n:
            raise MatrixError(f"{path}: row {number} has {len(row)} entries and the matrix {n} "
                              f"rows; it must be n x n (row = sender, column = receiver)")
    if not any(any(row) for row in rows):
        raise MatrixError(f"{path}: every entry is 0: nothing to send")
    return rows


def parse_skew(text):
    """--a2a-skew's value: ('zipf', S) with S >= 0, or ('hot', K, F) with K >= 1 and F > 1."""
    kind, _, rest = text.partition(":")
    parts = rest.split(":") if rest else []
    try:
        if kind == "zipf" and len(parts) == 1:
            exponent = float(parts[0])
            if math.isfinite(exponent) and exponent >= 0:
                return ("zipf", exponent)
        elif kind == "hot" and len(parts) in (1, 2):
            count = int(parts[0])
            factor = float(parts[1]) if len(parts) == 2 else HOT_FACTOR
            if count >= 1 and math.isfinite(factor) and factor > 1:
                return ("hot", count, factor)
    except ValueError:
        pass
    raise ValueError(f"'{text}' is not a skew: use zipf:S (S >= 0: receiver i of the popularity "
                     "order gets 1/(i+1)^S) or hot:K[:F] (K hot receivers, each getting F "
                     f"times another's share; F > 1, default {HOT_FACTOR:g})")


class Traffic:
    """The weights of who sends what to whom, for any world size n (a file's, for its n only),
    and their integer splits at a size."""

    def __init__(self, matrix=None, source=None, skew=None, seed=0):
        self.file, self.source, self.skew, self.seed = matrix, source, skew, seed
        self._splits = {}

    @classmethod
    def from_args(cls, args):
        path = args.a2a_matrix
        matrix = read_matrix(path) if path else None  # cli checked it: read again, same result
        return cls(matrix, path, args.a2a_skew, args.seed)

    def describe(self):
        if self.file is not None:
            return f"splits from {self.source}"
        if self.skew is None:
            return "splits even"
        text = ":".join(f"{part:g}" if isinstance(part, float) else str(part)
                        for part in self.skew)
        return f"splits {text} (seed {self.seed})"

    def check_world(self, n):
        """A UsageError where this traffic cannot be made for n ranks."""
        if self.file is not None and len(self.file) != n:
            raise UsageError(f"--a2a-matrix {self.source} is {len(self.file)} x {len(self.file)}, "
                             f"for {len(self.file)} ranks; this run's all_to_allv has {n}")
        if self.skew and self.skew[0] == "hot" and self.skew[1] >= n:
            raise UsageError(f"--a2a-skew hot:{self.skew[1]}: {self.skew[1]} hot receivers of {n} "
                             f"ranks leave none cold; use fewer than {n}")

    def weights(self, n):
        """n x n weights, row = sender."""
        if self.file is not None:
            return self.file
        if self.skew is None:
            return [[1.0] * n for _ in range(n)]
        draw = random.Random(self.seed)
        if self.skew[0] == "zipf":
            order = list(range(n))
            draw.shuffle(order)  # order[i]: the receiver i-th in popularity
            row = [0.0] * n
            for place, receiver in enumerate(order):
                row[receiver] = 1.0 / (place + 1) ** self.skew[1]
        else:
            hot = set(draw.sample(range(n), self.skew[1]))
            row = [self.skew[2] if receiver in hot else 1.0 for receiver in range(n)]
        return [list(row) for _ in range(n)]

    def splits(self, numel, n):
        """n x n elements, row = sender: the busiest sender sends `numel`, the others in
        proportion, each row's entries by largest remainders of their share."""
        key = (numel, n)
        if key not in self._splits:
            weights = self.weights(n)
            busiest = max(sum(row) for row in weights)
            result = []
            for row in weights:
                total = round(numel * sum(row) / busiest)
                result.append(_apportion(row, total))
            self._splits[key] = result
        return self._splits[key]

    def busbw_factor(self, n):
        """The busiest rank's bytes to or from other ranks, per byte the busiest sender sends
        (all_to_all's (n - 1)/n when even)."""
        weights = self.weights(n)
        busiest = max(sum(row) for row in weights)
        sent = [sum(row) - row[r] for r, row in enumerate(weights)]
        received = [sum(weights[s][r] for s in range(n)) - weights[r][r] for r in range(n)]
        return max(sent + received) / busiest

    def record(self, numel, n, element_size):
        """The record's fields of one size: bytes each rank sent and received, the busiest
        receiver, the bytes moved between ranks by the busiest one, and (up to 64 ranks) the
        matrix in bytes."""
        splits = self.splits(numel, n)
        sent = [sum(row) * element_size for row in splits]
        received = [sum(splits[s][r] for s in range(n)) * element_size for r in range(n)]
        off_rank = max([s - row[r] * element_size for r, (s, row) in enumerate(zip(sent, splits))]
                       + [got - splits[r][r] * element_size for r, got in enumerate(received)])
        fields = {"a2a": self.describe().removeprefix("splits "),
                  "sent_bytes_per_rank": sent, "received_bytes_per_rank": received,
                  "busiest_receiver": max(range(n), key=lambda r: (received[r], -r)),
                  "busiest_bytes_between_ranks": off_rank}
        if n <= MATRIX_RECORDED:
            fields["matrix_bytes"] = [[count * element_size for count in row] for row in splits]
        return fields

    def fixed_numel(self, element_size):
        """A file of bytes run as written (no --scan): the busiest sender's elements. Raises
        UsageError where an entry is no whole number of elements."""
        for r, row in enumerate(self.file, 1):
            for c, value in enumerate(row, 1):
                if value != int(value) or int(value) % element_size:
                    raise UsageError(
                        f"--a2a-matrix {self.source}: row {r}, column {c}: {value:g} bytes is no "
                        f"whole number of {element_size}-byte elements (without --scan the "
                        "matrix is bytes, as written; with --scan, weights)")
        return int(max(sum(row) for row in self.file)) // element_size


def _apportion(weights, total):
    """`total` split in proportion to `weights`, in integers (largest remainders; ties to the
    lower index)."""
    whole = sum(weights)
    if whole == 0 or total == 0:
        return [0] * len(weights)
    shares = [total * w / whole for w in weights]
    parts = [math.floor(s) for s in shares]
    left = total - sum(parts)
    for index in sorted(range(len(weights)), key=lambda i: (parts[i] - shares[i], i))[:left]:
        parts[index] += 1
    return parts
