"""How close a replay comes to the job it was recorded from, for the six parallel strategies.

Runs parallel_bench.py once with --trace (the default model, or --quick's small one), then
replays each strategy's trace twice on the same ranks: back to back (replay.py's default) and
--pace (the job's gaps between calls kept). Prints, per strategy, the job's communication time
per step (the slowest rank's sum of its calls' times, as the recorder measured them inside the
job) beside each replay's, and their ratios; then each strategy's table by op kind.

  .venv/bin/python benchmarks/replay_prediction.py                 # 2 ranks, gloo
  .venv/bin/python benchmarks/replay_prediction.py --nproc 3 --quick
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
QUICK = ["--hidden", "48", "--layers", "3", "--heads", "6", "--vocab", "128", "--seq", "16",
         "--micro-batch", "2", "--micro-batches", "2"]


def torchrun(nproc, *args):
    command = [str(BIN / "torchrun"), f"--nproc_per_node={nproc}", "--master_port=29731",
               *map(str, args)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


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
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="replay-prediction-"))
    model = QUICK if args.quick else []
    print(torchrun(args.nproc, "parallel_bench.py", "--strategy", "all", "--steps", args.steps,
                   "--backend", args.backend, "--trace", folder / "trace", *model))
    rows, tables = [], []
    for name in ("ddp", "zero1", "zero2", "zero3", "tp", "pp"):
        figures = {}
        for mode, extra in (("back to back", []), ("paced", ["--pace"])):
            out = folder / f"{name}-{mode.replace(' ', '-')}.jsonl"
            stdout = torchrun(args.nproc, "replay.py", folder / "trace" / name, "--backend",
                              args.backend, "--repeat", args.repeat, "--top", "0", "--output",
                              out, *extra)
            figures[mode] = summary(out)["prediction"]["total"]
            if mode == "back to back":
                tables.append(f"### {name}\n\n```\n{stdout.strip()}\n```")
        cells = []
        for key in ("", "in_flight_"):
            job = figures["back to back"][f"job_{key}s"] / args.steps
            b2b = figures["back to back"][f"replay_{key}s"] / args.steps
            paced = figures["paced"][f"replay_{key}s"] / args.steps
            cells += [f"{job * 1e3:.2f}", f"{b2b * 1e3:.2f} ({b2b / job:.2f})",
                      f"{paced * 1e3:.2f} ({paced / job:.2f})"]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    print(f"Communication per step, ms (replay/job in brackets), the slowest rank's, "
          f"{args.nproc} ranks, {args.backend}:\n")
    print("| strategy | sum of call times: job | replay | replay --pace | time with a call in "
          "flight: job | replay | replay --pace |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n" + "\n\n".join(tables))
    print(f"\n(traces and replays in {folder})", file=sys.stderr)


if __name__ == "__main__":
    main()
