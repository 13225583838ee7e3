"""Sizes, validators and the table in-process: numbers.py's flag validators, sizes.py's scan and
byte-sweep plans, SPEC §4's rounding and the memory footprint of one size, and table.py's
header, columns and rows read back by the tests' own table parser. No ranks: a world is a
SimpleNamespace with the fields these functions read, the command line a Settings."""

import argparse
import importlib
from types import SimpleNamespace

import pytest

from commbench.bench import collective, sizes
from commbench import defaults, numbers, table
from commbench.ranks.comm import Run
from commbench.settings import Settings
from commbench.bench.check import CHECK_RESERVE
from support import parse_tables

pytestmark = pytest.mark.fast

MIB = 1 << 20


def descriptor(op):
    """The Collective an op script at the top of the tree describes its op with."""
    module = importlib.import_module(op)
    found = [v for v in vars(module).values()
             if isinstance(v, collective.Collective) and v.name == op]
    assert len(found) == 1, op
    return found[0]


# --------------------------------------------------------------------------- validators

def test_int_at_least():
    parse = numbers.int_at_least(1)
    assert parse("5") == 5
    with pytest.raises(argparse.ArgumentTypeError, match="must be >= 1, got 0"):
        parse("0")
    with pytest.raises(argparse.ArgumentTypeError, match="'1e5' is not an integer"):
        parse("1e5")  # exponents only where asked for
    assert numbers.int_at_least(0, exponent=True)("1e5") == 100000
    with pytest.raises(argparse.ArgumentTypeError, match="'2.5' is not an integer"):
        parse("2.5")


def test_float_in_a_half_open_range():
    parse = numbers.float_in(0, 1, "in (0, 1]")
    assert parse("1") == 1.0 and parse("0.25") == 0.25
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be in \(0, 1\], got 0"):
        parse("0")
    with pytest.raises(argparse.ArgumentTypeError, match="got 1.5"):
        parse("1.5")
    with pytest.raises(argparse.ArgumentTypeError, match="'half' is not a number"):
        parse("half")


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("2.5%", 0.025), (" 50% ", 0.5),
                                        ("99.9%", 0.999)])
def test_percentage(text, value):
    assert numbers.percentage(text) == pytest.approx(value)


@pytest.mark.parametrize("text,message", [("5", "is not a percentage"),
                                          ("five%", "is not a percentage"),
                                          ("0%", "above 0% and below 100%"),
                                          ("100%", "above 0% and below 100%"),
                                          ("-1%", "above 0% and below 100%")])
def test_percentage_refuses_a_bare_number_and_the_ends(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        numbers.percentage(text)


@pytest.mark.parametrize("text,value", [("8", 8), ("1K", 1024), ("128M", 128 * MIB),
                                        ("1G", 1 << 30), ("2T", 2 << 40), ("4KiB", 4096),
                                        ("4kb", 4096), (" 16 M ", 16 * MIB), ("64B", 64)])
def test_byte_count_is_1024_based_as_nccl_tests_reads_it(text, value):
    assert numbers.byte_count(text) == value


@pytest.mark.parametrize("text", ["0", "1.5K", "1P", "-8", "K", "8 bytes"])
def test_byte_count_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError):
        numbers.byte_count(text)


# --------------------------------------------------------------------------- sizes

def test_scan_numels_from_minsize():
    assert sizes.scan_numels(2, 4) == [4, 8, 16]  # n x 2^p, p = 1..3
    assert sizes.scan_numels(3, 4, minsize=3) == [24]
    assert sizes.scan_numels(1, 1) == []


@pytest.mark.parametrize("op,size,element,n,numel", [
    ("all_reduce", 1000, 4, 3, 250),
    ("all_reduce", 3, 4, 3, 1),  # at least one element
    ("all_to_all", 1000, 4, 3, 249),  # a multiple of n: 250 -> 249
    ("reduce_scatter", 4, 4, 3, 3),  # at least n
    ("scatter", 64, 2, 4, 32),
    ("all_gather", 1001, 4, 4, 250),  # whole elements: 1001 // 4
])
def test_message_numel_rounds_to_what_the_op_can_move(op, size, element, n, numel):
    assert sizes.message_numel(descriptor(op), size, element, n) == numel


def sweep_args(**extra):
    return Settings(**{"min_bytes": 8, "max_bytes": 64, "step_factor": 2, "dtype": "float",
                       "maxsize": 4, "minsize": 1, **extra})


