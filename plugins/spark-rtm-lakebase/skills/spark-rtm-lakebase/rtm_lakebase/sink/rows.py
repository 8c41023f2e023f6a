"""Rows to values: match every row to the sink's columns by name, and check values per flush.

:class:`RowLayout` turns a Spark ``Row``, a mapping, or a plain tuple (with
``columns=`` set) into a tuple in the sink's column order. Fields are matched
by *name* on every row, not by the position the first row had; a row missing
a column, carrying a field the sink does not know (when the columns were taken
from the first row), or a tuple of the wrong length raises :class:`BadRowError`.

:class:`ValueChecks` looks at one flush column by column before it is sent and
names the first value the column cannot take: a Python type the column's
Postgres type does not accept (a ``float`` for a ``bigint`` would be rounded,
a ``bool`` cannot be cast), text Postgres cannot store (NUL, lone
surrogates), naive and aware datetimes in one column, NaN in a key or version
column (neither Python's dedup nor the version comparison can order it).
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from operator import itemgetter
from typing import Any

from rtm_lakebase.sink.errors import BadRowError, SinkError

_NONE = type(None)

#: Python types each Postgres type takes (``format_type`` names without modifiers).
#: Types not listed take any value and leave the check to Postgres.
_INTEGERS = frozenset({int})
ACCEPTED: dict[str, frozenset[type]] = {
    "smallint": _INTEGERS, "integer": _INTEGERS, "bigint": _INTEGERS,
    "real": frozenset({float, int}), "double precision": frozenset({float, int}),
    "numeric": frozenset({Decimal, int, float}),
    "boolean": frozenset({bool}),
    "text": frozenset({str}), "character varying": frozenset({str}), "character": frozenset({str}),
    "name": frozenset({str}), "citext": frozenset({str}),
    "bytea": frozenset({bytes, bytearray, memoryview}),
    "date": frozenset({dt.date}),
    "timestamp without time zone": frozenset({dt.datetime}),
    "timestamp with time zone": frozenset({dt.datetime}),
    # Spark has no type for these: their text ('13:45', '1 day 02:00') is parsed by Postgres, as an INSERT would.
    "time without time zone": frozenset({dt.time, str}), "time with time zone": frozenset({dt.time, str}),
    "interval": frozenset({dt.timedelta, str}),
    "uuid": frozenset({str, uuid.UUID}),
}
#: An array column takes a list (of lists, for more dimensions); Postgres checks the elements.
_ARRAYS: frozenset[type] = frozenset({list, tuple})


def _to_decimal(value: Any) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(repr(value) if type(value) is float else value)


#: One Python type per array: columns that take several are unified (as Postgres would convert them).
_UNIFY: dict[str, Callable[[Any], Any]] = {"real": float, "double precision": float, "numeric": _to_decimal,
                                           "uuid": str}
#: Subclasses that must not pass as their base: a bool is no integer here, a datetime no date.
_REFUSED_SUBCLASSES = {int: bool, dt.date: dt.datetime}


def _is_nan(value: Any) -> bool:
    if type(value) is float:
        return math.isnan(value)
    if isinstance(value, Decimal):
        return value.is_nan()
    return False


def _describe_key(key: Mapping[str, Any] | None) -> str:
    if not key:
        return "(key unknown)"
    return ", ".join(f"{k}={v!r}" for k, v in key.items())


class RowLayout:
    """Row → tuple of values in ``columns`` order, matched by field name on every row.

    ``exact``: the columns were taken from the first row, so every row must
    carry exactly those fields (any order). Otherwise ``columns`` were given and
    other fields of a named row are ignored.
    """

    def __init__(self, columns: Sequence[str], key_columns: Sequence[str] = (), exact: bool = False):
        self.columns = tuple(columns)
        self.key_columns = tuple(key_columns)
        self.exact = exact
        self._width = len(self.columns)
        self._pick_by_name = itemgetter(*self.columns) if self._width > 1 else None
        self._fields: Any = None  # the __fields__ object of the last named row seen
        self._names: tuple[str, ...] | None = None  # ... and its names
        self._pick: Callable[[tuple], tuple] = tuple

    @classmethod
    def for_first_row(cls, row: Any, columns: Sequence[str] | None,
                      key_columns: Sequence[str] = ()) -> RowLayout:
        """Columns as given, or else the first row's field names."""
        if columns:
            return cls(columns, key_columns, exact=False)
        names = field_names(row)
        if names is None:
            raise SinkError("rows are plain sequences without field names: set columns=(…) in the sink settings")
        if len(set(names)) != len(names):
            raise SinkError(f"the first row has a field name twice: {list(names)}")
        return cls(names, key_columns, exact=True)

    def values(self, row: Any) -> tuple:
        """The row's values in column order, or :class:`BadRowError` naming its key and the column."""
        kind = type(row)
        if kind is tuple:  # a plain tuple (columns= set)
            if len(row) != self._width:
                return self._from_sequence(row)  # raises
            return row
        if kind is dict:
            return self._from_mapping(row)
        if isinstance(row, tuple):
            fields = getattr(row, "__fields__", None)
            if fields is None:
                return self._from_sequence(row)
            if fields is not self._fields:
                self._learn_fields(row, fields)
            values = self._pick(row)
            if len(row) != len(fields):
                raise self._error(row, None, f"has {len(row)} values for {len(fields)} fields")
            return values
        if isinstance(row, Mapping):
            return self._from_mapping(row)
        if isinstance(row, (list, Sequence)) and not isinstance(row, (str, bytes)):
            return self._from_sequence(tuple(row))
        raise BadRowError(f"row of type {type(row).__name__} is neither a Row, a mapping nor a sequence",
                          key=None, column=None)

    # -- the three row shapes ---------------------------------------------------
    def _from_mapping(self, row: Mapping) -> tuple:
        if self.exact and len(row) != self._width:
            extra = [k for k in row if k not in self.columns]
            if extra:
                raise self._error(row, str(extra[0]), "has a field the sink's columns do not have")
        try:
            if self._pick_by_name is None:
                return (row[self.columns[0]],)
            return self._pick_by_name(row)
        except KeyError:
            missing = next(c for c in self.columns if c not in row)
            raise self._error(row, missing, "has no value for this column") from None

    def _from_sequence(self, row: tuple) -> tuple:
        if len(row) != self._width:
            column = self.columns[len(row)] if len(row) < self._width else None
            raise self._error(row, column, f"has {len(row)} values for {self._width} columns "
                                           f"{list(self.columns)}")
        return row if type(row) is tuple else tuple(row)

    def _learn_fields(self, row: tuple, fields: Any) -> None:
        """A named row with fields not seen before: work out where each column is."""
        names = tuple(fields)
        if names == self._names:  # the same fields in a new object
            self._fields = fields
            return
        missing = [c for c in self.columns if c not in names]
        if missing:
            raise self._error(row, missing[0], "has no value for this column")
        if self.exact and len(names) != self._width:
            extra = next(n for n in names if n not in self.columns)
            raise self._error(row, extra, "has a field the sink's columns do not have")
        if len(set(names)) != len(names):
            raise self._error(row, None, f"has a field name twice: {list(names)}")
        picks = tuple(names.index(c) for c in self.columns)
        if picks == tuple(range(len(names))):
            self._pick = tuple
        elif len(picks) == 1:
            self._pick = lambda r, _i=picks[0]: (r[_i],)
        else:
            self._pick = itemgetter(*picks)
        self._fields, self._names = fields, names

    # -- messages ---------------------------------------------------------------
    def key_of_row(self, row: Any) -> dict[str, Any] | None:
        """The row's key by name, as far as the row has it (for messages)."""
        names = field_names(row)
        if names is not None and isinstance(row, Mapping):
            found = {k: row[k] for k in self.key_columns if k in row}
        elif names is not None:
            found = {k: row[names.index(k)] for k in self.key_columns if k in names and names.index(k) < len(row)}
        elif isinstance(row, (tuple, list)):
            found = {k: row[self.columns.index(k)] for k in self.key_columns
                     if k in self.columns and self.columns.index(k) < len(row)}
        else:
            found = {}
        return found or None

    def _error(self, row: Any, column: str | None, problem: str) -> BadRowError:
        key = self.key_of_row(row)
        where = f" at column {column}" if column else ""
        return BadRowError(f"row with key {_describe_key(key)} rejected{where}: the row {problem} "
                           f"(sink columns {list(self.columns)}); the row was not buffered",
                           key=key, column=column)


