"""Which collective path a CPU user should pick, held against what memory can carry.

Four paths, side by side, over all_reduce, all_gather and reduce_scatter, at 2 and 3 ranks on
this host, 64 KiB to 64 MiB a rank:
  gloo     --dist torch --backend gloo (TCP over loopback)
  ccl      --dist torch --backend ccl (oneCCL through torch.distributed; shared memory)
  ds-ccl   --dist deepspeed --backend ccl (deepspeed.comm on CPU: DeepSpeed's oneCCL op, which
           calls oneCCL from C++; the suite's oneCCL settings, shared-memory transport on)
  ds-shm   all_reduce only: deepspeed.comm.inference_all_reduce, DeepSpeed's own shared-memory
           all_reduce (csrc/cpu/comm/shm.cpp), which deepspeed.comm.all_reduce does not use;
           timed by this script's own ranks as the suite times (shm_worker)
and the bound: a memory copy, measured with the ranks' own placement (as many processes as
ranks, one thread each, copying at once, each its own buffer of the message size); its figure
is what one of them copies a second (GB/s), the pace a rank's bus bandwidth is held against.

Rounds interleave everything (each round: the copy, then the three paths in a rotated order,
each a run of run_all.py under torchrun), and medians over the rounds are quoted: the machine is
shared. It prints, per world size and op, each path's bus bandwidth and its fraction of the
copy, the fastest path per size band, and the raw figures as one JSON line.

  .venv/bin/python benchmarks/cpu_paths.py                  # 3 rounds, 2 and 3 ranks
  .venv/bin/python benchmarks/cpu_paths.py --quick          # 1 round, 2 ranks, 3 sizes
"""

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
OPS = ("all_reduce", "all_gather", "reduce_scatter")
PATHS = {
    "gloo": ["--dist", "torch", "--backend", "gloo"],
    "ccl": ["--dist", "torch", "--backend", "ccl"],
    "ds-ccl": ["--dist", "deepspeed", "--backend", "ccl"],
    "ds-shm": [],  # all_reduce only: this script's own ranks (shm_worker)
}
BANDS = (("64K-256K", 1 << 16, 1 << 18), ("1M-4M", 1 << 20, 1 << 22),
         ("16M-64M", 1 << 24, 1 << 26))


# --------------------------------------------------------------------------- the copy bound

