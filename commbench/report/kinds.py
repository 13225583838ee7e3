"""Each kind of input report.py is given, said once (KINDS): how it is recognised from the file's
content (and, for a results file, its name), the Run it holds or the one line that says why it
holds none, its section of `report.py html`'s page, and what `report.py compare` and
`report.py plot` do with it. KINDS is in order: a file's kind is the first that recognises it,
so a kind that another's test would also take comes before it (a doctor.py run before any
results file; a document that quotes tables before a saved table).

`kind_of(path)` reads the file once and names its kind; `load_run` and `section_of` are what
the commands read through it (cli.py, html.py); a new kind is one row here (its reader in
runs.py, its section in sections.py; docs/extending.md). Standard library only."""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..records import results
from ..trace import dscomms, formats
from . import doctor, replays, runs, sections
from .runs import ReportError

READS = "report.py reads --output files, saved tables of this suite and nccl-tests output"
UNKNOWN = "neither a results file, a saved table of this suite, nor nccl-tests output"
REPLAYS_IT = ("(replay.py's input), not a results file: `replay.py TRACE_DIR --output "
              "replay.jsonl` replays it into one")


@dataclass(frozen=True)
class Kind:
    name: str
    recognise: Callable  # (path, text) -> bool: text is the whole file, read once
    what: str  # what the file is, as a line names it: "a saved table of this suite"
    run: Callable | None = None  # (path, text) -> runs.Run; None: it holds no run
    refusal: str | None = None  # why it holds no run: "{path}: {refusal}", one line
    # (path, text, read) -> (section, Run or None) (sections.of_*); None: refused, as `run`
    section: Callable | None = None
    # (a, b, noise, format) -> the text `report.py compare A B` prints, A of this kind;
    # None: A and B are runs compared size by size
    compare: Callable | None = None
    # (path, output): how `report.py plot` draws a file of this kind given alone; None: its
    # curves, with those of the other runs given
    plot: Callable | None = None

    def read(self, path, text):
        """The Run in the file, or this kind's one line."""
        if self.run is None:
            raise ReportError(f"{path}: {self.refusal}")
        return self.run(path, text)


# ---------------------------------------------------------------------------- recognisers

def _named_results(path):
    """The results format (.jsonl, .csv, .json) the file's name gives it, or None."""
    try:
        return results.output_format(path)
    except results.ResultsError:
        return None


def _meta(path, text):
    """The meta record commbench.records.results reads in a file named as a results file ({} if
    none), or None: named otherwise, or unreadable as one (not UTF-8 among them: results.read_all
    would fail on it)."""
    named = _named_results(path)
    if named is None or "\ufffd" in text:
        return None
    if named == ".csv":
        return {}  # a .csv has no meta record
    try:
        return results.parse_all(named, text)[0] or {}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _replay(path, text):
    """replay.py --output: its first line is a meta record of kind replay."""
    try:
        first = json.loads(text.partition("\n")[0] if text else "{}")
    except ValueError:
        return False
    return isinstance(first, dict) and first.get("type") == "meta" and \
        first.get("kind") == "replay"


def _head(text):
    return text.lstrip()[:512].lower()


def _html(text):
    return _head(text).startswith(("<!doctype html", "<html"))


def _report_page(path, text):
    return _html(text) and "<title>commbench report" in _head(text)


def _image(path, text):
    head = _head(text)
    return "png" in head[:5] or head.startswith(("%pdf", "<svg", "<?xml"))


def _document(test):
    """A recogniser of a JSON document by `test(document)`."""
    return lambda path, text: test(runs.json_document(text))


def _param_trace(document):
    """A PARAM basic trace's rank file (formats.is_param_basic); an empty list alone names no
    format."""
    return bool(document) and formats.is_param_basic(document)


def _meta_says(key, value):
    """A recogniser of a results file whose meta record has `key` `value`."""
    return lambda path, text: (_meta(path, text) or {}).get(key) == value


def _tables(text):
    return "---- Performance of" in text


def _quoted_tables(path, text):
    """A document (README.md, a docs page) that quotes the suite's tables in code blocks."""
    return _tables(text) and re.search(r"^\s*```", text, re.M) is not None


def _nccl_tests(path, text):
    return re.search(r"^\s*#\s*size\s+count\s+type", text, re.M) is not None or \
        re.search(r"^#.*(nccl-tests|Collective test starting)", text, re.M | re.I) is not None


# ---------------------------------------------------------------------------- what they do

def _as_results(path, text):
    """A replay holds no run of sizes: read as the results file its name says it is (whose line
    says what it lacks), or a file of no kind."""
    if _named_results(path) is None:
        raise ReportError(f"{path}: {UNKNOWN}")
    return runs.from_results(path, text)


def _of_logger(path, text, read):
    """DeepSpeed's logger summary: its figures, as a saved table's (whatever it is named: the
    docs save it as rank0.json, which html once refused as a results file without a meta)."""
    run = read(path, text)
    return sections.text_section(path, run, "DeepSpeed's comms logger, one rank's "
                                 "log_summary(return_dict=True)"), run


