"""--dist torch needs torch alone: with numpy made unimportable (torch's wheel does not install
it), the ranks start, exchange their host names and measure; no "Numpy is not available"."""

import pytest

from conftest import assert_no_traceback


@pytest.mark.parametrize("nproc", [1, 3])
def test_dist_torch_runs_without_numpy(run, tmp_path, nproc):
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
    probe = run("all_reduce.py", "--help", env={"PYTHONPATH": str(tmp_path)})
    assert probe.returncode == 0
    result = run("run_all.py", "--dist=torch", "--scan", "--maxsize=4", "--trials=2", "--check",
                 nproc=nproc, env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result
    assert_no_traceback(result)
    assert "Numpy is not available" not in result.stderr
    # torch warns at import without numpy; the suite silences it in its ranks (torchrun, a
    # torch program of its own, still says it once).
    assert result.stderr.count("Failed to initialize NumPy") == (0 if nproc == 1 else 1)
    assert f"{nproc} rank{'s' if nproc > 1 else ''} on 1 host(s)" in result.stderr
    assert all(row.extra == ["0"] for table in result.tables for row in table.rows)
