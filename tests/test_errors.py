"""Bad input and missing parts: one line on stderr, exit 2 (usage) or 1, no traceback, no hang."""

import pytest

from support import ROOT, usage_error


def assert_one_error_line(result, status, text):
    assert result.returncode == status, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("commbench: error:")]
    assert len(ours) == 1, result
    assert text in ours[0], result
    assert "Traceback" not in result.stderr, result
    assert result.tables == []


@pytest.mark.parametrize("args,text", [
    (["--dtype=foo"], "unknown dtype 'foo'"),
    (["--dtype=complex64"], "not supported"),
    (["--trials=0"], "--trials: must be >= 1"),
    (["--warmups=-1"], "--warmups: must be >= 0"),
    (["--mem-factor=0"], "--mem-factor: must be in (0, 1]"),
    (["--mem-factor=1.5"], "--mem-factor: must be in (0, 1]"),
    (["--maxsize=1"], "--maxsize: must be >= 2"),
    (["--bw-unit=MBps"], "--bw-unit"),
    (["--dist=horovod"], "--dist"),
    (["--no-such-flag"], "unrecognized arguments"),
])
@pytest.mark.fast
def test_usage_errors_exit_2(args, text):
    """In-process (the parser's UsageError, exit status 2); the line and the status a real
    rank prints for one of them: test_a_usage_error_is_one_line_from_a_real_rank."""
    assert text in usage_error(["--dist=torch", *args])


def test_a_usage_error_is_one_line_from_a_real_rank(run):
    result = run("all_reduce.py", "--dist=torch", "--trials=0")
    assert_one_error_line(result, 2, "--trials: must be >= 1")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("dist", ["torch", "deepspeed"])
def test_nccl_without_cuda(run, dist):
    result = run("all_reduce.py", "--backend=nccl", f"--dist={dist}")
    assert_one_error_line(result, 1, "--backend nccl needs CUDA")


def test_cuda_device_without_cuda(run):
    result = run("all_reduce.py", "--device=cuda", "--dist=torch")
    assert_one_error_line(result, 1, "no cuda device")


def test_mpi_backend_without_mpi_torch(run):
    result = run("all_reduce.py", "--backend=mpi", "--dist=torch")
    assert_one_error_line(result, 1, "built without MPI")


def test_pt2pt_with_one_rank(run):
    result = run("pt2pt.py", "--dist=torch", "--scan", "--maxsize=3")
    assert_one_error_line(result, 1, "pt2pt needs at least 2 ranks")


def test_deepspeed_missing(run, tmp_path):
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "__init__.py").write_text(
        "raise ImportError('No module named deepspeed (hidden by the test)')\n")
    result = run("all_reduce.py", "--scan", "--maxsize=3", env={"PYTHONPATH": str(tmp_path)})
    assert_one_error_line(result, 1, "--dist deepspeed needs DeepSpeed")
    assert "--dist torch" in result.stderr


def test_usage_error_on_every_rank_is_said_once(run):
    result = run("all_gather.py", "--dist=torch", "--dtype=bogus", nproc=3)
    assert result.returncode == 2, result
    ours = [line for line in result.stderr.splitlines() + result.stdout.splitlines()
            if line.startswith("commbench: error:")]
    assert ours == ["commbench: error: argument --dtype: unknown dtype 'bogus': use a torch dtype "
                    "name such as float, half, bfloat16, double, int8, uint8, int32 or long "
                    "(see --help)"]
    assert "Traceback" not in result.stderr


def test_usage_error_under_torchrun_comes_from_rank_0(run):
    result = run("all_reduce.py", "--dist=torch", "--trials=0", nproc=2, launcher="torchrun")
    assert result.returncode != 0
    assert result.stderr.count("commbench: error: argument --trials") == 1
    # torchrun's agent prints its own report; none of our files appears in a traceback.
    frames = [line for line in result.stderr.splitlines() if 'File "' in line]
    assert frames, "torchrun reports a failed child with its own traceback"
    assert not [line for line in frames if f'"{ROOT}/' in line and "/.venv/" not in line]


def test_deepspeed_extension_cannot_be_built(run, tmp_path):
    """DeepSpeed JIT-builds its CPU communication op at start-up; with no working compiler
    (CXX=/bin/false) and an empty extensions folder, that is one line, not its traceback."""
    result = run("all_reduce.py", "--dist=deepspeed", "--scan", "--maxsize=2",
                 env={"CXX": "/bin/false", "TORCH_EXTENSIONS_DIR": str(tmp_path)})
    assert_one_error_line(result, 1, "rank 0: DeepSpeed could not build its CPU communication "
                                     "extension")
    assert "or use --dist torch" in result.stderr