def _copier(size, seconds, start, out):
    """One process, one thread: copy a `size`-byte buffer into another for about `seconds`
    once every copier is ready; its bytes copied a second go to `out`."""
    import torch
    torch.set_num_threads(1)
    src = torch.ones(size // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start.wait()
    count, began = 0, time.perf_counter()
    while True:
        dst.copy_(src)
        count += 1
        spent = time.perf_counter() - began
        if spent >= seconds and count >= 3:
            break
    out.put(count * size / spent)


def copy_rate(procs, size, seconds=0.3):
    """Bytes a second each of `procs` processes copies while all copy at once (the median of
    theirs)."""
    context = multiprocessing.get_context("spawn")
    start, out = context.Barrier(procs), context.Queue()
    workers = [context.Process(target=_copier, args=(size, seconds, start, out))
               for _ in range(procs)]
    for worker in workers:
        worker.start()
    rates = [out.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join()
    return statistics.median(rates)


# --------------------------------------------------------------------------- ds-shm's ranks

def shm_worker(sizes, budget, output):
    """One rank of the ds-shm path (under torchrun): DeepSpeed's inference_all_reduce, its
    shared-memory all_reduce (csrc/cpu/comm/shm.cpp) where every rank is on one host, timed as
    the suite times (warmups, then a window of N calls, N from the warmups' pace, the slowest
    rank's mean); rank 0 writes {size: busbw B/s} to `output`."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from commbench.ranks import ccl, shm
    ccl.environment("deepspeed")  # the suite's oneCCL settings and CCL_ROOT, as its runs have
    import deepspeed
    import deepspeed.comm as dist
    import torch
    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="ccl", auto_mpi_discovery=False, verbose=False)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    first = torch.ones(16)
    dist.inference_all_reduce(first)
    shm.unlink_deepspeed_buffer(rank)  # every rank has mapped the peers' buffers by now
    found = {}
    for size in sizes:
        data = torch.ones(size // 4)
        began = time.perf_counter()
        for _ in range(3):
            dist.inference_all_reduce(data)
        pace = torch.tensor([(time.perf_counter() - began) / 3])
        dist.all_reduce(pace, op=dist.ReduceOp.MAX)
        count = int(min(20, max(3, budget / max(pace.item(), 1e-9))))
        dist.barrier()
        began = time.perf_counter()
        for _ in range(count):
            dist.inference_all_reduce(data)
        took = torch.tensor([(time.perf_counter() - began) / count])
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        found[size] = 2 * (world_size - 1) / world_size * size / took.item()
    if rank == 0:
        Path(output).write_text(json.dumps(found))
    dist.barrier()


# --------------------------------------------------------------------------- one path's run

def run_path(path, world_size, sizes, port, budget, extensions):
    """run_all.py over the three ops on `world_size` local ranks: {(op, size): busbw B/s}, or
    None (a failed run: its stderr's last line is printed)."""
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "run.jsonl"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_EXTENSIONS_DIR": extensions,
               "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
        launch = [str(BIN / "torchrun"), f"--nproc_per_node={world_size}",
                  f"--master-port={port}"]
        if path == "ds-shm":
            command = launch + [str(Path(__file__).resolve()), "--worker", str(output),
                                "--time-budget", str(budget), "--sizes",
                                *(str(size) for size in sizes)]
            return _shm_figures(command, env, output)
        command = launch + ["run_all.py", *PATHS[path], "--device", "cpu",
                   *(f"--{op.replace('_', '-')}" for op in OPS),
                   "--min-bytes", str(sizes[0]), "--max-bytes", str(sizes[-1]),
                   "--step-factor", str(sizes[1] // sizes[0]) if len(sizes) > 1 else "2",
                   "--trials", "20", "--warmups", "3", "--time-budget", str(budget),
                   "--timeout", "900", "--output", str(output)]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=1800)
        if done.returncode != 0 or not output.exists():
            said = [line for line in done.stderr.splitlines() if line.startswith("commbench:")]
            last = (said or done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
            print(f"# {path} x{world_size}: exit {done.returncode}: {last}", file=sys.stderr)
            return None
        records = [json.loads(line) for line in output.read_text().splitlines()]
    # a size the op cannot split evenly among the ranks is rounded down (reduce_scatter on 3
    # ranks: 65532 for 64K): each row under the size it was asked for
    return {(r["op"], _nominal(r["size_bytes"], sizes)): r["busbw_Bps"] for r in records
            if r.get("type") == "result" and r.get("busbw_Bps")}


def _nominal(size, sizes):
    return min(sizes, key=lambda s: abs(s - size))


def _shm_figures(command, env, output):
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0 or not output.exists():
        last = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        print(f"# ds-shm: exit {done.returncode}: {last}", file=sys.stderr)
        return None
    return {("all_reduce", int(size)): busbw
            for size, busbw in json.loads(output.read_text()).items()}


# --------------------------------------------------------------------------- the rounds

def measure(args, sizes):
    """Every round: per world size the copy at each size, then each path (order rotated a
    round). Returns (copy {(ws, size): [B/s]}, busbw {(path, ws, op, size): [B/s]})."""
    copies, busbw = {}, {}
    names = list(args.paths)
    port = args.port
    for number in range(args.rounds):
        order = names[number % len(names):] + names[:number % len(names)]
        for world_size in args.world_sizes:
            for size in sizes:
                copies.setdefault((world_size, size), []).append(copy_rate(world_size, size))
            for path in order:
                port += 1
                began = time.monotonic()
                found = run_path(path, world_size, sizes, port, args.time_budget,
                                 args.torch_extensions)
                print(f"# round {number + 1}/{args.rounds}: {path} x{world_size} "
                      f"{time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
                for key, value in (found or {}).items():
                    busbw.setdefault((path, world_size, *key), []).append(value)
        if number + 1 < args.rounds:  # what a run cut short leaves: every round's medians
            print(f"\n# after round {number + 1} of {args.rounds}")
            report(args, sizes, copies, busbw, number + 1)
    return copies, busbw


def report(args, sizes, copies, busbw, rounds):
    """The tables, the bands and the raw figures as one JSON line, on stdout."""
    for line in table(args, sizes, copies, busbw, rounds) + bands(args, busbw):
        print(line)
    print(json.dumps({"copy_Bps": {f"{w}x{s}": v for (w, s), v in copies.items()},
                      "busbw_Bps": {f"{p}/{w}/{o}/{s}": v
                                    for (p, w, o, s), v in busbw.items()}}), flush=True)


def _read_raw(path, sizes):
    """(copies, busbw) from the last JSON line of `path` (a run's raw figures)."""
    last = [line for line in Path(path).read_text().splitlines() if line.startswith("{")][-1]
    raw = json.loads(last)
    copies = {tuple(int(x) for x in key.split("x")): v for key, v in raw["copy_Bps"].items()}
    busbw = {}
    for key, values in raw["busbw_Bps"].items():
        path_, world_size, op, size = key.split("/")
        busbw.setdefault((path_, int(world_size), op, _nominal(int(size), sizes)),
                         []).extend(values)
    return copies, busbw


def _median(values):
    return statistics.median(values) if values else None


def table(args, sizes, copies, busbw, rounds):
    """The printed tables: per world size and op, each size's copy bound and each path's bus
    bandwidth (GB/s) with its fraction of the bound, then the fastest path."""
    lines = []
    for world_size in args.world_sizes:
        for op in OPS:
            lines += ["", f"{op}, {world_size} ranks: bus bandwidth GB/s (fraction of the copy "
                          f"bound), medians of {rounds} round(s)",
                      f"{'size':>8}  {'copy':>6}  " +
                      "  ".join(f"{p:>14}" for p in args.paths) + "  fastest"]
            for size in sizes:
                bound = _median(copies[(world_size, size)]) / 1e9
                cells, best = [], (None, 0.0)
                for path in args.paths:
                    value = _median(busbw.get((path, world_size, op, size), []))
                    if value is None:
                        cells.append(f"{'-':>14}")
                        continue
                    value /= 1e9
                    cells.append(f"{value:>7.2f} ({value / bound:4.2f})")
                    best = max(best, (path, value), key=lambda b: b[1])
                lines.append(f"{_size(size):>8}  {bound:>6.2f}  " + "  ".join(cells) +
                             f"  {best[0] or '-'}")
    return lines


def bands(args, busbw):
    """The fastest path per size band, op and world size: the highest median bus bandwidth
    over the band's sizes (geometric mean of the size medians)."""
    lines = ["", "fastest path per size band (geometric mean of the medians over the band)"]
    for world_size in args.world_sizes:
        for op in OPS:
            words = []
            for band, low, high in BANDS:
                scores = {}
                for path in args.paths:
                    values = [_median(v) for (p, w, o, s), v in busbw.items()
                              if (p, w, o) == (path, world_size, op) and low <= s <= high]
                    if values:
                        scores[path] = statistics.geometric_mean(values)
                if scores:
                    best = max(scores, key=lambda p: scores[p])
                    words.append(f"{band} {best} {scores[best] / 1e9:.2f} GB/s")
            lines.append(f"  {op:<15} {world_size} ranks: " + "; ".join(words))
    return lines


def _size(size):
    return f"{size >> 20}M" if size >= 1 << 20 else f"{size >> 10}K"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS))
    parser.add_argument("--step-factor", type=int, default=4,
                        help="each size this times the last, 64K to 64M (default 4)")
    parser.add_argument("--time-budget", type=float, default=0.5,
                        help="run_all.py's seconds per size (default 0.5)")
    parser.add_argument("--port", type=int, default=35100)
    parser.add_argument("--torch-extensions", default=str(BIN.parent / "torch_extensions"),
                        metavar="DIR",
                        help="where DeepSpeed's built CPU ops are (default: the venv's); on a "
                             "machine shared with other users of the venv give a copy of your "
                             "own: their builds with other flags rebuild the op, and a run "
                             "waits minutes for the lock")
    parser.add_argument("--quick", action="store_true",
                        help="one round, 2 ranks, 64K, 1M and 16M")
    parser.add_argument("--again", metavar="RAW",
                        help="print the tables again from a file holding a run's last line "
                             "(its raw figures, JSON), measuring nothing")
    parser.add_argument("--worker", metavar="OUTPUT", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=int, nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:  # one rank of the ds-shm path
        shm_worker(args.sizes, args.time_budget, args.worker)
        return 0
    if args.quick:
        args.rounds, args.world_sizes, args.step_factor = 1, [2], 16
    sizes, size = [], 1 << 16
    while size <= 1 << 26:
        sizes.append(size)
        size *= args.step_factor
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                  if line.startswith("Model name")), "?")
    if not args.again:
        print(f"# {model}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the "
              f"start; {args.rounds} round(s), interleaved")
    if args.again:  # the tables again from a run's raw line
        copies, busbw = _read_raw(args.again, sizes)
        args.world_sizes = sorted({w for w, _ in copies})
        args.paths = [p for p in PATHS if any(k[0] == p for k in busbw)]
        args.rounds = max(len(v) for v in copies.values())
    else:
        copies, busbw = measure(args, sizes)
    report(args, sizes, copies, busbw, args.rounds)
    if not args.again:
        print("# load average at the end", f"{os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
