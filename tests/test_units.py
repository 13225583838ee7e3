"""Pure functions of the harness: launcher discovery, node lists, size and duration formatting."""

import argparse

import pytest

from commbench import dtypes, errors, table
from commbench.ranks import launch
from commbench.bench import memory, sizes

pytestmark = pytest.mark.fast

DISCOVERY = [
    ({}, ("none", 0, 0, 1)),
    ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}, ("torchrun/deepspeed", 3, 1, 4)),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_SIZE": "3"},
     ("Open MPI", 2, 0, 3)),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}, ("MPICH/Intel MPI", 1, 1, 2)),
    ({"MV2_COMM_WORLD_RANK": "5", "MV2_COMM_WORLD_LOCAL_RANK": "1", "MV2_COMM_WORLD_SIZE": "8"},
     ("MVAPICH", 5, 1, 8)),
    ({"SLURM_PROCID": "2", "SLURM_LOCALID": "2", "SLURM_NTASKS": "3"}, ("Slurm", 2, 2, 3)),
    ({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NPROCS": "2"}, ("Slurm", 1, 1, 2)),
    # torchrun inside an srun allocation: torchrun's variables win.
    ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "5", "SLURM_LOCALID": "0",
      "SLURM_NTASKS": "8"}, ("torchrun/deepspeed", 0, 0, 2)),
]


@pytest.mark.parametrize("environ,expected", DISCOVERY)
def test_discovery(environ, expected):
    env = launch.discover_launch_env(environ)
    assert (env.launcher, env.rank, env.local_rank, env.world_size) == expected


@pytest.mark.parametrize("environ,text", [
    ({"RANK": "1"}, "WORLD_SIZE missing"),
    ({"WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK missing"),
    ({"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "not below"),
    ({"RANK": "abc", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "not an integer"),
    ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "0"}, "must be >= 1"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "LOCAL_RANK missing"),
    ({"PMI_RANK": "0", "MPI_LOCALRANKID": "0"}, "PMI_SIZE missing"),
    ({"SLURM_PROCID": "0", "SLURM_LOCALID": "0"}, "SLURM_NTASKS or SLURM_NPROCS missing"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
      "OMPI_COMM_WORLD_LOCAL_RANK": "-1"}, "must be >= 0"),
])
def test_discovery_rejects_partial_or_contradictory(environ, text):
    with pytest.raises(errors.UsageError, match=text):
        launch.discover_launch_env(environ)


def test_local_rank_argument():
    env = launch.discover_launch_env({"RANK": "1", "WORLD_SIZE": "2"}, local_rank_arg=1)
    assert env.local_rank == 1
    with pytest.raises(errors.UsageError, match="contradicts"):
        launch.discover_launch_env({"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, local_rank_arg=1)


@pytest.mark.parametrize("nodelist,hosts", [
    ("node1", ["node1"]),
    ("node[03-05,07]", ["node03", "node04", "node05", "node07"]),
    ("a[1-2],b3,c[09-10]", ["a1", "a2", "b3", "c09", "c10"]),
    ("gpu-[1-2]-ib", ["gpu-1-ib", "gpu-2-ib"]),
])
def test_expand_nodelist(nodelist, hosts):
    assert launch.expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("environ,where,address", [
    ({"MASTER_ADDR": "10.1.2.3"}, launch.LaunchEnv("Slurm", 0, 0, 8), "10.1.2.3"),
    ({}, launch.LaunchEnv("none", 0, 0, 1), "127.0.0.1"),
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, launch.LaunchEnv("Open MPI", 1, 1, 4), "127.0.0.1"),
    ({"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[07-08]"},
     launch.LaunchEnv("Slurm", 3, 1, 4), "node07"),
    ({"SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "node07"},
     launch.LaunchEnv("Slurm", 1, 1, 2), "127.0.0.1"),
])
def test_master_address(environ, where, address):
    assert launch.master_address(environ, where) == address


@pytest.mark.parametrize("value,ok", [("29500", True), ("99999", False), ("0", False), ("x", False)])
def test_master_port(value, ok):
    if ok:
        assert launch.master_port({"MASTER_PORT": value}) == int(value)
    else:
        with pytest.raises(errors.UsageError, match="MASTER_PORT"):
            launch.master_port({"MASTER_PORT": value})


@pytest.mark.parametrize("size,text", [
    (0, "0B"), (8, "8.0 B"), (1023, "1023.0 B"), (1024, "1.0 KB"), (32 * 1024, "32.0 KB"),
    (1536 * 1024, "1.5 MB"), (2 ** 30, "1.0 GB"), (3 * 2 ** 40, "3.0 TB"), (12345, "12.06 KB"),
])
def test_convert_size(size, text):
    assert table.convert_size(size) == text


@pytest.mark.parametrize("raw,duration,text", [
    (False, 12.3456e-6, "12.346 us"), (False, 999.9994e-6, "999.999 us"), (False, 1.5e-3, "1.500 ms"),
    (False, 2.0, "2000.000 ms"), (True, 1.5e-3, "1500.000"), (True, 3e-6, "3.000"),
])
def test_duration_strings(raw, duration, text):
    args = argparse.Namespace(raw=raw)
    assert table.get_metric_strings(args, 1.23456e9, 2e9, duration) == ("1.235", "2.000", text)


def test_scan_numels():
    assert sizes.scan_numels(3, 5) == [6, 12, 24, 48]


@pytest.mark.parametrize("name,ok", [("float", True), ("half", True), ("bfloat16", True),
                                     ("long", True), ("uint8", True), ("bool", False),
                                     ("complex64", False), ("Tensor", False), ("floaty", False),
                                     ("__import__('os')", False)])
def test_dtype_names(name, ok):
    if ok:
        assert dtypes.get_dtype(name).is_floating_point in (True, False)
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            dtypes.get_dtype(name)


def test_read_field_reads_proc_and_cgroup_formats(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000 kB\nMemAvailable:     123 kB\n")
    stat = tmp_path / "memory.stat"
    stat.write_text("cache 8192\ntotal_inactive_file 4096\ninactive_file 1\n")
    assert memory.read_field(str(meminfo), "MemAvailable") == 123 * 1024
    assert memory.read_field(str(stat), "total_inactive_file") == 4096
    assert memory.read_field(str(stat), "inactive_file") == 1  # a whole key, not a suffix
    assert memory.read_field(str(stat), "rss") is None
    assert memory.read_field(str(tmp_path / "absent"), "rss") is None