def field_names(row: Any) -> tuple[str, ...] | None:
    """Field names of a Spark ``Row`` or a mapping; ``None`` for a plain sequence."""
    if isinstance(row, Mapping):
        return tuple(row.keys())
    fields = getattr(row, "__fields__", None) if isinstance(row, tuple) else None
    return tuple(fields) if fields is not None else None


class ValueChecks:
    """Per flush, per column: the first value the column cannot take.

    ``types``: the Postgres type of each column (``format_type`` without
    modifiers), in column order. ``ordered``: indexes of key and version
    columns, where NaN is refused. Remembers, per datetime column, whether the
    writer has been sending naive or aware values, so a later flush cannot
    switch silently.
    """

    def __init__(self, columns: Sequence[str], types: Sequence[str], ordered: Iterable[int] = ()):
        self.columns = tuple(columns)
        self.types = tuple(types)
        self._accepted = [ACCEPTED.get(t) or (_ARRAYS if t.endswith("[]") else None) for t in self.types]
        self._ordered = frozenset(ordered)
        self._aware: dict[int, bool] = {}  # column index → datetimes seen so far are aware

    def first_problem(self, arrays: Sequence[list]) -> tuple[int, int, str] | None:
        """``(row index, column index, reason)`` of the first bad value, or ``None``.

        Columns of several accepted Python types (``int`` and ``float`` for a
        ``double precision``) are unified in place, as Postgres would convert them.
        """
        for ci, column in enumerate(arrays):
            found = self._check_column(ci, column)
            if found is not None:
                return found
        return None

    def _check_column(self, ci: int, column: Sequence) -> tuple[int, int, str] | None:
        kinds = set(map(type, column))
        kinds.discard(_NONE)
        accepted = self._accepted[ci]
        if accepted is not None and not kinds <= accepted and not self._all_subclasses(kinds, accepted):
            return self._find(ci, column, self._wrong_type)
        if len(kinds) > 1:  # psycopg sends one array type per column
            unify = _UNIFY.get(self.types[ci])
            if unify is None:
                first = type(next(v for v in column if v is not None))
                return self._find(ci, column, lambda _ci, v: None if type(v) is first else (
                    f"{type(v).__name__} value {_short(v)} where earlier rows of this flush have "
                    f"{first.__name__}: use one Python type per column"))
            unified = [v if v is None else unify(v) for v in column]
            if isinstance(column, list):
                column[:] = unified  # in place: the unified array is the one sent
            column = unified
            kinds = set(map(type, column))
            kinds.discard(_NONE)
        if str in kinds and not self._text_ok(column, kinds):
            return self._find(ci, column, _bad_text)
        if dt.datetime in kinds or dt.time in kinds:
            aware = {v.tzinfo is not None for v in column if type(v) in (dt.datetime, dt.time)}
            before = self._aware.get(ci)
            if len(aware) > 1 or (before is not None and aware != {before}):
                return self._find(ci, column, self._mixed_zone)
            if aware:
                self._aware[ci] = aware.pop()
        if ci in self._ordered and (float in kinds or Decimal in kinds):
            if any(map(_is_nan, column)):
                return self._find(ci, column, lambda _ci, v: "NaN cannot be ordered or compared; "
                                  "a key or version must be a number" if _is_nan(v) else None)
        return None

    @staticmethod
    def _all_subclasses(kinds: set[type], accepted: frozenset[type]) -> bool:
        return all(any(issubclass(k, a) and not issubclass(k, _REFUSED_SUBCLASSES.get(a, ())) for a in accepted)
                   for k in kinds)

    @staticmethod
    def _text_ok(column: list, kinds: set[type]) -> bool:
        try:
            text = "".join(column) if kinds == {str} else "".join(v for v in column if type(v) is str)
        except TypeError:  # None among the values
            text = "".join(v for v in column if type(v) is str)
        if "\x00" in text:
            return False
        if text.isascii():
            return True
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    def _find(self, ci: int, column: list, problem: Callable[[int, Any], str | None]) -> tuple[int, int, str]:
        for ri, value in enumerate(column):
            if value is None:
                continue
            reason = problem(ci, value)
            if reason:
                return ri, ci, reason
        return 0, ci, "bad value"  # not reached: the column was flagged for a value problem() names

    def _wrong_type(self, ci: int, value: Any) -> str | None:
        accepted = self._accepted[ci]
        kind = type(value)
        if accepted is None or kind in accepted or self._all_subclasses({kind}, accepted):
            return None
        names = " or ".join(sorted(a.__name__ for a in accepted))
        return (f"{kind.__name__} value {_short(value)} where the column ({self.types[ci]}) takes {names}; "
                "convert it before the sink")

    def _mixed_zone(self, ci: int, value: Any) -> str | None:
        if type(value) not in (dt.datetime, dt.time):
            return None
        aware = value.tzinfo is not None
        expected = self._aware.get(ci)
        if expected is None:
            self._aware[ci] = expected = aware  # the first one in the column sets the rule
        if aware == expected:
            return None
        return (f"{'aware' if aware else 'naive'} {type(value).__name__} {_short(value)} in a column that "
                f"has {'aware' if expected else 'naive'} ones; use one kind per column")


def _bad_text(_ci: int, value: Any) -> str | None:
    if type(value) is not str:
        return None
    if "\x00" in value:
        return f"text {_short(value)} contains NUL (\\x00), which Postgres text cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"text {_short(value)} is not valid Unicode ({exc.reason} at position {exc.start})"
    return None


def _short(value: Any) -> str:
    text = ascii(value)
    return text if len(text) <= 80 else text[:77] + "..."
