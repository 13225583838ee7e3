"""report.py strategy --measured on a recorded run: parallel_bench.py's six strategies at 2 ranks
(tests/fixtures/strategies_2ranks.jsonl) against the estimate priced on the curves of the same
ranks (tests/fixtures/curves_2ranks.jsonl). The estimate's model of what each strategy sends is
held to the measured bytes: where they differed (DeepSpeed's ZeRO-1/2 all-reduce, ZeRO-2 and
ZeRO-3 communicate every micro-batch, ZeRO-3 re-gathers only beyond its live-parameter limit)
the estimator was fixed, and this test keeps it so."""

import json
import subprocess
import sys

import pytest

from support import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
CURVES, RUNS = FIXTURES / "curves_2ranks.jsonl", FIXTURES / "strategies_2ranks.jsonl"


def report(*args):
    return subprocess.run([sys.executable, "report.py", "strategy", str(CURVES),
                           f"--measured={RUNS}", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def analysis():
    result = report("--format=json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def records():
    lines = [json.loads(line) for line in RUNS.read_text().splitlines()]
    return lines[0], {r["strategy"]: r for r in lines[1:]}


def test_every_strategy_measured_beside_its_estimate(analysis):
    meta, measured = records()
    rows = {row["strategy"]: row for row in analysis["rows"]}
    assert list(rows) == ["ddp", "zero1", "zero2", "zero3", "tp", "pp"]
    assert [rows[s]["plan"] for s in rows] == ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "TP=2", "PP=2"]
    for name, row in rows.items():
        record = measured[name]
        assert row["step_s"] == record["step_time_s"]["median"]
        assert row["memory_bytes"] == max(record["peak_memory_bytes_per_rank"])
        assert row["estimated_comm_s"] > 0 and row["estimated_step_s"] > row["compute_s"]
        # the estimate's bytes per step equal the measured ones, op by op (within 5%)
        assert row["bytes_ratio"] == pytest.approx(1, abs=0.05), (name, row["ops"])
        for op, figures in row["ops"].items():
            assert figures["bytes"] == pytest.approx(figures["estimated_bytes"], rel=0.05), op
        assert not row["estimated_only"], name


def test_what_measurement_showed_the_estimate(analysis):
    """The facts the estimator was fixed on, read from the recorded run itself."""
    meta, measured = records()
    gradients = meta["model"]["params"] * meta["model"]["element_size"]
    m, n = meta["model"]["micro_batches"], meta["world_size"]
    zero1, zero2, zero3 = (measured[s]["comm"] for s in ("zero1", "zero2", "zero3"))
    assert "reduce_scatter" not in zero1 and "reduce_scatter" not in zero2
    assert zero1["all_reduce"]["bytes"] == pytest.approx(gradients, rel=0.01)  # once a step
    assert zero2["all_reduce"]["bytes"] == pytest.approx(m * gradients, rel=0.01)  # per micro
    assert zero1["all_gather"]["bytes"] == pytest.approx(gradients / n, rel=0.01)
    # ZeRO-3 with stage3_max_live_parameters below the model: gathered in forward and backward
    assert zero3["all_gather"]["bytes"] == pytest.approx(2 * m * gradients / n, rel=0.05)
    assert zero3["reduce_scatter"]["bytes"] == pytest.approx(m * gradients, rel=0.01)


def test_markdown_tables_and_a_recommendation_from_the_figures(tmp_path):
    plot = tmp_path / "strategies.png"
    result = report(f"--plot={plot}")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for heading in ("### Measured against estimated", "### Against DDP (baseline)",
                    "### Communication per step, measured (rank 0)",
                    "### Where the estimate was wrong"):
        assert heading in text
    _, measured = records()
    best = max(measured.values(), key=lambda r: r["tokens_per_s"])
    names = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3",
             "tp": "TP=2", "pp": "PP=2"}
    assert f"Recommendation: {names[best['strategy']]} trains fastest by tokens/s, the figure " \
           f"it is picked by" in text
    assert f"{best['tokens_per_s']:.0f} tokens/s (a step of" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in result.stderr


def test_a_file_that_is_not_a_strategy_run_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, "report.py", "strategy", str(CURVES),
                             f"--measured={CURVES}"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"report.py: error: {CURVES}: no strategy runs in it (write "
                                      "one with parallel_bench.py --output)")
    result = subprocess.run([sys.executable, "report.py", "strategy", str(CURVES)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == ("report.py: error: give --params (the model's parameter "
                                      "count), or --measured RUNS")
