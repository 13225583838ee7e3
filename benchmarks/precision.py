"""--precision against a fixed --repeat: the same precision in how much of the time?

For each backend (gloo, and ccl where its bindings import) and each P, one scan of the six ops
on 2 ranks (torchrun) with `--precision P --time-budget B`, one after the other in one run. From
each run's records it prints: the wall time, how many rows met P, and what a fixed --repeat
needs to give every row the same precision: the largest window count any row took, for every
row. That last is computed, not run (it would take R_max passes of the whole scan): each
row's window costs its (--warmups + --trials) calls at its measured duration, so

  op time, precision  = sum over rows of (its windows + warm-up and rows' ones) x its window cost
  op time, fixed      = sum over rows of R_max x its window cost
  fixed wall time     ~ the precision run's wall time x fixed / precision op time

  .venv/bin/python benchmarks/precision.py                        # gloo and ccl, P 10% and 5%
  .venv/bin/python benchmarks/precision.py --backends gloo --precisions 10% --maxsize 12
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from commbench.records import results  # noqa: E402


def run(backend, precision, options, output):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.setdefault("TORCH_EXTENSIONS_DIR",
                   str(Path(sys.executable).parent.parent / "torch_extensions"))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT"):
        env.pop(name, None)
    command = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node=2",
               f"--master_port={options.port}", "run_all.py", "--dist=torch", "--device=cpu",
               f"--backend={backend}", "--scan", f"--maxsize={options.maxsize}",
               f"--precision={precision}", f"--time-budget={options.time_budget}",
               f"--output={output}", "--overwrite"]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if proc.returncode:
        print(f"precision: {backend} at {precision} failed (exit {proc.returncode}):\n"
              f"{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return wall


def summarize(path, wall):
    meta, records = results.read(str(path))
    calls = meta["warmups"] + meta["trials"]
    rows = [r for r in records if r.get("window") is None]
    most = max(r["repeat"] for r in rows)
    cost = {id(r): calls * r["duration_s"] for r in rows}
    spent = sum((r["repeat"] + 2) * cost[id(r)] for r in rows)  # + the warm-up and rows' windows
    fixed = sum(most * cost[id(r)] for r in rows)
    met = sum(bool(r["precision_met"]) for r in rows)
    windows = sorted(r["repeat"] for r in rows)
    return {"rows": len(rows), "met": met, "wall": wall, "most": most,
            "median_windows": windows[len(windows) // 2], "spent": spent, "fixed": fixed,
            "fixed_wall": wall * fixed / spent if spent else float("nan")}


def ccl_available():
    check = subprocess.run([sys.executable, "-c", "import oneccl_bindings_for_pytorch"],
                           capture_output=True)
    return check.returncode == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--backends", default="gloo,ccl")
    parser.add_argument("--precisions", default="10%,5%")
    parser.add_argument("--maxsize", type=int, default=16)
    # generous: the comparison is of precision reached, not of what a tight budget cuts short
    parser.add_argument("--time-budget", type=float, default=300)
    parser.add_argument("--port", type=int, default=29650)
    options = parser.parse_args()
    backends = options.backends.split(",")
    if "ccl" in backends and not ccl_available():
        print("precision: oneCCL's bindings do not import here; ccl left out", file=sys.stderr)
        backends.remove("ccl")
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                  if line.startswith("Model name")), "unknown CPU")
    print(f"{model}, {os.cpu_count()} CPUs; 2 ranks, run_all.py's six ops, --maxsize "
          f"{options.maxsize}, --time-budget {options.time_budget:g} s a run")
    print(f"{'backend':8s} {'P':>5s} {'rows met':>9s} {'windows':>16s} {'wall (s)':>9s} "
          f"{'fixed --repeat':>15s} {'fixed wall (s)':>15s} {'ratio':>6s}")
    with tempfile.TemporaryDirectory() as folder:
        for backend in backends:
            for precision in options.precisions.split(","):
                path = Path(folder) / f"{backend}-{precision.strip('%')}.jsonl"
                wall = run(backend, precision, options, path)
                if wall is None:
                    continue
                s = summarize(path, wall)
                print(f"{backend:8s} {precision:>5s} {s['met']:>4d}/{s['rows']:<4d} "
                      f"{'median ' + str(s['median_windows']) + ', max ' + str(s['most']):>16s} "
                      f"{s['wall']:9.1f} {'R = ' + str(s['most']):>15s} {s['fixed_wall']:15.1f} "
                      f"{s['fixed_wall'] / s['wall']:6.1f}")


if __name__ == "__main__":
    main()
