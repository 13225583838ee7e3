"""Sweeps that respect the machine (issue 36, 1): a sweep past its ceiling (--mem-factor of a
rank's memory for its largest message, the single-size run's rule) is refused in one line with
exit status 2 before anything is measured, naming the flags that lift it; a redirected run says
where it is at least every progress.EVERY_S seconds."""

import re
import time

import pytest

from commbench import progress
from support import assert_no_traceback, launch

REFUSAL = re.compile(r"commbench: error: (--maxsize \d+|--max-bytes \d+) asks (\w+) for "
                     r"([\d.]+ \w+) per rank, past a sweep's ceiling of ([\d.]+) (\w+) \(([\d.]+) "
                     r"x the [\d.]+ \w+ a rank has: [^;]+; --mem-factor ([\d.]+)\); "
                     r"(--maxsize \d+|--max-bytes \d+) stays within it, a larger --mem-factor "
                     r"\(at most 1\) raises it")


def _refusal(result):
    assert result.returncode == 2, result
    assert_no_traceback(result)
    assert result.stdout.strip() == "" and not result.tables, result  # nothing measured
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, result
    found = REFUSAL.fullmatch(errors[0])
    assert found, errors[0]
    return found


@pytest.mark.parametrize("flags,asked", [(["--maxsize=40"], "2 TiB"),
                                         (["--min-bytes=8", "--max-bytes=1T"], "1 TiB")])
def test_a_sweep_past_its_ceiling_is_refused(flags, asked):
    found = _refusal(launch("all_reduce.py", "--scan", *flags, "--dist=torch"))
    flag, op, shown, _, _, factor, mem_factor, within = found.groups()
    assert (flag.split()[0], op, shown, factor, mem_factor) == (
        flags[-1].split("=")[0], "all_reduce", asked, "0.6", "0.3")
    # the flag it names keeps the largest message within the ceiling, and no larger one would
    ceiling = float(found.group(4)) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(found.group(5))
    value = int(within.split()[1])
    if flag.startswith("--maxsize"):  # 1 rank: the largest message is 2^(maxsize-1) floats
        assert 2 ** (value - 1) * 4 <= ceiling * 1.001 and 2 ** value * 4 > ceiling * 0.999
    else:
        assert value == pytest.approx(ceiling, rel=0.01)  # the ceiling shown to 4 figures


def test_run_all_refuses_before_its_first_op():
    # all_reduce's ceiling is twice the others' (no output buffer): at --maxsize 33 on 2 ranks
    # (64 GiB per rank) all_reduce alone might pass on a large machine; here every op is past.
    found = _refusal(launch("run_all.py", "--scan", "--maxsize=40", "--dist=torch", nproc=2))
    assert found.group(2) == "all_reduce"  # the first op, refused before any table


def test_a_redirected_run_says_where_it_is():
    # 3 sizes of 4 trials with rank 0 late by 1.2 s a trial: about 15 s, past EVERY_S once
    result = launch("all_reduce.py", "--scan", "--maxsize=4", "--trials=4", "--warmups=0",
                    "--dist=torch", env={"COMMBENCH_INJECT_DELAY": "0:1.2"})
    assert result.returncode == 0, result
    lines = [line for line in result.stderr.splitlines() if " sizes done in " in line]
    assert lines, result.stderr
    assert re.fullmatch(r"commbench: all_reduce: [0-2] of 3 sizes done in 1\d\.\d s; measuring "
                        r"\d+\.\d \w?B per rank for [\d.]+ s(; about \d+ s left at the last "
                        r"size's rate)?", lines[0]), lines
    assert [len(table.rows) for table in result.tables] == [3]


class _Comm:
    global_rank = 0


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.mark.fast
def test_progress_lines_come_after_silence_and_project_the_rest(monkeypatch):
    said = []
    monkeypatch.setattr(progress, "note", lambda comm, line: said.append(line))
    clock = _Clock()
    lines = progress.Lines(_Comm(), "all_gather", [1024, 2048, 4096, 8192], 4, every=10,
                           clock=clock)
    try:
        lines.begin(0)
        clock.now += 2
        lines.update()  # 2 s in: quiet
        assert said == []
        lines.begin(1)
        clock.now += 9
        lines.update()  # 11 s since the start: a line, the rest projected from 9 s for 2 KiB
        assert said == ["all_gather: 2 of 4 sizes done in 11.0 s; about 54 s left at the last "
                        "size's rate"]  # 9 x 2 (4 KiB) + 9 x 4 (8 KiB)
        lines.begin(2)
        clock.now += 9.4  # not yet 10 s since the last line; 9.4 s of the 18 s projected gone
        assert lines.line(clock.now) == ("all_gather: 2 of 4 sizes done in 20.4 s; measuring "
                                         "4.0 KB per rank for 9.4 s; about 45 s left at the "
                                         "last size's rate")
        # past it, the line comes without waiting for the size to finish (the watcher wakes
        # every second)
        clock.now += 1.6
        for _ in range(60):
            if len(said) > 1:
                break
            time.sleep(0.05)
        assert said[1:] == ["all_gather: 2 of 4 sizes done in 22.0 s; measuring 4.0 KB per "
                            "rank for 11.0 s; about 43 s left at the last size's rate"]
    finally:
        lines.close()


@pytest.mark.fast
def test_progress_of_repeated_or_adaptive_passes_counts_windows():
    clock = _Clock()
    repeated = progress.Lines(_Comm(), "broadcast", [8, 16], 6, every=1e9, clock=clock)
    adaptive = progress.Lines(_Comm(), "broadcast", [8, 16], None, every=1e9, clock=clock)
    try:
        for each in (repeated, adaptive):
            each.begin(0)
            clock.now += 1
            each.update()
        assert repeated.line(clock.now) == "broadcast: 1 of 6 windows done in 2.0 s"
        assert adaptive.line(clock.now) == "broadcast: 1 window done in 2.0 s"
    finally:
        repeated.close()
        adaptive.close()
