"""Result files for programs: `.jsonl`, `.csv` or `.json`, chosen by the extension.

Rank 0 writes. Every record is on disk (fsynced, and for `.json` atomically replaced) as
soon as its message size is measured, so a run that dies keeps every completed size. A write
that fails (a full disk) never leaves half a record: `.jsonl` and `.csv` are cut back to the
last whole record, `.json` keeps its last whole document. Standard library only.
"""

import contextlib
import csv
import io
import json
import os

from ..errors import BenchmarkError

FORMATS = (".jsonl", ".csv", ".json")

# The columns of a .csv file, in order; nested figures are flattened to these names.
CSV_FIELDS = (
    "op", "dist", "backend", "device", "dtype", "reduce_op", "world_size", "groups", "group",
    "group_ranks", "size_bytes", "numel",
    "element_size", "window", "warmup", "repeat", "trials", "duration_s", "ci95_low_s",
    "ci95_high_s",
    "precision", "precision_reached", "precision_met", "throughput_Bps", "busbw_Bps", "wrong",
    "min_s", "median_s", "p99_s", "max_s", "cv", "slowest_rank", "slowest_host", "comm_s",
    "compute_s", "total_s",
    "overlap_pct", "durations_per_rank_s",
    "trials_per_rank", "memory_used_per_rank_bytes",
    # docs/traffic.md: --split's aggregate, --check-every, all_to_allv, pt2pt's pairs
    "aggregate", "checked_duration_s", "first_wrong_trial", "first_wrong_rank",
    "first_wrong_element", "a2a", "busiest_receiver", "sent_bytes_per_rank",
    "received_bytes_per_rank", "pairs_mode", "bidirectional", "message_rate_per_s",
    # --peak (docs/peak.md): the row's bound and the share of it its busbw reaches
    "bound_kind", "bound_name", "bound_gbps", "bound_source", "peak_fraction",
)
# Per-rank lists, written to a .csv cell as space-separated figures ("-" for none).
CSV_LISTS = ("durations_per_rank_s", "trials_per_rank", "memory_used_per_rank_bytes",
             "group_ranks", "sent_bytes_per_rank", "received_bytes_per_rank")


class ResultsError(BenchmarkError):
    """The results path cannot be written."""


def _write_failed(path, error, records):
    return ResultsError(f"cannot write results to {path}: {error.strerror or error}; it holds "
                        f"the {records} whole record{'' if records == 1 else 's'} written before; "
                        "stopping (every size measured is in the table)")


def output_format(path):
    """The format of `path` by its extension; `r.jsonl.2` (see free_path) is a .jsonl file."""
    stem, extension = os.path.splitext(path)
    if extension[1:].isdigit():
        extension = os.path.splitext(stem)[1]
    extension = extension.lower()
    if extension not in FORMATS:
        raise ResultsError(f"--output {path}: the extension must be one of {', '.join(FORMATS)}")
    return extension


def free_path(path, overwrite, formats=FORMATS):
    """`path`, or when it exists and `overwrite` is off, the first free `path.1`, `path.2`, ...
    (earlier results are never destroyed by accident). `formats`: the extensions it may have
    (None: any, for a command's own JSON lines)."""
    if os.path.isdir(path):
        raise ResultsError(f"--output {path} is a directory; give a file name" +
                           (f" ending in {' or '.join(formats)}" if formats else ""))
    if formats:
        output_format(path)
    if overwrite or not os.path.exists(path):
        return path
    number = 1
    while os.path.exists(f"{path}.{number}"):
        number += 1
    return f"{path}.{number}"


def written_elsewhere(asked, path):
    """The line for a run's end, after its tables, when its results went to `path` and not to
    the path asked for (which existed: the run wrote PATH.N beside it); None when they did not.
    A line before the tables is easily lost in a long run's output."""
    if not asked or path == asked:
        return None
    return (f"results written to {path}, not to {asked}: {asked} was there before this run and "
            "is kept (--overwrite replaces it)")


def open_writer(path, meta):
    """A writer for `path` whose meta record is already on disk; raises ResultsError when the
    path cannot be written (checked before anything is measured)."""
    kind = output_format(path)
    try:
        writer = {".json": JsonWriter, ".jsonl": JsonlWriter, ".csv": CsvWriter}[kind](path)
        writer.start(meta)
    except OSError as error:
        raise ResultsError(f"--output {path} cannot be written: {error.strerror}") from None
    return writer


