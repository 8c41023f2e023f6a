"""Naive datetimes read as local wall-clock time, exactly as ``datetime.astimezone()`` reads them, for less.

Spark hands a ``TimestampType`` value to a Python writer as a naive datetime in
the worker's local time; a ``timestamptz`` column needs the instant, so the
writer reads it in that zone (``astimezone()``). That asks the C library for the
local offset of every value, the largest single cost of flushing such rows
(``benchmarks/sink_profile.py --shape typed``). The offset only changes at a
zone transition: :class:`LocalTimes` asks once per hour of wall-clock time and
reuses the answer within that hour, unless the hour holds a transition (its
start, middle and end, with either ``fold``, do not all agree), where each value
is read on its own. Either way the result is ``astimezone()``'s: the same
instant, offset and zone name.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

_TO_END_OF_HOUR = dt.timedelta(minutes=59, seconds=59, microseconds=999_999)
_PROBES = (dt.timedelta(0), dt.timedelta(minutes=30), _TO_END_OF_HOUR)


class LocalTimes:
    """``LocalTimes()(value)``: an aware datetime for a naive one (local time), anything else unchanged."""

    def __init__(self, max_hours: int = 4096):
        self._zones: dict[int, dt.tzinfo | None] = {}  # hour number -> its zone, None: a transition inside
        self._max_hours = max_hours

    def __call__(self, value: Any) -> Any:
        if type(value) is not dt.datetime or value.tzinfo is not None:
            return value
        hour = value.toordinal() * 24 + value.hour
        zone = self._zones.get(hour, False)
        if zone is False:
            if len(self._zones) >= self._max_hours:
                self._zones.clear()
            zone = self._zones[hour] = _zone_of_hour(value)
        if zone is None:
            return value.astimezone()
        # the constructor, positionally: a third of what value.replace(tzinfo=zone) costs
        return dt.datetime(value.year, value.month, value.day, value.hour, value.minute, value.second,
                           value.microsecond, zone)


def _zone_of_hour(value: dt.datetime) -> dt.tzinfo | None:
    """The local zone (offset and name) of the whole hour holding ``value``; None when it changes within it."""
    start = value.replace(minute=0, second=0, microsecond=0, fold=0)
    try:
        seen = {(local.utcoffset(), local.tzname())
                for probe in _PROBES for fold in (0, 1)
                for local in ((start + probe).replace(fold=fold).astimezone(),)}
        return start.astimezone().tzinfo if len(seen) == 1 else None
    except (OverflowError, OSError, ValueError):  # the edges of the datetime range: leave them to astimezone()
        return None
