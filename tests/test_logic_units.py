"""units.py: the one size and one duration every report and note writes (the op scripts' table
keeps the original's, tests/test_units.py)."""

import pytest

from commbench import units

pytestmark = pytest.mark.fast

KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@pytest.mark.parametrize("nbytes,shown", [
    (0, "0 B"), (8, "8 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1 KiB"),
    (1536, "1.5 KiB"), (12345, "12.06 KiB"), (1023 * KIB, "1023 KiB"),
    # a size that rounds to 1024 of a unit is shown in the next
    (1048524, "1 MiB"), (1048572, "1 MiB"), (1048575, "1 MiB"), (MIB, "1 MiB"),
    (MIB + MIB // 2, "1.5 MiB"), (16 * MIB, "16 MiB"), (300 * MIB, "300 MiB"),
    (GIB - 1, "1 GiB"), (GIB, "1 GiB"), (5 * GIB, "5 GiB"), (2e9, "1.863 GiB"),
    (TIB, "1 TiB"), (3 * TIB, "3 TiB"), (1024 * TIB, "1024 TiB"),
])
def test_size_is_1024_based_with_four_significant_digits(nbytes, shown):
    assert units.size(nbytes) == shown


def test_size_of_a_float_of_whole_bytes_reads_as_the_integer():
    assert units.size(512.0) == "512 B" and units.size(2.0 ** 21) == "2 MiB"


@pytest.mark.parametrize("seconds,shown", [
    (None, "-"), (0, "0.000 us"), (5e-6, "5.000 us"), (12.3456e-6, "12.346 us"),
    (999e-6, "999.000 us"), (1e-3, "1.000 ms"), (1.5e-3, "1.500 ms"), (0.5, "500.000 ms"),
    (0.9999, "999.900 ms"), (999.9996e-6, "1.000 ms"), (0.9999996, "1.000 s"),
    (1.0, "1.000 s"), (2.9107, "2.911 s"), (75.0, "75.000 s"),
])
def test_duration_is_us_below_a_millisecond_ms_below_a_second_s_above(seconds, shown):
    assert units.duration(seconds) == shown


def test_a_negative_duration_keeps_the_unit_of_its_size():
    assert units.duration(-15.4e-6) == "-15.400 us" and units.duration(-2e-3) == "-2.000 ms"


@pytest.mark.parametrize("seconds,shown", [(2.5e-5, "25.0 us"), (999.96e-6, "1.0 ms"),
                                           (1.2345e-3, "1.2 ms"), (12.36, "12.4 s")])
def test_fewer_decimals_when_asked_the_units_unchanged(seconds, shown):
    """doctor.py's latencies: 1 decimal, the unit still chosen by the size of the figure."""
    assert units.duration(seconds, 1) == shown
