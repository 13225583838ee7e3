"""--dist torch never imports DeepSpeed: with `import deepspeed` failing, all six tables print."""

from formulas import OPS


def test_dist_torch_runs_without_deepspeed(run, tmp_path):
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "__init__.py").write_text(
        "raise ImportError('deepspeed is hidden by this test')\n")
    result = run("run_all.py", "--dist=torch", "--scan", "--maxsize=4", "--trials=2", nproc=2,
                 env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result
    assert result.ops == OPS
    assert all(len(table.rows) == 3 for table in result.tables)
