"""What the harness itself costs: the suite's figures beside a bare loop, and start-up time.

For every op and message size, in one process group, the ranks alternate (A B, B A, ...):
  A  the suite's own measurement (commbench.bench.timing.time_op on the op's bound call, as the
     table's Duration is made),
  B  a bare loop of the same collective on the same buffers: warmups, then `trials` direct
     torch.distributed calls between two clock reads, nothing else,
  P  the suite's measurement with --per-trial (a clock read into a preallocated list before
     and after every trial's call: the only thing --per-trial adds inside the window).
It prints per op and size the median duration of each and the medians of the paired ratios
A/B and P/A, then one summary line per world size. With `--dist deepspeed` A goes through
deepspeed.comm while B stays plain torch.distributed: the ratio is what DeepSpeed adds.
Then it times start-up: from process start to the first printed row of the table.

  .venv/bin/python benchmarks/overhead.py                 # world sizes 1 and 2, torch
  .venv/bin/python benchmarks/overhead.py --dist deepspeed
  .venv/bin/python benchmarks/overhead.py --quick         # one op, two sizes, world size 1
  .venv/bin/python benchmarks/overhead.py --backend ccl --world-sizes 2   # over oneCCL

Ratios, not absolute times, are the claim: this machine is shared and noisy, so pairs are
interleaved and medians quoted.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = [8, 64, 512, 4096, 32768, 262144, 2097152, 16777216, 33554432]  # bytes per rank
QUICK_SIZES = [8, 32768]
RECORD = "overhead-record "


# --------------------------------------------------------------------------- one rank's work

def bare_loop(op, input, output, count, rank):
    """`count` direct calls of the collective, nothing else (the dispatch is outside the loop)."""
    import torch.distributed as d
    if op == "all_reduce":
        for _ in range(count):
            d.all_reduce(input)
    elif op == "all_gather":
        for _ in range(count):
            d.all_gather_single(output, input)
    elif op == "all_to_all":
        for _ in range(count):
            d.all_to_all_single(output, input)
    elif op == "reduce_scatter":
        for _ in range(count):
            d.reduce_scatter_single(output, input)
    elif op == "broadcast":
        for _ in range(count):
            d.broadcast(input, 0)
    elif op == "pt2pt" and rank == 0:
        for _ in range(count):
            d.send(input, 1)
    elif op == "pt2pt" and rank == 1:
        for _ in range(count):
            d.recv(input, 0)


def time_bare(op, input, output, warmups, trials, comm):
    import torch.distributed as d
    comm.synchronize()
    d.barrier()
    bare_loop(op, input, output, warmups, comm.rank)
    comm.synchronize()
    d.barrier()
    start = time.perf_counter()
    bare_loop(op, input, output, trials, comm.rank)
    comm.synchronize()
    return (time.perf_counter() - start) / trials


def pin(local_rank):
    """This rank (and the threads it starts later: gloo's workers) on one CPU of its own.
    Both sides of every pair run pinned alike; what it removes is the scheduler's cost of
    waking a thread on another core, which swings from run to run on a shared machine."""
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[local_rank % len(cpus)]
    os.sched_setaffinity(0, {cpu})
    return cpu


def worker(options):
    if options.pin:
        pin(int(os.environ.get("LOCAL_RANK", "0")))
    sys.path.insert(0, str(ROOT))
    import torch
    import utils
    from commbench.ranks.comm import teardown
    from commbench.settings import Settings
    from commbench.bench.sizes import allocate
    from commbench.bench.timing import time_op

    args = Settings.of(utils.benchmark_parser().parse_args(
        ["--dist", options.dist, "--device", "cpu", "--warmups", "3"] + _backend_flag(options)))
    comm = utils.init_processes(None, args)
    ops = [op for op in options.ops if comm.world_size >= utils.collective(op).min_world_size]
    for op in ops:
        collective = utils.collective(op)
        for size in options.sizes:
            numel = size // 4
            if numel % comm.world_size:
                continue
            input, output = allocate(collective, numel, args, comm)
            call = collective.bind(comm, input, output, False)
            # Trials for about --seconds a measurement, from a probe; rank 0 decides for all.
            probe = time_bare(op, input, output, 1, 3, comm)
            count = torch.tensor([max(5, min(1000, int(options.seconds / max(probe, 1e-7))))])
            torch.distributed.broadcast(count, 0)
            args = args.but(trials=int(count.item()))
            suite, bare, per_trial = [], [], []
            marked = args.but(per_trial=True)
            for pair in range(options.pairs):
                # A P B, then B P A: neither side always runs first (caches, clocks, neighbours).
                for side in ("suite", "per_trial", "bare")[::1 if pair % 2 == 0 else -1]:
                    if side == "suite":
                        suite.append(time_op(call, args, comm).mean)
                    elif side == "per_trial":
                        per_trial.append(time_op(call, marked, comm).mean)
                    else:
                        bare.append(time_bare(op, input, output, args.warmups, args.trials, comm))
            if comm.rank == 0:
                print(RECORD + json.dumps({"op": op, "size": size, "world_size": comm.world_size,
                                           "backend": comm.backend, "trials": args.trials,
                                           "suite": suite, "bare": bare,
                                           "per_trial": per_trial}),
                      flush=True)
    teardown()


# --------------------------------------------------------------------------- the report

def run_world(world_size, options):
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_PORT=str(options.port + world_size))
    env.setdefault("TORCH_EXTENSIONS_DIR",
                   str(Path(sys.executable).parent.parent / "torch_extensions"))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(name, None)
    me = [str(Path(__file__).resolve()), "--worker", "--dist", options.dist,
          *_backend_flag(options),
          "--pairs", str(options.pairs), "--seconds", str(options.seconds),
          *([] if options.pin else ["--no-pin"]), "--ops", *options.ops,
          "--sizes", *map(str, options.sizes)]
    if world_size == 1:
        cmd = [sys.executable] + me
    else:
        cmd = [str(Path(sys.executable).parent / "torchrun"), f"--nproc_per_node={world_size}",
               f"--master_port={options.port + world_size}"] + me
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        sys.exit(f"overhead: world size {world_size} failed:\n{proc.stderr[-3000:]}")
    return [json.loads(line[len(RECORD):]) for line in proc.stdout.splitlines()
            if line.startswith(RECORD)]


def _backend_flag(options):
    return ["--backend", options.backend] if options.backend else []


def report(records, options):
    layer = "deepspeed.comm" if options.dist == "deepspeed" else "torch.distributed"
    world_size = records[0]["world_size"]
    pinned = "each rank pinned to one CPU" if options.pin else "ranks not pinned"
    backend = records[0].get("backend", options.backend or "detected")
    print(f"\nworld size {world_size}, backend {backend}: suite ({layer}, time_op) vs bare "
          f"torch.distributed loop, medians of {len(records[0]['suite'])} pairs, order "
          f"alternating, {pinned}")
    print(f"{'op':16s} {'size':>10s} {'trials':>7s} {'suite us':>12s} {'bare us':>12s} "
          f"{'suite/bare':>11s} {'per-trial us':>13s} {'per-trial/suite':>16s}")
    ratios, worst, marked = [], 0.0, []
    for r in records:
        paired = statistics.median(a / b for a, b in zip(r["suite"], r["bare"]))
        ratios.append(paired)
        worst = max(worst, paired)
        with_marks = statistics.median(p / a for p, a in zip(r["per_trial"], r["suite"]))
        marked.append(with_marks)
        print(f"{r['op']:16s} {r['size']:>10d} {r['trials']:>7d} "
              f"{statistics.median(r['suite']) * 1e6:>12.3f} "
              f"{statistics.median(r['bare']) * 1e6:>12.3f} {paired:>11.3f} "
              f"{statistics.median(r['per_trial']) * 1e6:>13.3f} {with_marks:>16.3f}")
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    above = sum(ratio > 1.03 for ratio in ratios)
    print(f"summary world size {world_size}: {len(ratios)} op/size pairs, median ratio "
          f"{statistics.median(ratios):.3f}, geometric mean {geomean:.3f}, max {worst:.3f}, "
          f"{above} above 1.03; --per-trial/suite: median {statistics.median(marked):.3f}, "
          f"max {max(marked):.3f}")


def first_row_seconds(dist, backend=None):
    """Seconds from process start to the first row of the table on stdout."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_PORT="29431")
    env.setdefault("TORCH_EXTENSIONS_DIR",
                   str(Path(sys.executable).parent.parent / "torch_extensions"))
    cmd = [sys.executable, "all_reduce.py", "--scan", "--maxsize=2", "--trials=1", "--warmups=0",
           f"--dist={dist}"] + (["--backend", backend] if backend else [])
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    seconds = None
    for line in proc.stdout:
        if "x4" in line and seconds is None:
            seconds = time.perf_counter() - start
    proc.wait()
    return seconds


def startup(repeats, backend=None):
    print(f"\nstart-up: process start to first printed row (python all_reduce.py --scan "
          f"--maxsize=2 --trials=1{' --backend ' + backend if backend else ''}), median of "
          f"{repeats}, interleaved")
    times = {"torch": [], "deepspeed": []}
    for _ in range(repeats):
        for dist in times:
            times[dist].append(first_row_seconds(dist, backend))
    for dist, values in times.items():
        print(f"--dist {dist:10s} {statistics.median(values):.3f} s  "
              f"(runs: {', '.join(f'{v:.3f}' for v in values)})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dist", choices=("torch", "deepspeed"), default="torch")
    parser.add_argument("--backend", choices=("gloo", "ccl"),
                        help="the CPU backend measured (default: the suite's detection: ccl when "
                             "oneccl_bindings_for_pytorch imports, else gloo)")
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="leave the ranks free to move between CPUs (default: each rank "
                             "pinned to one CPU, both sides of every pair alike)")
    parser.add_argument("--seconds", type=float, default=0.1,
                        help="about how long each measurement takes (default %(default)s)")
    parser.add_argument("--ops", nargs="+", default=["all_reduce", "all_gather", "all_to_all",
                                                     "reduce_scatter", "pt2pt", "broadcast"])
    parser.add_argument("--sizes", nargs="+", type=int, default=SIZES)
    parser.add_argument("--world-sizes", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--quick", action="store_true",
                        help="all_reduce, two sizes, world size 1, 2 pairs, no start-up figures")
    parser.add_argument("--startup-repeats", type=int, default=3)
    parser.add_argument("--port", type=int, default=29460)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        return worker(options)
    if options.quick:
        options.ops, options.sizes, options.world_sizes = ["all_reduce"], QUICK_SIZES, [1]
        options.pairs = min(options.pairs, 2)
    for world_size in options.world_sizes:
        report(run_world(world_size, options), options)
    if not options.quick and options.startup_repeats > 0:
        startup(options.startup_repeats, options.backend)


if __name__ == "__main__":
    main()