class _WholeRecords:
    """An append-only file that only ever ends in a whole record: each record is written and
    fsynced at once, and a write that fails (also a short one, also an fsync that reports a
    full disk late) is cut back off before the error is raised."""

    def __init__(self, path):
        self.path = self.asked = path  # open_lines: `asked` the path asked for (path: PATH.N)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        self._end = 0
        self.records = 0  # result records on disk

    def append(self, text, is_result=True):
        data = text.encode()
        try:
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
            os.fsync(self._fd)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._end)
                os.lseek(self._fd, self._end, os.SEEK_SET)
            if not is_result:
                raise  # the meta record or header: open_writer says the file cannot be written
            raise _write_failed(self.path, error, self.records) from None
        self._end += len(data)
        self.records += is_result

    def close(self):
        os.close(self._fd)


class LinesWriter(_WholeRecords):
    """A command's own JSON lines (replay.py's, parallel_bench.py's: its records as they are,
    each with its own type), by the results file's rules: each line whole and on disk as it is
    written. A write that fails raises its OSError, the file cut back to its last whole line."""

    def write(self, record):
        self.append(json.dumps(record) + "\n", is_result=False)

    def write_many(self, records):
        """Many lines at once, on disk together (one fsync: a replay's thousands of calls)."""
        self.append("".join(json.dumps(record) + "\n" for record in records), is_result=False)


def open_lines(path, overwrite, meta, formats=None):
    """Rank 0's LinesWriter at `path`, or at its first free `path.N` unless `overwrite` (the
    rule of every results file of the suite), its first line `meta` already on disk (its
    `path` says where); raises OSError, or ResultsError for a path no file can be."""
    writer = LinesWriter(free_path(path, overwrite, formats))
    writer.asked = path
    try:
        writer.write(meta)
    except OSError:
        writer.close()
        raise
    return writer


class JsonlWriter(_WholeRecords):
    """One JSON object a line: the meta record, then one record per measured size."""

    def start(self, meta):
        self.append(json.dumps({"type": "meta", **meta}) + "\n", is_result=False)

    def add(self, record):
        self.append(json.dumps({"type": "result", **record}) + "\n")

    def add_failure(self, record):
        """A run that ends on a failure (--timeout's line: who did not come)."""
        self.append(json.dumps({"type": "failure", **record}) + "\n", is_result=False)


class CsvWriter(_WholeRecords):
    """A header, then one row per measured size (the run's settings repeated on each row)."""

    def _row(self, write):
        line = io.StringIO(newline="")
        write(csv.DictWriter(line, fieldnames=CSV_FIELDS, extrasaction="ignore"))
        return line.getvalue()

    def start(self, meta):
        self._meta = meta
        self.append(self._row(lambda writer: writer.writeheader()), is_result=False)

    def add(self, record):
        row = {key: self._meta.get(key) for key in ("dist", "backend", "device", "dtype")}
        row.update(record)
        row.update(record.get("stats") or {})
        row.update(record.get("overlap") or {})
        if record.get("ci95_s"):
            row["ci95_low_s"], row["ci95_high_s"] = record["ci95_s"]
        for key, value in (record.get("first_wrong") or {}).items():
            row[f"first_wrong_{key}"] = value
        for key in ("kind", "name", "gbps", "source"):
            row[f"bound_{key}"] = (record.get("bound") or {}).get(key)
        for key in CSV_LISTS:
            row[key] = " ".join("-" if x is None else repr(x) for x in record.get(key, ()))
        self.append(self._row(lambda writer: writer.writerow(
            {k: ("" if v is None else v) for k, v in row.items()})))


class JsonWriter:
    """One document {"meta": ..., "results": [...]}, replaced atomically after each size."""

    def __init__(self, path):
        self.path, self._document = path, None  # rewritten whole, through a temporary beside it

    def start(self, meta):
        self._document = {"meta": meta, "results": []}
        self._replace()

    def add(self, record):
        self._document["results"].append(record)
        try:
            self._replace()
        except OSError as error:
            self._document["results"].pop()  # the file on disk still holds the document without it
            raise _write_failed(self.path, error, len(self._document["results"])) from None

    def _replace(self):
        temporary = f"{self.path}.tmp{os.getpid()}"
        try:
            with open(temporary, "w") as handle:
                json.dump(self._document, handle, indent=1)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(temporary)
            raise

    def close(self):
        pass


