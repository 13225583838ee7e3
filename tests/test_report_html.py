"""report.py html: the page opened in a real browser (Debian's headless Chromium) for one run,
two runs, a run with --groups and a parallel_bench.py run: no console message, no request
leaving the file, its tables' figures those of the results file, a screenshot that is not
blank; and a broken or empty input is one line, exit 1, nothing left behind."""

import math
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from html.parser import HTMLParser

import pytest

from support import ROOT, launch

# Chromium's own background requests (its clock, component updates, sign-in) go through the
# proxy too; they are Google's hosts, never the page's.
CHROMIUMS_OWN = re.compile(r"(^|\.)(google\.com|googleapis\.com|gvt1\.com|gstatic\.com)$")


def chromium():
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        why = "no chromium here (scripts/test-services.sh up installs Debian's, as root)"
        if os.environ.get("COMMBENCH_REQUIRE_LAUNCHERS"):
            pytest.fail(why)
        pytest.skip(why)
    return found


class Proxy:
    """A listening socket every request of the browser is sent to (--proxy-server): what
    arrives is what left the page. A connection that sends no byte is no request: Chromium
    may open one ahead of need and close it unused (the CI run of 05b8b6b saw one)."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(64)
        self.port = self.socket.getsockname()[1]
        self.requests, self._readers = [], []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            reader = threading.Thread(target=self._read, args=(connection,), daemon=True)
            self._readers.append(reader)
            reader.start()

    def _read(self, connection):
        with connection:
            connection.settimeout(60)  # the browser has exited well before this
            try:
                sent = connection.recv(512)
            except OSError:
                sent = b"? (open, nothing sent in 60 s)"
            if sent:
                self.requests.append(sent.decode(errors="replace").split("\r\n")[0])

    def the_pages(self):
        """Requests not Chromium's own: (method, host) of each."""
        found = []
        for line in self.requests:
            parts = line.split()
            target = parts[1] if len(parts) > 1 else line
            host = re.sub(r"^\w+://", "", target).split("/")[0].split(":")[0]
            if not CHROMIUMS_OWN.search(host):
                found.append(line)
        return found

    def close(self):
        """Stop listening; wait for what the connections already made have sent."""
        self.socket.close()
        for reader in list(self._readers):
            reader.join(timeout=65)


