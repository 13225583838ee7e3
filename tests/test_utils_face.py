"""utils.py keeps the original suite's names and call forms: every one imported from `utils`
and called in a real one-rank process group, and each op script's timed_<op> / run_<op>."""

import json

import pytest

from support import ROOT, launch, memory_cgroup
from formulas import BUSBW, OPS, THROUGHPUT

# gloo, named: detected, the CPU backend is oneCCL once its bindings import, whose ranks run alone
# (make test's second part); this file runs beside the others, and one CI run saw this script's
# one oneCCL rank end by SIGABRT after its tables (2026-12-07).
# A single-size all_gather plans on (mem_factor + 0.2) of the rank's memory (SPEC §4): a memory
# cgroup keeps that to a few hundred MB instead of a share of the whole host. max_numel's power of
# two follows the cgroup's headroom (limit less the process's working set, about 560 MiB on
# gloo): it steps from 128 to 256 elements at 1.024e9 bytes (976.6 MiB) and to 512 at twice that.
# At 1536 MiB the headroom sat on the first step, and one clean CI run saw 128 and then 256 in two
# calls of one process (2026-12-07); at 2048 MiB it is about 1490 MiB, 500 MiB from either step.
LIMIT = 2048 << 20

FACE = '''
import json, sys
import torch
from utils import (benchmark_parser, convert_size, get_bw, get_metric_strings, init_processes,
                   max_numel, print_header, print_rank_0, sync_all)

args = benchmark_parser().parse_args(["--dist", "torch", "--device", "cpu", "--backend", "gloo",
                                      "--mem-factor", "0.000001", "--trials", "2", "--warmups",
                                      "1"])
comm = init_processes(None, args)
print_header(args, "all_reduce")
print_header(args, "pt2pt")
print_rank_0("a line from rank 0")
sync_all()
out = {"world_size": comm.world_size, "convert_size": convert_size(3 * 1024 ** 2),
       "metric_strings": list(get_metric_strings(args, 2.5e9, 1.25e9, 2.5e-3)),
       "bw": {}, "max_numel": {}, "run": {}, "timed": {}}
for op in %(ops)r:
    module = __import__(op)
    out["bw"][op] = get_bw(op, 1 << 20, 1e-3, args)
    out["max_numel"][op] = max_numel(op, torch.float32, 0.000001, None, args)
    if op == "all_to_all":  # the dtype by name, right after it by torch dtype
        out["max_numel_by_name"] = max_numel(op, "float32", 0.000001, None, args)
    out["timed"][op] = callable(getattr(module, "timed_" + op))
    if op != "pt2pt":  # it needs two ranks
        records = getattr(module, "run_" + op)(None, args)
        out["run"][op] = [r["numel"] for r in records]
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
'''


@pytest.fixture(scope="module")
def face(tmp_path_factory):
    folder = tmp_path_factory.mktemp("face")
    script, result_file = folder / "face.py", folder / "face.json"
    script.write_text(FACE % {"ops": OPS})
    with memory_cgroup(LIMIT) as group:
        result = launch(str(script), result_file, env={"PYTHONPATH": str(ROOT)},
                        preexec_fn=group.enter)
        assert group.oom_kills() == 0
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-4000:]}"
    return result, json.loads(result_file.read_text())


def test_printing_names(face):
    result, out = face
    assert out["world_size"] == 1
    # print_header's two tables, then one of each run_<op> (pt2pt needs two ranks).
    assert [(t.op, t.devices) for t in result.tables] == [("all_reduce", 1), ("pt2pt", 2)] + \
        [(op, 1) for op in OPS if op != "pt2pt"]
    assert result.tables[0].rows == []  # a header alone; then the pt2pt header and the line
    assert result.tables[0].columns == ["Size (Bytes)", "Description", "Duration",
                                        "Throughput (Gbps)", "BusBW (Gbps)"]
    assert "\na line from rank 0\n" in result.stdout
    assert out["convert_size"] == "3.0 MB"
    assert out["metric_strings"] == ["2.500", "1.250", "2.500 ms"]


@pytest.mark.parametrize("op", OPS)
def test_get_bw_is_the_original_form(face, op):
    tput, busbw = face[1]["bw"][op]
    rate_bits = (1 << 20) / 1e-3 * 8  # --bw-unit Gbps by default
    assert tput == pytest.approx(THROUGHPUT[op](1) * rate_bits)
    assert busbw == pytest.approx(BUSBW[op](1) * rate_bits)


@pytest.mark.parametrize("op", OPS)
def test_max_numel_is_what_a_single_size_run_uses(face, op):
    out = face[1]
    numel = out["max_numel"][op]
    assert numel >= 1 and out["timed"][op]
    if op in ("all_gather", "all_to_all", "reduce_scatter"):
        assert numel & (numel - 1) == 0  # n x 2^k with n = 1
    if op in ("all_gather", "all_to_all", "reduce_scatter"):
        assert out["run"][op] == [numel]
    elif op != "pt2pt":
        # E = M x 2 x mem_factor / es follows the cgroup's headroom, which moves a little as
        # the process allocates between the two calls.
        (measured,) = out["run"][op]
        assert measured == pytest.approx(numel, rel=0.1)
    assert out["max_numel_by_name"] == out["max_numel"]["all_to_all"]  # dtype by name or dtype