def test_byte_sweep_steps_by_the_factor_and_measures_each_rounded_size_once():
    assert sizes.sweep_numels(descriptor("all_reduce"), sweep_args(), 4) == [2, 4, 8, 16]
    # all_to_all on 4 ranks: 8 B is 2 elements, rounded up to 4, as is 16 B: measured once
    assert sizes.sweep_numels(descriptor("all_to_all"), sweep_args(), 4) == [4, 8, 16]


def test_byte_sweep_with_a_fractional_factor_grows_by_at_least_a_byte():
    # 8, 12, 18, 27, 40, 60 B (int(x 1.5)); float: 2, 3, 4, 6, 10, 15 elements
    numels = sizes.sweep_numels(descriptor("all_reduce"), sweep_args(step_factor=1.5), 2)
    assert numels == [2, 3, 4, 6, 10, 15]
    tiny = sizes.sweep_numels(descriptor("all_reduce"),
                              sweep_args(min_bytes=4, max_bytes=8, step_factor=1.1), 1)
    assert tiny == [1, 2]  # 4..8 B a byte at a time: 1 element for 4-7 B, 2 for 8 B


def test_sweep_without_bytes_is_the_exponent_scan_and_barrier_has_one_size():
    args = sweep_args(min_bytes=None)
    assert sizes.sweep_numels(descriptor("all_reduce"), args, 2) == [4, 8, 16]
    assert sizes.sweep_numels(descriptor("barrier"), args, 2) == [0]


def test_spec_rounding_of_a_single_size():
    whole, gathered, split = (descriptor(op) for op in ("all_reduce", "all_gather", "all_to_all"))
    assert sizes._round_numel(whole, 1000.7, 4) == 1000
    assert sizes._round_numel(gathered, 1000, 4) == 128  # 2^floor(log2(1000 / 4))
    assert sizes._round_numel(split, 1000, 4) == 512  # n x that
    # the cap: the largest E of the op's form within what fits
    assert sizes._fitting_numel(gathered, 1000, 4) == 512
    assert sizes._fitting_numel(split, 1000, 4) == 512
    assert sizes._fitting_numel(split, 3, 4) == 0  # not even n elements
    assert sizes._power_of_two_below(0.5) == 0


def world(n=4, accelerator=False):
    return SimpleNamespace(world_size=n, on_accelerator=accelerator, backend="gloo")


def plan_args(**extra):
    return Settings(**{"check": False, "async_op": False, "trials": 50, "warmups": 5, **extra})


def test_footprint_counts_input_output_and_gloos_staging_copy():
    # all_gather on gloo, 4 ranks: input E, output 4E, staging 4E (docs/memory.md)
    numel, n = 1 << 20, 4
    need, parts, reserve = sizes.footprint(descriptor("all_gather"), numel, 4, plan_args(),
                                           world(n))
    assert [share for _, share in parts] == [1.0, 4.0, 4]
    assert reserve == defaults.BACKEND_MEMORY_RESERVE
    assert need == numel * 4 * 9 + reserve
    # --check adds its working set; an accelerator has no staging copy
    assert sizes.footprint(descriptor("all_gather"), numel, 4, plan_args(check=True),
                           world(n))[2] == reserve + CHECK_RESERVE
    assert [s for _, s in sizes.buffer_multiples(descriptor("all_gather"), numel,
                                                 world(n, accelerator=True))] == [1.0, 4.0]


def test_async_ops_in_flight_each_hold_a_staging_copy():
    assert sizes.in_flight(plan_args()) == 1
    assert sizes.in_flight(plan_args(async_op=True, trials=50, warmups=5)) == 50
    assert sizes.in_flight(plan_args(async_op=True, trials=3, warmups=5)) == 5
    parts = sizes.buffer_multiples(descriptor("reduce_scatter"), 1024, world(2), 3)
    assert parts == [("input", 1.0), ("output", 0.5), ("gloo staging copy x 3 in flight", 3)]