class Tables(HTMLParser):
    """Every <table> of a page: its attributes and rows of (text, data-value) cells."""

    def __init__(self):
        super().__init__()
        self.tables, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append({"attrs": attrs, "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = ["", attrs.get("data-value")]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[0] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1]["rows"][-1].append((self._cell[0].strip(), self._cell[1]))
            self._cell = None


def browse(page, tmp_path):
    """(the DOM Chromium built, its console lines, the page's requests, the screenshot)."""
    browser, proxy = chromium(), Proxy()
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              f"--proxy-server=http://127.0.0.1:{proxy.port}", "--proxy-bypass-list=<-loopback>",
              "--enable-logging=stderr", "--v=0", "--no-first-run",
              "--window-size=1280,2400", "--virtual-time-budget=3000"]
    url = f"file://{page}"
    shot = tmp_path / f"{page.stem}.png"
    try:  # one browser for both: the DOM on stdout and the screenshot, of the same page load
        opened = subprocess.run(common + ["--dump-dom", f"--screenshot={shot}", url],
                                capture_output=True, text=True, timeout=120)
    finally:
        proxy.close()
    console = [line for line in opened.stderr.splitlines() if ":CONSOLE" in line]
    assert opened.returncode == 0 and shot.exists(), opened.stderr[-2000:]
    assert "<html" in opened.stdout, opened.stdout[:2000]
    return opened.stdout, console, proxy.the_pages(), shot


def not_blank(png):
    import matplotlib.image
    pixels = matplotlib.image.imread(str(png))
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    return float(pixels.std()) > 0.05 and (pixels < 0.5).mean() > 0.005  # ink, not a white page


def html(*paths, output):
    return subprocess.run([sys.executable, "report.py", "html", *map(str, paths), "-o",
                           str(output)], cwd=ROOT, capture_output=True, text=True, timeout=300)


def opened(page, tmp_path):
    """Open `page`; the checks every page passes; its tables."""
    dom, console, requests, shot = browse(page, tmp_path)
    assert console == [], console
    assert requests == [], requests
    assert not_blank(shot), shot
    parser = Tables()
    parser.feed(dom)
    return dom, parser.tables


def final_records(path):
    sys.path.insert(0, str(ROOT))
    from commbench.records import results
    _, records = results.read(str(path))
    return results.final(records)


def results_of(path):
    """{op: {size: duration}} from the results file's final records."""
    figures = {}
    for record in final_records(path):
        figures.setdefault(record["op"], {})[record["size_bytes"]] = record["duration_s"]
    return figures


def shown_in_order(tables):
    """[(op key, {size: duration})] of the page's result tables, in page order (their
    data-value cells: the figures in full)."""
    found = []
    for table in tables:
        if table["attrs"].get("class") != "results":
            continue
        heads = [text for text, _ in table["rows"][0]]
        size, duration = heads.index("Size"), heads.index("Duration")
        found.append((table["attrs"]["data-op"], {int(row[size][1]): float(row[duration][1])
                                                  for row in table["rows"][1:]}))
    return found


def shown(tables):
    return dict(shown_in_order(tables))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("html-runs")
    made = {}
    for name, args in (("gloo", ["--backend=gloo", "--check", "--stats", "--repeat=3"]),
                       ("ccl", ["--backend=ccl", "--repeat=3"]),
                       ("groups", ["--backend=gloo", "--groups=world,intra"])):
        path = folder / f"{name}.jsonl"
        result = launch("run_all.py", "--scan", "--maxsize=12", "--trials=5", "--dist=torch",
                        *args, f"--output={path}", nproc=2)
        assert result.returncode == 0, result
        made[name] = path
    path = folder / "strategies.jsonl"
    # No ZeRO: the page has nothing of its own for it, and DeepSpeed's engine costs 4 s of CPU
    result = launch("parallel_bench.py", "--strategy=ddp,tp,pp", "--steps=1", "--warmup=0",
                    "--hidden=32", "--layers=2", "--heads=2", "--vocab=64", "--seq=8",
                    "--micro-batch=2", "--micro-batches=2", f"--output={path}", nproc=2)
    assert result.returncode == 0, result
    made["strategies"] = path
    return made


def test_the_checks_catch_what_they_look_for(tmp_path):
    """A page that asks the network for an image and writes to the console: both seen."""
    page = tmp_path / "control.html"
    page.write_text('<!DOCTYPE html><html><body><p>control</p>'
                    '<img src="http://example.invalid/x.png">'
                    '<script>console.error("written")</script></body></html>')
    _, console, requests, shot = browse(page, tmp_path)
    assert any('"written"' in line for line in console), console
    assert any("example.invalid" in line for line in requests), requests
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    assert not not_blank(browse(blank, tmp_path)[3])


def test_one_run(runs, tmp_path):
    page, db = tmp_path / "one.html", tmp_path / "results.db"
    sys.path.insert(0, str(ROOT))
    from commbench.records.db import store as stores
    store = stores.Store(str(db))  # report.py import's own step, in-process
    stores.import_file(store, str(runs["gloo"]))
    store.close()
    made = html(runs["gloo"], "--db", db, output=page)
    assert made.returncode == 0, made.stderr
    assert re.search(rf"wrote {re.escape(str(page))} \([\d.]+ (KiB|MiB)\)", made.stderr)
    dom, tables = opened(page, tmp_path)
    assert shown(tables) == results_of(runs["gloo"])  # every op, size and duration
    assert set(shown(tables)) == {"all_reduce", "all_gather", "all_to_all", "reduce_scatter",
                                  "pt2pt", "broadcast"}
    first = next(t for t in tables if t["attrs"].get("class") == "results")  # the first op's
    heads = [text for text, _ in first["rows"][0]]
    for column in ("95% interval", "Median", "P99", "Slowest rank", "Wrong"):
        assert column in heads, heads
    for what in ("run_all.py --scan", "torch.distributed", "gloo, cpu", "2 ranks on 1 host",
                 "How to read it", "BusBW"):
        assert what in dom, what
    assert dom.count("<svg") == 2  # the curves and the history, text as text
    assert "<script" not in open(page).read()
    # --db: the history section, the run's figure per band (small: the geometric mean of the
    # sizes' durations) and its verdict
    history = {t["attrs"]["data-series"]: t["rows"][1:] for t in tables
               if t["attrs"].get("class") == "history"}
    key = next(k for k in history if k.startswith("all_reduce float32 sum") and "small" in k)
    durations = [d for size, d in results_of(runs["gloo"])["all_reduce"].items() if size < 65536]
    (row,) = history[key]
    assert float(row[2][1]) == pytest.approx(math.exp(sum(map(math.log, durations))
                                                      / len(durations)), rel=1e-6)
    assert "no change claimed: 1 run is too few to judge one (it takes 10)" in dom


@pytest.fixture(scope="module")
def two_runs_page(runs, tmp_path_factory):
    """The gloo run against the ccl run on one page, opened once, which two tests read: the
    gloo run's results file as the deepspeed launcher's rank 0 writes it (its command with
    `--local_rank=0`), its records the run's own."""
    import json
    folder = tmp_path_factory.mktemp("two-runs")
    launched = folder / "launched.jsonl"
    lines = runs["gloo"].read_text().splitlines()
    meta = json.loads(lines[0])
    meta["command"][2:2] = ["--local_rank=0"]
    launched.write_text("\n".join([json.dumps(meta)] + lines[1:]) + "\n")
    page = folder / "answer.html"
    made = html(launched, runs["ccl"], output=page)
    assert made.returncode == 0, made.stderr
    return opened(page, folder)


def test_two_runs_show_the_verdicts(runs, two_runs_page):
    dom, tables = two_runs_page
    compared = [t for t in tables if t["attrs"].get("class") == "compare"]
    assert {t["attrs"]["data-op"] for t in compared} == set(results_of(runs["gloo"]))
    assert dom.count('class="verdict"') >= 6
    assert re.search(r"all_reduce: torch\.distributed ccl n=2: .*messages", dom)
    assert "95% interval of B/A" in dom
    gloo, ccl = results_of(runs["gloo"]), results_of(runs["ccl"])
    for table in compared:
        op = table["attrs"]["data-op"]
        for row in table["rows"][1:]:
            size = int(row[0][1])
            assert float(row[1][1]) == gloo[op][size] and float(row[2][1]) == ccl[op][size]
    sections = shown_in_order(tables)
    assert dict(sections[:6]) == gloo and dict(sections[6:]) == ccl
    assert dom.count("<svg") == 1  # both runs' curves overlaid in one figure


def test_a_run_with_groups(runs, tmp_path):
    page = tmp_path / "groups.html"
    made = html(runs["groups"], output=page)
    assert made.returncode == 0, made.stderr
    dom, tables = opened(page, tmp_path)
    assert "Layouts side by side" in dom
    layouts = [t for t in tables if t["attrs"].get("class") == "layouts"]
    assert layouts and all("intra duration" in [c for c, _ in t["rows"][0]] for t in layouts)
    page_figures = sorted((size, duration) for _, figures in shown_in_order(tables)
                          for size, duration in figures.items())
    file_figures = sorted((r["size_bytes"], r["duration_s"]) for r in final_records(runs["groups"]))
    assert page_figures == file_figures  # the world's and the intra layout's, each
    assert {"all_reduce", "all_reduce intra"} <= set(shown(tables))


def test_a_strategies_run(runs, tmp_path):
    page = tmp_path / "strategies.html"
    made = html(runs["strategies"], output=page)
    assert made.returncode == 0, made.stderr
    dom, tables = opened(page, tmp_path)
    table = next(t for t in tables if t["attrs"].get("data-op") == "strategies")
    assert [row[0][0] for row in table["rows"][1:]] == ["ddp", "tp", "pp"]
    import json
    records = [json.loads(line) for line in open(runs["strategies"])][1:]
    for row, record in zip(table["rows"][1:], records):
        assert float(row[1][1]) == record["step_time_s"]["median"]
    assert "parallel_bench.py" in dom


def test_pages_of_saved_output_and_overlap_runs(tmp_path):
    """No browser: nccl-tests' text (what it printed) and an --overlap run (its column)."""
    fixtures = ROOT / "tests" / "fixtures"
    page = tmp_path / "fixtures.html"
    made = html(fixtures / "all_reduce_perf.txt", fixtures / "all_reduce_overlap.jsonl",
                output=page)
    assert made.returncode == 0, made.stderr
    parser = Tables()
    parser.feed(page.read_text())
    overlap = [t for t in parser.tables if t["attrs"].get("class") == "results"
               and "Overlap %" in [text for text, _ in t["rows"][0]]]
    assert overlap, "the --overlap run's column"
    records = final_records(fixtures / "all_reduce_overlap.jsonl")
    column = [text for text, _ in overlap[0]["rows"][0]].index("Overlap %")
    assert [float(row[column][1]) for row in overlap[0]["rows"][1:]] == \
        [r["overlap"]["overlap_pct"] for r in sorted(records, key=lambda r: r["size_bytes"])]
    assert "The runs compared" in page.read_text()  # nccl-tests against the suite's run


@pytest.mark.parametrize("content", ["", "{\"type\": \"meta\", \"ops\": [\"all_reduce\"]}\n",
                                     "{not json\n", None])
def test_a_broken_input_is_one_line_and_nothing_left(tmp_path, content):
    source = tmp_path / "broken.jsonl"
    if content is not None:
        source.write_text(content)
    page = tmp_path / "out" / "report.html"
    page.parent.mkdir()
    made = html(source, output=page)
    assert made.returncode == 1, made
    lines = made.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("report.py: error: "), made.stderr
    assert "Traceback" not in made.stderr
    assert list(page.parent.iterdir()) == []


def _between(dom, start, end):
    return dom[dom.index(start):dom.index(end)]


def test_the_page_leads_with_the_answer(runs, two_runs_page):
    """Issue 36, 5: the summary first (each run's peak BusBW and small-message latency per op,
    the results file's), then what ran (the command as typed, without the launcher's
    --local_rank), the curves, the tables; a contents list; the legend last."""
    dom, tables = two_runs_page
    sections = re.findall(r'<h2 id="([\w-]+)"', dom)
    assert sections == ["summary", "runs", "curves", "comparison", "tables-1", "tables-2",
                        "reading"], sections
    contents = _between(dom, 'id="contents"', "</nav>")
    assert re.findall(r'href="#([\w-]+)"', contents) == sections
    # the first screen: nothing before the summary but the title, one line and the contents
    before = re.sub(r"<[^>]+>", "", dom[dom.index("<body"):dom.index('id="summary"')])
    assert len(before.split()) < 80 and "<table" not in dom[:dom.index('id="summary"')]
    summary = next(t for t in tables if t["attrs"].get("class") == "summary")
    assert dom.index('class="summary"') < min(dom.index('class="results"'), dom.index("<svg"),
                                              dom.index('class="compare"'),
                                              dom.index('class="legend"'))
    heads = [text for text, _ in summary["rows"][0]]
    assert heads[:5] == ["op", "A: peak BusBW (Gbps)", "A: at", "A: latency", "A: at"]
    for side, path in ((0, runs["gloo"]), (1, runs["ccl"])):
        records = {}
        for record in final_records(path):
            records.setdefault(record["op"], []).append(record)
        for row in summary["rows"][1:]:
            peak, at, latency, smallest = row[1 + 4 * side:5 + 4 * side]
            mine = records[row[0][0]]
            best = max(mine, key=lambda r: r["busbw_Bps"])
            least = min(mine, key=lambda r: r["size_bytes"])
            assert (float(peak[1]), int(at[1])) == (best["busbw_Bps"], best["size_bytes"])
            assert (float(latency[1]), int(smallest[1])) == (least["duration_s"],
                                                             least["size_bytes"])
        assert {row[0][0] for row in summary["rows"][1:]} == set(records)
    assert re.search(r"<code>python3? run_all\.py --scan --maxsize=12 ", dom)
    assert "local_rank" not in dom and "local-rank" not in dom


def test_sizes_in_one_run_and_a_verdict_on_few_sizes(tmp_path):
    """Issue 36, 5: A to 2 MB, B to 1 MB: where the verdict is (the summary and the op's
    table), the sizes only in A, and the large-message verdict resting on 1 size."""
    made = {}
    for name, largest in (("a", "2M"), ("b", "1M")):
        made[name] = tmp_path / f"{name}.jsonl"
        result = launch("run_all.py", "--all-reduce", "--min-bytes=256K", f"--max-bytes={largest}",
                        "--trials=3", "--dist=torch", "--backend=gloo",
                        f"--output={made[name]}", nproc=2)
        assert result.returncode == 0, result
    page = tmp_path / "sizes.html"
    result = html(made["a"], made["b"], output=page)
    assert result.returncode == 0, result.stderr
    text = page.read_text()
    for where in (_between(text, 'id="summary"', 'id="runs"'),
                  _between(text, 'id="comparison"', 'class="compare"')):
        assert "no verdict: one window a run" in where and "B/A" in where, where
        assert '<div class="note">sizes only in A (not compared): 2 MiB</div>' in where
        assert ('<div class="note">the large-message verdict rests on 1 size: 1 MiB '
                '(fewer than 3)</div>') in where
        assert "only in B" not in where
