"""How close a replay comes to the job it was recorded from, for the six parallel strategies.

Runs parallel_bench.py once with --trace (the default model, or --quick's small one), then
replays each strategy's trace on the same ranks in every mode: back to back (replay.py's
default), --isolated (each call between barriers), --pace (the job's gaps between calls kept,
slept through) and --pace compute (the gaps filled with calibrated compute). Prints, per
strategy, the job's communication time per step (the slowest rank's sum of its calls' times,
as the recorder measured them inside the job) beside each replay's, and their ratios; the same
for the time with a call in flight; then each strategy's table by op kind, back to back.

  .venv/bin/python benchmarks/replay_prediction.py                 # 2 ranks, gloo
  .venv/bin/python benchmarks/replay_prediction.py --nproc 3 --quick
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
QUICK = ["--hidden", "48", "--layers", "3", "--heads", "6", "--vocab", "128", "--seq", "16",
         "--micro-batch", "2", "--micro-batches", "2"]


MODES = (("back to back", []), ("isolated", ["--isolated"]), ("paced", ["--pace"]),
         ("compute", ["--pace", "compute"]))
PORT = [29731]


def torchrun(nproc, *args):
    command = [str(BIN / "torchrun"), f"--nproc_per_node={nproc}", f"--master_port={PORT[0]}",
               *map(str, args)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def cells(figures, key, steps):
    """The job's time per step, then each mode's with its ratio to the job's (ms)."""
    job = figures["back to back"][f"job_{key}s"] / steps
    found = [f"{job * 1e3:.2f}"]
    for mode, _ in MODES:
        replay = figures[mode][f"replay_{key}s"] / steps
        found.append(f"{replay * 1e3:.2f} ({replay / job:.2f})")
    return found


def spread(path, steps):
    """The noise a ratio stands on, from one replay's results file: the job's communication in
    each of its steps (the slowest rank's sum of call times, as recorded), and the replay's per
    step in each pass (its sum over the trace's steps / steps), both in ms: (median, min, max)
    of each."""
    calls = [json.loads(line) for line in Path(path).read_text().splitlines()]
    calls = [c for c in calls if c.get("type") == "call" and c.get("times_s")]
    ranks = sorted({c["rank"] for c in calls})
    numbers = sorted({c["step"] for c in calls if c.get("step") is not None})
    job = [max(sum(c["recorded_s"] or 0.0 for c in calls if c["rank"] == r and c["step"] == k)
               for r in ranks) for k in numbers]
    passes = len(calls[0]["times_s"]) if calls else 0
    replay = [max(sum(c["times_s"][p] for c in calls if c["rank"] == r) for r in ranks) / steps
              for p in range(passes)]
    return [(1e3 * statistics.median(x), 1e3 * min(x), 1e3 * max(x)) if x else None
            for x in (job, replay)]


def summary(path):
    lines = Path(path).read_text().splitlines()
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--quick", action="store_true", help="the tests' small model")
    parser.add_argument("--port", type=int, default=29731)
    parser.add_argument("--traces", default=None, metavar="DIR",
                        help="replay the traces of an earlier run (DIR/<strategy>, recorded with "
                             "--steps steps) instead of recording a job")
    parser.add_argument("--strategies", default="ddp,zero1,zero2,zero3,tp,pp")
    args = parser.parse_args()
    PORT[0] = args.port
    folder = Path(tempfile.mkdtemp(prefix="replay-prediction-"))
    model = QUICK if args.quick else []
    traces = Path(args.traces) if args.traces else folder / "trace"
    if not args.traces:
        print(torchrun(args.nproc, "parallel_bench.py", "--strategy", "all", "--steps",
                       args.steps, "--backend", args.backend, "--trace", traces, *model))
    rows, tables, noise = [], [], []
    for name in args.strategies.split(","):
        figures = {}
        for mode, extra in MODES:
            out = folder / f"{name}-{mode.replace(' ', '-')}.jsonl"
            stdout = torchrun(args.nproc, "replay.py", traces / name, "--backend",
                              args.backend, "--repeat", args.repeat, "--top", "0", "--output",
                              out, *extra)
            figures[mode] = summary(out)["prediction"]["total"]
            if mode == "compute":
                noise.append((name, spread(out, args.steps)))
            if mode == "back to back":
                tables.append(f"### {name}\n\n```\n{stdout.strip()}\n```")
        rows.append([name] + [cells(figures, key, args.steps) for key in ("", "in_flight_")])
    print(f"Communication per step, ms (replay/job in brackets), the slowest rank's, "
          f"{args.nproc} ranks, {args.backend}:")
    for at, what in ((1, "the sum of call times"), (2, "the time with a call in flight")):
        print(f"\n{what}:\n")
        print("| strategy | job | back to back | --isolated | --pace | --pace compute |")
        print("|---|---|---|---|---|---|")
        print("\n".join(f"| {row[0]} | " + " | ".join(row[at]) + " |" for row in rows))
    print("\nThe noise under the ratios (ms, median and min-max): the job's communication in each "
          "of its steps, the slowest rank's; --pace compute's per step in each pass:\n")
    print("| strategy | job, by step | --pace compute, by pass |")
    print("|---|---|---|")
    for name, figures in noise:
        shown = ["-" if f is None else f"{f[0]:.2f} ({f[1]:.2f}-{f[2]:.2f})" for f in figures]
        print(f"| {name} | " + " | ".join(shown) + " |")
    print("\n" + "\n\n".join(tables))
    print(f"\n(traces and replays in {folder})", file=sys.stderr)


if __name__ == "__main__":
    main()