def test_a_sweeps_ceiling_is_the_memory_at_the_runs_first_sweep(monkeypatch):
    # run_all.py checks every op's sweep before the first; the memory the ops before an op
    # leave in use must not turn its own check into a refusal after rows were measured (CI: the
    # second op of a scan in a 1500 MiB cgroup was refused, exit 2).
    memory = iter([(600 << 20, "cgroup"), (300 << 20, "cgroup")])
    monkeypatch.setattr(sizes, "per_rank_memory", lambda comm: next(memory))
    comm = SimpleNamespace(world_size=2, run=Run(), one_tensor_all_gather=False)
    args = Settings(dtype="float", mem_factor=1.0, maxsize=27, min_bytes=None, scan=True)
    numels = [2 ** 27]  # 512 MiB a rank: within 600 MiB, past 300
    sizes.refuse_past_ceiling(descriptor("all_gather"), numels, args, comm)
    sizes.refuse_past_ceiling(descriptor("reduce_scatter"), numels, args, comm)
    assert comm.run.sweep_memory == (600 << 20, "cgroup")
    comm.run.sweep_memory = (300 << 20, "cgroup")
    with pytest.raises(sizes.UsageError, match="past a sweep's ceiling of 300 MiB"):
        sizes.refuse_past_ceiling(descriptor("all_gather"), numels, args, comm)


# --------------------------------------------------------------------------- the table

def table_args(**extra):
    return Settings(**{"raw": False, "bw_unit": "Gbps", "time_budget": None, "stats": False,
                       "check": False, **extra})


@pytest.mark.parametrize("size,text", [(1 << 50, "1.0 PB"), (2 * 1024 ** 8, "2.0 YB"),
                                       (1024 ** 9, "1024.0 YB"), (1536, "1.5 KB")])
def test_convert_size_up_to_the_last_unit(size, text):
    assert table.convert_size(size) == text


def test_a_bandwidth_of_none_prints_as_a_dash():
    assert table.get_metric_strings(table_args(), None, None, 5e-6) == ("-", "-", "5.000 us")


def test_extra_columns_come_in_one_order():
    args = table_args(time_budget=5, stats=True, check=True, repeat=3, overlap=True,
                      check_every=True, op_columns=[("Msgs/s", 20)])
    assert [title for title, _ in table.extra_columns(args)] == [
        "Msgs/s", "Trials", "±95% CI", "Median", "P99", "Slowest", "Comm", "Compute",
        "Overlapped", "Overlap %", "Checked", "Wrong"]
    adaptive = table_args(time_budget=5, precision=0.05, raw=True, stats=True)
    assert [title for title, _ in table.extra_columns(adaptive)] == [
        "±95% CI", "Windows", "Median (us)", "P99 (us)", "Slowest"]  # no Trials under it
    assert table.extra_columns(table_args()) == []


def test_header_and_rows_read_back_as_the_tests_parser_reads_them(capsys):
    comm = SimpleNamespace(global_rank=0)
    args = table_args(stats=True, check=True)
    table.print_header(args, "all_reduce", 3, comm, qualifiers=("dtype bfloat16",))
    table.print_row(args, comm, 2 * MIB, "1048576x2", 1.5e-3, 2.5e9, 1.25e9,
                    extra=("1.400 ms", "2.000 ms", "2", "0"))
    out = capsys.readouterr().out
    lines = out.splitlines()
    # a table wider than the original's: its rules span its column line (issue 36)
    assert lines[0] == "" and len(lines[3]) == len(lines[2].rstrip()) and set(lines[3]) == {"-"}
    assert len(lines[1]) == len(lines[3])
    (parsed,) = parse_tables(out)
    assert (parsed.op, parsed.devices, parsed.qualifiers) == ("all_reduce", 3,
                                                              {"dtype": "bfloat16"})
    assert parsed.columns == ["Size (Bytes)", "Description", "Duration", "Throughput (Gbps)",
                              "BusBW (Gbps)", "Median", "P99", "Slowest", "Wrong"]
    (row,) = parsed.rows
    assert (row.size, row.numel, row.element_size, row.duration, row.throughput, row.busbw) == \
        ("2.0 MB", 1048576, 2, "1.500 ms", "2.500", "1.250")
    assert row.extra == ["1.400 ms", "2.000 ms", "2", "0"]


def test_raw_rows_print_integers_and_microseconds(capsys):
    comm = SimpleNamespace(global_rank=0)
    args = table_args(raw=True, bw_unit="GBps")
    table.print_header(args, "broadcast", 2, comm)
    table.print_row(args, comm, 4096, "1024x4", 2.5e-3, 1e9, 1e9)
    table.print_row(args, SimpleNamespace(global_rank=1), 8, "2x4", 1e-6, 1e9, 1e9)  # not rank 0
    (parsed,) = parse_tables(capsys.readouterr().out)
    assert parsed.columns[2:5] == ["Duration (us)", "Throughput (GBps)", "BusBW (GBps)"]
    assert [(r.size, r.duration) for r in parsed.rows] == [("4096", "2500.000")]
