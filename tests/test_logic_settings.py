"""The op scripts' settings in-process (commbench/settings.py): one field per flag, the parser's
defaults, frozen, made from any front end's Namespace, and the checks across flags. No ranks."""

import argparse
import dataclasses

import pytest

from commbench import defaults
from commbench.cli import benchmark_parser
from commbench.errors import UsageError
from commbench.settings import RankSettings, Settings, command_line

pytestmark = pytest.mark.fast

NOT_FLAGS = {"ops", "op_columns"}  # run_all.py's op flags gathered; set per run


def parse(*flags):
    return benchmark_parser().parse_args(list(flags))


def test_every_flag_is_a_field_and_every_field_a_flag():
    dests = set(vars(parse()))
    names = {f.name for f in dataclasses.fields(Settings)}
    assert dests - set(defaults.OPS) == names - NOT_FLAGS


def test_the_defaults_are_the_parsers_settled_ones():
    """A front end without a flag gets what the op scripts' command line would have given."""
    parsed = Settings.of(parse())
    assert parsed == Settings()
    assert Settings().maxsize == defaults.DEFAULT_MAXSIZE and Settings().max_windows is None


def test_settings_are_frozen_and_a_variant_is_a_new_one():
    settings = Settings.of(parse("--dtype", "float32,bfloat16"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.dtype = "int8"
    one = settings.but(dtype="bfloat16")
    assert (one.dtype, settings.dtype) == ("bfloat16", "float32,bfloat16")
    assert Settings.of(one) is one


def test_a_namespace_a_script_builds_gets_defaults_for_the_rest():
    """A script of the original's API may build its own Namespace: each missing field at its
    default. Another front end's settings are refused, not read by their fields' names."""
    settings = Settings.of(argparse.Namespace(trials=7, timeout=12.5, backend="gloo", hosts=4))
    assert (settings.trials, settings.timeout, settings.backend) == (7, 12.5, "gloo")
    assert (settings.op, settings.groups, settings.pin, settings.dtype) == \
        ("sum", None, False, defaults.DEFAULT_TYPE)
    assert not hasattr(settings, "hosts")
    from commbench.doctor.flags import parse as doctor_parse
    with pytest.raises(TypeError, match="DoctorSettings"):
        Settings.of(doctor_parse([]))


def test_the_op_scripts_rank_settings_are_theirs_field_by_field():
    settings = Settings.of(parse("--pin", "--op", "max", "--groups", "intra", "--timeout", "9"))
    ranks = settings.ranks()
    assert (ranks.pin, ranks.op, ranks.groups, ranks.timeout, ranks.dist) == \
        (True, "max", ("intra",), 9.0, settings.dist)
    assert dict(ranks.command_line)["trials"] == settings.trials  # the digest: every flag
    with pytest.raises(dataclasses.FrozenInstanceError):
        ranks.pin = False
    assert Settings().ranks() == RankSettings(command_line=command_line(Settings()))


@pytest.mark.parametrize("front", ["doctor", "replay", "parallel_bench"])
def test_a_front_ends_flag_named_like_a_setting_does_not_reach_the_ranks(front):
    """A front end with flags of its own named `pin` and `op` (the op scripts' --pin and --op):
    they reach its ranks' digest, never how its ranks start (comm.init_comm's RankSettings)."""
    made, argv = _front(front)
    namespace = made[1]().parse_args(argv)
    alike = {"pin": True, "op": "max", "groups": ["intra"], "split": (2, "rows"), "dtype": "int8"}
    given = argparse.Namespace(**{**alike, **vars(namespace)})  # parallel_bench's own --dtype
    ranks = made[2](given)
    assert (ranks.pin, ranks.op, ranks.groups, ranks.split) == (False, "sum", (), None)
    assert ranks.dtype == ("float32" if front == "parallel_bench" else defaults.DEFAULT_TYPE)
    assert ranks.timeout == namespace.timeout and ranks.device == namespace.device
    assert ("pin", True) in ranks.command_line and ("op", "max") in ranks.command_line


def _front(front):
    """(settings class, parser, rank_settings) of a front end, and its smallest argv."""
    from commbench.doctor import flags as doctor
    from commbench.strategies import flags as bench
    from commbench.trace import flags as replay
    return {"doctor": ((doctor.DoctorSettings, doctor.parser, doctor.rank_settings), []),
            "replay": ((replay.ReplaySettings, replay.parser, replay.rank_settings), ["trace"]),
            "parallel_bench": ((bench.BenchSettings, bench.parser, bench.rank_settings), [])
            }[front]


def test_op_flags_become_ops_in_the_registrys_order():
    settings = Settings.of(parse("--broadcast", "--all-reduce", "--barrier"))
    assert settings.ops == ("all_reduce", "broadcast", "barrier")
    assert Settings.of(parse()).ops == ()


def test_derived_defaults_are_settled_at_parse_time():
    settings = Settings.of(parse("--max-bytes", "1M"))
    assert (settings.scan, settings.min_bytes, settings.max_bytes, settings.step_factor) == \
        (True, defaults.DEFAULT_MIN_BYTES, 1 << 20, defaults.DEFAULT_STEP_FACTOR)
    settings = Settings.of(parse("--precision", "5%", "--check-every", "--split", "2"))
    assert settings.adaptive and settings.max_windows == defaults.DEFAULT_MAX_WINDOWS
    assert settings.check and settings.layouts == ["split"]
    assert Settings().layouts == ["world"] and not Settings().adaptive


@pytest.mark.parametrize("flags,words", [
    (("--minsize", "3", "--min-bytes", "8"), "exponents"),
    (("--minsize", "9", "--maxsize", "9"), "must be below --maxsize"),
    (("--min-bytes", "1M", "--max-bytes", "1K"), "is above --max-bytes"),
    (("--precision", "5%", "--repeat", "3"), "give one of them"),
    (("--max-windows", "9",), "give --precision too"),
    (("--compute-cpus", "0",), "give --overlap too"),
    (("--min-bytes", "2", "--dtype", "float32"), "below one element of float32"),
    (("--op", "avg", "--dtype", "float32,int32"), "integer dtype (int32)"),
])
def test_checks_across_flags_are_one_usage_line(flags, words):
    with pytest.raises(UsageError, match=None) as refused:
        parse(*flags)
    assert words in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("front", ["doctor", "replay", "parallel_bench"])
def test_each_front_ends_settings_hold_every_flag_of_its_parser(front):
    """doctor.py's, replay.py's and parallel_bench.py's command lines become typed, frozen
    settings: one field a flag (the doctor's topology read at parse time besides)."""
    from commbench.doctor.flags import parse
    from commbench.settings import frozen
    (cls, made, rank_settings), argv = _front(front)
    extra = {"topology_of"} if front == "doctor" else set()
    dests = set(vars(made().parse_args(argv)))
    assert {f.name for f in dataclasses.fields(cls)} == dests | extra
    settings = parse([]) if front == "doctor" else frozen(cls, made().parse_args(argv))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.timeout = 1
    assert rank_settings(settings).timeout == settings.timeout  # what the start-up reads of it


def test_the_layer_falls_back_to_torch_where_deepspeed_is_not_installed(monkeypatch, capsys):
    """--dist not given: deepspeed where DeepSpeed is installed; where it is not (a plain pip
    install), torch, with one note from the launcher's rank 0. A --dist given stays as given."""
    import importlib.util
    assert parse().dist == "deepspeed" and not capsys.readouterr().err
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "deepspeed" else real(name, *a))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert Settings.of(parse()).dist == "torch"
    note = capsys.readouterr().err
    assert note.count("\n") == 1 and "DeepSpeed is not installed" in note and \
        "commbench[deepspeed]" in note
    assert parse("--dist", "deepspeed").dist == "deepspeed"
    assert parse("--dist", "torch").dist == "torch" and not capsys.readouterr().err
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert parse().dist == "torch" and not capsys.readouterr().err  # rank 0 alone says it
    from commbench.doctor.flags import parse as doctor_parse
    assert doctor_parse([]).dist == "torch"