def _compare_replays(a, b, noise, form):
    """Two replays of one trace, call by call (replays.py); B must be a replay too."""
    if not _is_a(b, "replay"):
        raise ReportError(f"{a} is a replay (replay.py --output) and {b} is not: compare two "
                          "replays of one trace")
    return replays.render(replays.compare(a, b, noise), form)


def _is_a(path, name):
    try:
        return kind_of(path).name == name
    except ReportError:
        return False


KINDS = (
    Kind("replay", _replay, "a replay.py run", run=_as_results, section=sections.of_replay,
         compare=_compare_replays),
    Kind("deepspeed-logger", _document(dscomms.is_summary), "DeepSpeed's comms logger summary",
         run=runs.from_deepspeed_logger, section=_of_logger),
    Kind("deepspeed-raw", _document(dscomms.is_raw), "DeepSpeed's comms logger raw data",
         refusal="DeepSpeed's get_raw_data() keeps no world size: save "
                 "log_summary(return_dict=True) for report.py (replay.py reads both)"),
    Kind("report-page", _report_page, "a page report.py html wrote",
         refusal="a page report.py html wrote, not a results file: give the runs it shows"),
    Kind("html-page", lambda path, text: _html(text), "an HTML page",
         refusal=f"an HTML page, not a results file ({READS})"),
    Kind("image", _image, "an image or a PDF",
         refusal=f"an image or a PDF, not a results file ({READS})"),
    Kind("commbench-trace", _document(formats.is_commbench), "a trace of commbench.trace.record",
         refusal=f"a trace of commbench.trace.record {REPLAYS_IT}"),
    Kind("execution-trace", _document(formats.is_execution_trace), "a PyTorch execution trace",
         refusal=f"a PyTorch execution trace {REPLAYS_IT}"),
    Kind("param-trace", _document(_param_trace), "a PARAM basic comms trace",
         refusal=f"a PARAM basic comms trace {REPLAYS_IT}"),
    Kind("doctor", _meta_says("ops", ["doctor"]), "a doctor.py run",
         section=sections.of_doctor, plot=doctor.heatmap,
         refusal="a doctor.py run (hosts and links, not sizes): `report.py plot` draws its "
                 "heatmaps"),
    Kind("strategies", _meta_says("kind", "strategies"), "a parallel_bench.py run",
         run=runs.from_results, section=sections.of_strategies),
    Kind("results", lambda path, text: _named_results(path) is not None, "a results file",
         run=runs.from_results, section=sections.of_results),
    Kind("quoted-tables", _quoted_tables, "a document that quotes tables",
         refusal="a document that quotes tables (in markdown code blocks), not a saved table "
                 "of this suite; give a run's own stdout (> results.txt) or its --output file"),
    Kind("table", lambda path, text: _tables(text), "a saved table of this suite",
         run=runs.from_table, section=sections.of_printed),
    Kind("nccl-tests", _nccl_tests, "nccl-tests output",
         run=runs.from_nccl_tests, section=sections.of_printed),
)


KIND_WHAT = {kind.name: kind.what for kind in KINDS}

# ---------------------------------------------------------------------------- reading a file

def identify(path):
    """(Kind, text): the file read once, and the first kind in KINDS that recognises it; one
    line for a file that cannot be read or that no kind recognises."""
    try:
        with open(path, errors="replace") as handle:
            text = handle.read()
    except OSError as error:
        raise ReportError(f"cannot read {path}: {error.strerror}") from None
    for kind in KINDS:
        if kind.recognise(path, text):
            return kind, text
    raise ReportError(f"{path}: {UNKNOWN}")


def kind_of(path):
    """The Kind of the file at `path` (ReportError, one line: unreadable, or of no kind)."""
    return identify(path)[0]


def load_run(path):
    """The Run in `path`, or the one line that says why it holds none."""
    kind, text = identify(path)
    return kind.read(path, text)


def records_of(path, command, kinds, reads=None):
    """For the commands that read a file's records rather than its Run (trials, buckets,
    strategy --measured): one line, naming what the file is and what the command `reads`,
    unless it is of one of `kinds` (whose records the command then judges itself)."""
    kind, text = identify(path)
    if kind.name == "results":  # named as one: it must read as one
        try:
            results.parse_all(_named_results(path), text)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            why = str(error).splitlines()[0] if str(error) else ""
            raise ReportError(f"{path}: not a results file of this suite "
                              f"({type(error).__name__}: {why})") from None
    if kind.name not in kinds:
        reads = reads or " or ".join(KIND_WHAT[name] for name in kinds)
        raise ReportError(f"{path}: {kind.what}, not what `report.py {command}` reads ({reads})")


def section_of(path):
    """(section of report.py html's page, Run or None) of `path`."""
    kind, text = identify(path)
    if kind.section is None:
        raise ReportError(f"{path}: {kind.refusal}")
    return kind.section(path, text, kind.read)
