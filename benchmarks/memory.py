"""What each op really takes per rank, beside what the single-size planner counts for it.

For world sizes 1, 2 and 3 on CPU (gloo), it runs a scan of every op to --maxsize and reads,
for the largest size, the memory each rank used (results file field
memory_used_per_rank_bytes: peak resident memory above the rank's memory before its buffers
were allocated). It prints that beside the planner's model (commbench.bench.sizes.footprint without
its fixed reserves: input, output, the backend's staging copy), and with --check the check's working
set, which the planner covers with a fixed reserve.

  .venv/bin/python benchmarks/memory.py                       # world sizes 1 2 3, --maxsize 24
  .venv/bin/python benchmarks/memory.py --check --world-sizes 3

A used/model ratio at or just under 1.00 says the model counts every buffer; above 1.00 it
misses one (the planner would then hand out memory that is not there).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def run_scan(world_size, options, output):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.setdefault("TORCH_EXTENSIONS_DIR",
                   str(Path(sys.executable).parent.parent / "torch_extensions"))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT"):
        env.pop(name, None)
    args = ["run_all.py", "--scan", f"--maxsize={options.maxsize}", "--trials=1", "--warmups=1",
            f"--dist={options.dist}", f"--output={output}", "--overwrite"]
    if options.check:
        args.append("--check")
    launcher = [sys.executable] if world_size == 1 else [
        str(Path(sys.executable).parent / "torchrun"), f"--nproc_per_node={world_size}",
        f"--master_port={options.port + world_size}"]
    proc = subprocess.run(launcher + args, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"memory: world size {world_size} failed:\n{proc.stderr[-3000:]}")
    last = {}
    for line in Path(output).read_text().splitlines():
        record = json.loads(line)
        if record.get("type") == "result":
            last[record["op"]] = record  # the largest size of each op comes last
    return last


def report(world_size, records, options):
    sys.path.insert(0, str(ROOT))
    import utils
    from commbench.settings import Settings
    from commbench.bench.sizes import footprint

    comm = SimpleNamespace(world_size=world_size, on_accelerator=False, backend="gloo")
    flags = Settings(check=options.check, trials=1, warmups=1)
    print(f"\nworld size {world_size}, --dist {options.dist}{', --check' if options.check else ''}"
          f": the largest size of a --maxsize {options.maxsize} scan, per rank")
    print(f"{'op':16s} {'input MiB':>10s} {'model (x input)':>36s} {'model MiB':>10s} "
          f"{'used MiB (max rank)':>20s} {'used/model':>11s} {'beyond MiB':>11s}")
    for op, record in records.items():
        collective = utils.collective(op)
        numel, element_size = record["numel"], record["element_size"]
        need, parts, reserve = footprint(collective, numel, element_size, flags, comm)
        model = need - reserve
        used = max(u for u in record["memory_used_per_rank_bytes"] if u is not None)
        parts_text = " + ".join(f"{what.replace(' staging', '')} {share:.3g}"
                                for what, share in parts)
        print(f"{op:16s} {numel * element_size / MIB:>10.1f} {parts_text:>36s} "
              f"{model / MIB:>10.1f} {used / MIB:>20.1f} {used / model:>11.3f} "
              f"{max(0, used - model) / MIB:>11.1f}")
    print(f"the planner adds {reserve / MIB:.0f} MiB of reserves (backend buffers"
          f"{', the check' if options.check else ''}) to the model; 'beyond' must stay under it")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world-sizes", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--maxsize", type=int, default=24)
    parser.add_argument("--dist", choices=("torch", "deepspeed"), default="torch")
    parser.add_argument("--check", action="store_true", help="measure with --check on")
    parser.add_argument("--port", type=int, default=29480)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for world_size in options.world_sizes:
            records = run_scan(world_size, options, Path(folder) / f"w{world_size}.jsonl")
            report(world_size, records, options)


if __name__ == "__main__":
    main()