def read(path):
    """(meta, records) from a results file of any of the three formats: the measured sizes
    (records of other kinds, doctor.py's, are left to read_all)."""
    meta, records = read_all(path)
    if output_format(path) == ".jsonl":  # every line says its type
        return meta, [r for r in records if r.get("type") == "result"]
    # a document's results and a table's rows carry no type of their own
    return meta, [r for r in records if r.get("type", "result") == "result"]


def read_all(path):
    """(meta, every record) of a results file, whatever its type (result, doctor, verdict)."""
    kind = output_format(path)
    with open(path, newline="" if kind == ".csv" else None) as handle:
        return parse_all(kind, handle.read())


def parse_all(kind, text):
    """(meta, every record) of a results file's text (read_all), its format `kind` an extension
    of FORMATS: for a reader that has read the file already (report.py's kinds)."""
    if kind == ".json":
        document = json.loads(text)
        return document["meta"], document["results"]
    if kind == ".jsonl":
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        meta = next((line for line in lines if line.get("type") == "meta"), {})
        return meta, [line for line in lines if line.get("type") != "meta"]
    rows = list(csv.DictReader(io.StringIO(text)))
    return {}, [_typed_csv_row(row) for row in rows]


def _typed_csv_row(row):
    integers = ("world_size", "size_bytes", "numel", "element_size", "trials", "wrong",
                "slowest_rank", "window", "repeat", "group", "busiest_receiver")
    floats = ("duration_s", "throughput_Bps", "busbw_Bps", "min_s", "median_s", "p99_s", "max_s",
              "cv", "comm_s", "compute_s", "total_s", "overlap_pct", "ci95_low_s", "ci95_high_s",
              "precision", "precision_reached", "checked_duration_s", "message_rate_per_s",
              "peak_fraction")
    typed = dict(row)
    if row.get("first_wrong_trial"):
        typed["first_wrong"] = {key: int(row[f"first_wrong_{key}"])
                                for key in ("trial", "rank", "element")}
    for key in ("warmup", "precision_met", "aggregate", "bidirectional"):
        typed[key] = {"True": True, "False": False}.get(row.get(key))
    if row.get("bound_kind"):
        typed["bound"] = {"kind": row["bound_kind"], "name": row["bound_name"],
                          "gbps": float(row["bound_gbps"]) if row["bound_gbps"] else None,
                          "source": row["bound_source"]}
    if row.get("ci95_low_s"):
        typed["ci95_s"] = [float(row["ci95_low_s"]), float(row["ci95_high_s"])]
    for key in integers:
        typed[key] = int(row[key]) if row.get(key) else None
    for key in floats:
        typed[key] = float(row[key]) if row.get(key) else None
    for key, kind in zip(CSV_LISTS, (float, int, int, int, int, int)):
        typed[key] = [None if x == "-" else kind(x) for x in (row.get(key) or "").split()]
    typed["groups"] = row.get("groups") or None
    typed["pairs_mode"] = row.get("pairs_mode") or None  # a cell left empty: not a pt2pt's
    return typed


def series(record):
    """What a record is a figure of: op, dtype, --groups layout and group, size."""
    return (record.get("op"), record.get("dtype"), record.get("groups"), record.get("group"),
            record.get("size_bytes"))


def final(records):
    """The results of a run, one per op, dtype, group and size: the whole record of each size, or
    where a run ended before --repeat's last pass, the last window recorded of it."""
    whole = {series(r) for r in records if r.get("window") is None}
    latest = {}
    for r in records:
        key = series(r)
        if r.get("window") is None or key not in whole:
            latest[key] = r
    return list(latest.values())


def windows(records):
    """{series(record): [seconds of each window]} from --repeat's records: the whole record's
    list, or for a run that ended early, the windows recorded one by one."""
    found = {}
    for r in records:
        key = series(r)
        if r.get("windows_s"):
            found[key] = [float(w) for w in r["windows_s"]]
        elif r.get("window") is not None and not r.get("warmup") and key not in found:
            found.setdefault(("partial",) + key, []).append(float(r["duration_s"]))
    for key in [k for k in found if k[0] == "partial"]:
        values = found.pop(key)
        found.setdefault(key[1:], values)
    return found
