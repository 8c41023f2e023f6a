"""The rows waiting for the next flush: one per key, handed over sorted by key.

A key seen again replaces the buffered row ("last row wins"), except with a
version column, where only a strictly newer version replaces it (on equal
versions the first row stays, as the statement's guard does across flushes),
and in ``insert_ignore`` mode, where the first row stays. So one statement
never touches a key twice. ``take()`` returns the rows sorted by key: every
task then locks the keys it shares with another task in the same order, so
two tasks with overlapping keys wait for each other instead of deadlocking.
Append mode has no key: rows are kept as they come.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from rtm_lakebase.sink.errors import BadRowError
from rtm_lakebase.sink.rows import _describe_key, _is_nan, _short


class RowBuffer:
    """Rows (value tuples in column order) buffered for one flush."""

    def __init__(self, columns: Sequence[str], key_columns: Sequence[str] = (),
                 version_column: str | None = None, first_wins: bool = False,
                 key_forms: Mapping[str, Callable[[Any], Any]] | None = None):
        self.columns = tuple(columns)
        self.key_columns = tuple(key_columns)
        self._key_idx = tuple(self.columns.index(k) for k in self.key_columns)
        self._key_of = itemgetter(*self._key_idx) if self._key_idx else None
        if self._key_idx and key_forms and any(k in key_forms for k in self.key_columns):
            # Keys Postgres holds equal must be one key here too ('abc' and 'abc  ' in a char(n) key).
            forms = [(i, key_forms.get(k)) for k, i in zip(self.key_columns, self._key_idx, strict=True)]
            if len(forms) == 1:
                (i, form), = forms
                self._key_of = lambda v, _i=i, _f=form: _f(v[_i]) if v[_i] is not None else None
            else:
                self._key_of = lambda v: tuple(f(v[i]) if f is not None and v[i] is not None else v[i]
                                               for i, f in forms)
        self._composite = len(self._key_idx) > 1
        self._version_idx = self.columns.index(version_column) if version_column else None
        self._first_wins = first_wins
        self._rows: dict[Any, tuple] | list[tuple] = {} if self._key_of else []
        self.oldest: float | None = None  # time.monotonic() of the oldest buffered row (set by the caller)
        self.deduplicated = 0

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, values: tuple) -> int:
        """Buffer one row; returns the number of rows (keys) now buffered."""
        rows = self._rows
        key_of = self._key_of
        if key_of is None:
            rows.append(values)
            return len(rows)
        key = key_of(values)
        if key is None or (self._composite and None in key):
            raise self._bad(values, next(k for k, i in zip(self.key_columns, self._key_idx, strict=True) if values[i] is None),
                            "key column is null")
        try:
            previous = rows.setdefault(key, values)
        except TypeError as exc:  # an unhashable key value, e.g. a list
            raise self._bad(values, self._key_column_of(values), f"key value cannot be a dict key ({exc})") from None
        if previous is not values:
            self.deduplicated += 1
            if self._replaces(previous, values):
                rows[key] = values
        return len(rows)

    def take(self) -> list[tuple]:
        """The buffered rows, sorted by key (one global lock order), and an empty buffer."""
        rows, self.oldest = self._rows, None
        if isinstance(rows, list):
            self._rows = []
            return rows
        self._rows = {}
        try:
            keys = sorted(rows)
        except TypeError:  # keys of types Python cannot order together: any fixed order will do
            keys = sorted(rows, key=lambda k: (type(k).__name__, repr(k)))
        return [rows[k] for k in keys]

    def clear(self) -> None:
        self._rows = [] if self._key_of is None else {}
        self.oldest = None

    def key(self, values: tuple) -> dict[str, Any] | None:
        """The key of a buffered row, by column name."""
        if not self._key_idx:
            return None
        return {k: values[i] for k, i in zip(self.key_columns, self._key_idx, strict=True)}

    # -- the dedup rule -----------------------------------------------------------
    def _replaces(self, previous: tuple, new: tuple) -> bool:
        if self._first_wins:
            return False  # as ON CONFLICT DO NOTHING
        vi = self._version_idx
        if vi is None:
            return True  # last row wins
        old_v, new_v = previous[vi], new[vi]
        for values, v in ((new, new_v), (previous, old_v)):
            if v is not None and _is_nan(v):
                raise self._bad(values, self.columns[vi], "version is NaN, which cannot be ordered")
        if new_v is None:
            return False
        if old_v is None:
            return True
        try:
            return bool(new_v > old_v)
        except (TypeError, ArithmeticError) as exc:
            raise self._bad(new, self.columns[vi], f"version {_short(new_v)} cannot be compared with the "
                            f"buffered version {_short(old_v)} of the same key ({exc})") from None

    def _key_column_of(self, values: tuple) -> str:
        for k, i in zip(self.key_columns, self._key_idx, strict=True):
            try:
                hash(values[i])
            except TypeError:
                return k
        return self.key_columns[0]

    def _bad(self, values: tuple, column: str, problem: str) -> BadRowError:
        key = self.key(values)
        return BadRowError(f"row with key {_describe_key(key)} rejected at column {column}: {problem}",
                           key=key, column=column)
