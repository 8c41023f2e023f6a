"""LocalTimes reads naive datetimes as local time exactly as datetime.astimezone() does, in any zone.

Zones with DST gaps and repeated hours, half- and quarter-hour offsets and a
30-minute DST shift; every value of a year (every 53 min 13 s, both folds) and the
hours around each transition minute by minute must give astimezone()'s instant,
offset and zone name. No Postgres or Spark.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from rtm_lakebase.sink.local_time import LocalTimes

ZONES = ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "America/St_Johns",
         "Pacific/Chatham", "UTC")


@pytest.fixture
def local_zone(monkeypatch):
    def use(zone: str) -> None:
        monkeypatch.setenv("TZ", zone)
        time.tzset()

    yield use
    monkeypatch.undo()
    time.tzset()


def _same(got: dt.datetime, want: dt.datetime) -> bool:
    return (got == want and got.utcoffset() == want.utcoffset() and got.tzname() == want.tzname()
            and got.replace(tzinfo=None) == want.replace(tzinfo=None))


@pytest.mark.parametrize("zone", ZONES)
def test_every_value_of_a_year_is_read_as_astimezone_reads_it(zone, local_zone):
    local_zone(zone)
    convert = LocalTimes()
    step = dt.timedelta(minutes=53, seconds=13, microseconds=123)
    value, end = dt.datetime(2026, 1, 1), dt.datetime(2027, 1, 1)
    checked = 0
    while value < end:
        for fold in (0, 1):
            v = value.replace(fold=fold)
            assert _same(convert(v), v.astimezone()), (zone, v)
            checked += 1
        value += step
    assert checked > 19_000


@pytest.mark.parametrize("zone", ZONES)
def test_the_hours_around_each_transition_minute_by_minute(zone, local_zone):
    local_zone(zone)
    convert = LocalTimes()
    hour = dt.datetime(2026, 1, 1)
    previous = hour.astimezone().utcoffset()
    transitions = []
    while hour < dt.datetime(2027, 1, 1):  # find the hours where the offset changes
        offset = hour.astimezone().utcoffset()
        if offset != previous:
            transitions.append(hour)
        previous, hour = offset, hour + dt.timedelta(hours=1)
    for at in transitions:
        minute = at - dt.timedelta(hours=3)
        while minute < at + dt.timedelta(hours=3):
            for fold in (0, 1):
                v = (minute + dt.timedelta(seconds=59, microseconds=999_999)).replace(fold=fold)
                assert _same(convert(v), v.astimezone()), (zone, v)
                assert _same(convert(minute.replace(fold=fold)), minute.replace(fold=fold).astimezone())
            minute += dt.timedelta(minutes=1)
    assert zone in ("Asia/Kolkata", "UTC") or transitions  # the DST zones were exercised


def test_anything_but_a_naive_datetime_passes_unchanged(local_zone):
    local_zone("Europe/Berlin")
    convert = LocalTimes()
    aware = dt.datetime(2026, 3, 29, 2, 30, tzinfo=dt.UTC)
    for value in (None, aware, dt.date(2026, 1, 1), "2026-01-01 00:00", 5):
        assert convert(value) is value


def test_the_cache_is_bounded(local_zone):
    local_zone("Europe/Berlin")
    convert = LocalTimes(max_hours=3)
    for h in range(10):
        v = dt.datetime(2026, 5, 1) + dt.timedelta(hours=h)
        assert _same(convert(v), v.astimezone())
    assert len(convert._zones) <= 3
