"""How well report.py history finds a change, and how fast it answers (docs/history.md).

1. Detection: series of 100 runs whose run-to-run noise is that of real repeated runs of one
   command here (each run's band figure over the median of its series, drawn with replacement),
   200 series with a drop of 10% after run 50 and 200 without; per noise source, in how many
   the change is found within 2 runs of run 50, and in how many without one a change is claimed.
2. Speed: a database of 1,000 runs of 200 rows each (SQLite), and `report.py history` over it,
   the whole command timed, best of 3.

  .venv/bin/python benchmarks/history.py                       # each noise in benchmarks/data/
  .venv/bin/python benchmarks/history.py --noise-db results/commbench.db   # another database's
  .venv/bin/python benchmarks/history.py --noise-db DB --save-noise NAME --source "..."
                                                      # ... kept as data/history-noise-NAME.json

The model (commbench/records/db/power.py) is the one report.py history states a "no change"'s power
by: the smallest step it finds within 2 runs in 95% of series drawn from the series' own noise.

The noise file holds, per series of a database of repeated runs, each run's figure over the
series' median (no figures of its own: they come from the runs named in its "source").
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from commbench.records.db import history, store as stores  # noqa: E402
from commbench.records.db.power import detection  # noqa: E402  (the model report.py history states)

NOISE = ROOT / "benchmarks" / "data" / "history-noise.json"


def noise_from(where):
    store = stores.Store(where)
    try:
        found = {}
        for series in history.load(store):
            if len(series.values) >= 10:
                values = numpy.asarray(series.values)
                found[history_title(series)] = list(values / numpy.median(values))
        return found
    finally:
        store.close()


def history_title(series):
    from commbench.report.history import title
    return title(series)


def detect(series, args, rng):
    """Detection at one source's noise, per series and all together; prints it."""
    total = [0, 0, 0, 0]
    for index, (name, ratios) in enumerate(series.items()):
        ratios = numpy.asarray(ratios)
        spread = 1.4826 * numpy.median(numpy.abs(ratios - 1))
        count = args.series // len(series) + (index < args.series % len(series))
        right, anywhere, false = detection(ratios, count, args.runs, args.runs // 2, 0.10, rng)
        total = [a + b for a, b in zip(total, (right, anywhere, false, count))]
        print(f"  {name}: {len(ratios)} real runs, spread {spread:.1%}: a 10% drop after run "
              f"{args.runs // 2} found within 2 runs in {right}/{count} ({right / count:.0%}), "
              f"anywhere in {anywhere}/{count}; a change claimed without one in {false}/{count} "
              f"({false / count:.0%})")
    right, anywhere, false, count = total
    print(f"  all: found within 2 runs in {right}/{count} ({right / count:.1%}), anywhere in "
          f"{anywhere}/{count}; false claims {false}/{count} ({false / count:.1%})")


def speed(runs, rows):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "history.db")
        store = stores.Store(path)
        rng = numpy.random.default_rng(1)
        ops = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
        sizes = [2 ** p for p in range(rows // len(ops))]
        started = time.perf_counter()
        for number in range(runs):
            meta = {"ops": list(ops), "dist": "torch", "backend": "gloo", "device": "cpu",
                    "world_size": 2, "start_time": f"2026-01-01T00:00:{number:06d}"}
            writer = stores.RunWriter(store, meta)
            records = []
            for op in ops:
                for size in sizes:
                    seconds = 1e-5 + size / 1e9 * rng.lognormal(0, 0.05)
                    records.append({"op": op, "dtype": "float32", "size_bytes": size,
                                    "duration_s": seconds, "busbw_Bps": size / seconds})
            writer.add_many(records)
            writer.close()
        store.close()
        written = time.perf_counter() - started
        times = []
        for _ in range(3):
            started = time.perf_counter()
            done = subprocess.run([sys.executable, str(ROOT / "report.py"), "history", "--db",
                                   path], capture_output=True, text=True)
            times.append(time.perf_counter() - started)
            if done.returncode:
                sys.exit(done.stderr)
        store = stores.Store(path)
        started = time.perf_counter()
        series = history.judge(history.load(store))
        inside = time.perf_counter() - started
        store.close()
        return written, min(times), inside, len(series), done.stdout.count("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--noise-db", help="a database of repeated runs of one command")
    parser.add_argument("--save-noise", metavar="NAME",
                        help="keep --noise-db's noise in benchmarks/data/history-noise-NAME.json")
    parser.add_argument("--source", help="with --save-noise: the runs' command, when and where")
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--speed-runs", type=int, default=1000)
    parser.add_argument("--scaled-spread", type=float, default=0.03,
                        help="the last detection line's noise spread (default 0.03: 3%%)")
    args = parser.parse_args()
    if args.noise_db:
        noises = [{"source": args.source or f"report.py history of {args.noise_db}",
                   "series": noise_from(args.noise_db)}]
        if args.save_noise:
            NOISE.parent.mkdir(exist_ok=True)
            path = NOISE.with_name(f"history-noise-{args.save_noise}.json")
            path.write_text(json.dumps(noises[0], indent=1) + "\n")
    else:
        noises = [json.loads(path.read_text())
                  for path in sorted(NOISE.parent.glob("history-noise*.json"))]
    rng = numpy.random.default_rng(38)
    for noise in noises:
        print(f"noise: {noise['source']}")
        detect(noise["series"], args, rng)
    # The method apart from this machine's noise: the first source's real deviations, scaled
    # down to a spread of --scaled-spread (a quieter machine's), same shape (the tails stay).
    total = [0, 0, 0, 0]
    series = noises[0]["series"]
    for index, ratios in enumerate(series.values()):
        ratios = numpy.asarray(ratios)
        spread = 1.4826 * numpy.median(numpy.abs(ratios - 1))
        scaled = 1 + (ratios - 1) * (args.scaled_spread / spread)
        scaled = scaled[scaled > 0]
        count = args.series // len(series) + (index < args.series % len(series))
        found = detection(scaled, count, args.runs, args.runs // 2, 0.10, rng)
        total = [a + b for a, b in zip(total, found + (count,))]
    right, anywhere, false, count = total
    print(f"the first noise's deviations scaled to a spread of {args.scaled_spread:.0%}: found "
          f"within 2 runs in {right}/{count} ({right / count:.1%}), anywhere in {anywhere}/"
          f"{count}; false claims {false}/{count} ({false / count:.1%})")
    written, command, inside, series, lines = speed(args.speed_runs, 200)
    print(f"speed: {args.speed_runs} runs x 200 rows written in {written:.1f} s; report.py "
          f"history over them: {command:.2f} s the whole command (best of 3), {inside:.2f} s "
          f"load and judge in-process, {series} series, {lines} lines")


if __name__ == "__main__":
    main()
