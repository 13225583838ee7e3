"""How close a replay comes to the job it was recorded from, for the six parallel strategies.

Runs parallel_bench.py with --trace (the default model, or --quick's small one) --jobs times
(1; more to show how far the job moves from one run to the next), then replays each
strategy's trace of the first run on the same ranks in every mode: back to back (replay.py's
default), --isolated (each call between barriers), --pace (the job's gaps between calls kept,
slept through) and --pace compute (the gaps filled with calibrated compute). Prints, per
strategy, the job's communication time per step (the slowest rank's sum of its calls' times,
as the recorder measured them inside the job's first run, the one replayed: a replay with
--pace keeps that run's gaps, so it predicts that run) beside each replay's, and their
ratios; the same for the time with a call in flight; the noise under them (each job run's
figure, the steps of the first, the replay's passes); then each strategy's table by op kind,
back to back.

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


def recorded(directory):
    """(sum of call times, time with a call in flight) of the job a trace holds, the slowest
    rank's (s), as its recorder measured them."""
    sys.path.insert(0, str(ROOT))
    from commbench.trace import formats, summary
    trace = formats.read(directory)
    return summary.total_time(trace), summary.job_in_flight(trace)


def cells(figures, jobs, key, steps):
    """The job's time per step (its first run's: the one replayed), then each mode's with its
    ratio to the job's (ms)."""
    job = jobs[0][key] / steps
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
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs of the job, each recorded; the first is replayed and is the "
                             "job's figure, the others show the job's own spread")
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
    runs = [Path(args.traces)] if args.traces else [folder / f"trace-{k + 1}"
                                                     for k in range(args.jobs)]
    if not args.traces:
        for run in runs:
            print(torchrun(args.nproc, "parallel_bench.py", "--strategy", "all", "--steps",
                           args.steps, "--backend", args.backend, "--trace", run, *model))
    traces = runs[0]
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
                noise.append((name, *spread(out, args.steps)))
            if mode == "back to back":
                tables.append(f"### {name}\n\n```\n{stdout.strip()}\n```")
        jobs = [dict(zip(("", "in_flight_"), recorded(run / name))) for run in runs]
        noise[-1] += ([run[""] / args.steps * 1e3 for run in jobs],)
        rows.append([name] + [cells(figures, jobs, key, args.steps) for key in ("", "in_flight_")])
    print(f"Communication per step, ms (replay/job in brackets), the slowest rank's, "
          f"{args.nproc} ranks, {args.backend}; the job's run that was replayed:")
    for at, what in ((1, "the sum of call times"), (2, "the time with a call in flight")):
        print(f"\n{what}:\n")
        print("| strategy | job | back to back | --isolated | --pace | --pace compute |")
        print("|---|---|---|---|---|---|")
        print("\n".join(f"| {row[0]} | " + " | ".join(row[at]) + " |" for row in rows))
    print("\nThe noise under the ratios (ms): the job's communication per step in each run of it; "
          "in each step of its first run (median and min-max), the slowest rank's; --pace "
          "compute's per step in each pass (the same):\n")
    print("| strategy | job, by run | job's first run, by step | --pace compute, by pass |")
    print("|---|---|---|---|")
    for name, job_steps, passes, by_run in noise:
        shown = ["-" if f is None else f"{f[0]:.2f} ({f[1]:.2f}-{f[2]:.2f})"
                 for f in (job_steps, passes)]
        print(f"| {name} | {', '.join(f'{x:.2f}' for x in by_run)} | " + " | ".join(shown) + " |")
    print("\n" + "\n\n".join(tables))
    print(f"\n(traces and replays in {folder})", file=sys.stderr)


if __name__ == "__main__":
    main()
