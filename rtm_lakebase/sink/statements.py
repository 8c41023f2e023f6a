"""SQL for the Postgres foreach writer, composed with ``psycopg.sql`` (identifiers are always quoted).

Three write statements, one per sink mode:

- upsert: ``INSERT … SELECT … FROM unnest(%b::type[], …) ON CONFLICT (key) DO
  UPDATE SET … WHERE …`` — one statement per flush whatever the row count, one
  array parameter per column, sent in binary. The ``WHERE`` skips no-op
  updates (``IS DISTINCT FROM``, per column natively or as text, see
  :data:`COLUMNS_QUERY`) or, with a version column, rows whose version
  is not newer than the stored one;
- insert-or-ignore: the same ``INSERT … SELECT FROM unnest`` with ``ON CONFLICT DO NOTHING``;
- append: ``COPY table (cols) FROM STDIN``.

Every column is derived once, from the catalog (:data:`COLUMNS_QUERY`, the
same text the JVM sink runs): the parameter arrays are cast to the column's
type *without* its modifier and with domains resolved to their base type
(``bpchar``, not ``character(8)`` nor ``character``, which means
``character(1)``; ``bpchar`` for a domain over ``char(8)``). An explicit cast to
``char(n)``, ``varchar(n)``, ``bit(n)`` or a domain over them cuts a value
silently; the assignment into the column then applies the length, precision,
domain constraints and array dimensions exactly as a plain ``INSERT`` does,
raising where that would. Array columns travel as their text form
(``'{1,2}'``) in a ``text[]`` and are cast per row, since ``unnest`` would
flatten an array of arrays.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql


@dataclass(frozen=True)
class ColumnInfo:
    """One table column as the catalog describes it (see :data:`COLUMNS_QUERY`)."""

    name: str
    base_type: str       # format_type(base type, NULL): the type the value checks know (``character``)
    full_type: str       # format_type(atttypid, atttypmod): shown in messages (``character(8)``)
    not_null: bool
    is_array: bool
    cast_type: str = ""  # format_type(base type, -1): what parameters are cast to (``bpchar``); never narrows
    not_writable: str = ""   # "generated" / "identity always": a plain INSERT cannot set it either
    native_equality: bool = True  # "=" means "stores the same"; otherwise the no-op check compares ::text

    @property
    def transport_type(self) -> str:
        """The element type of the parameter array: arrays go as text (``unnest`` would flatten them)."""
        return "text" if self.is_array else (self.cast_type or self.base_type)


#: Postgres cuts identifiers to this many bytes (NAMEDATALEN - 1), at a character boundary.
MAX_IDENTIFIER_BYTES = 63


def pg_name(name: str) -> str:
    """``name`` as Postgres stores it: cut to 63 bytes of UTF-8 on a character boundary.

    A longer table or column name in SQL refers to the truncated one (Postgres
    answers with a NOTICE), so the sink looks it up the same way.
    """
    raw = name.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_IDENTIFIER_BYTES:
        return name
    return raw[:MAX_IDENTIFIER_BYTES].decode("utf-8", "ignore")


class TableNotFound(LookupError):
    """The target table does not exist (or is not visible to the user)."""


def table_identifier(table: str, schema: str | None = None) -> sql.Identifier:
    """``schema.table`` as a quoted identifier; both are exact names (see :func:`split_table_name`)."""
    return sql.Identifier(schema, table) if schema else sql.Identifier(table)


_UNQUOTED = re.compile(r"[A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_$\u0080-\U0010ffff]*")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def split_table_name(name: str) -> tuple[str | None, str]:
    """``"table"``, ``"schema.table"`` → ``(schema or None, table)``, read as SQL reads a table name.

    The way the native sink's ``dbtable`` option is written: an unquoted part
    is folded to lower case as Postgres folds it (``Sales.Orders`` is
    ``sales.orders``); a double-quoted part is taken exactly, dots and all
    (``"Sales"."Order.Lines"``; ``""`` inside quotes is one ``"``). Anything
    else (three parts, an empty part, a space or quote in an unquoted part)
    raises ``ValueError`` saying why.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError("table must be a non-empty name")
    parts: list[str] = []
    i, n = 0, len(name)
    while True:
        if i < n and name[i] == '"':
            j, chars = i + 1, []
            while True:
                k = name.find('"', j)
                if k < 0:
                    raise ValueError(f"table {name!r}: a double quote is not closed")
                chars.append(name[j:k])
                if name.startswith('"', k + 1):  # "" is one quote
                    chars.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            part = "".join(chars)
            if not part:
                raise ValueError(f"table {name!r}: a quoted name is empty")
        else:
            match = _UNQUOTED.match(name, i)
            if not match:
                raise ValueError(
                    f"table {name!r}: expected a name at position {i}; quote a name that has spaces, dots, "
                    'quotes or other punctuation as in SQL ("my table"), or pass schema= and an exact table=')
            part = match.group().translate(_ASCII_LOWER)
            i = match.end()
        parts.append(part)
        if i == n:
            break
        if name[i] != ".":
            raise ValueError(f"table {name!r}: unexpected {name[i]!r} at position {i}; quote a name that "
                             'has it as in SQL ("my table"), or pass schema= and an exact table=')
        i += 1
    if len(parts) > 2:
        raise ValueError(f"table {name!r}: at most schema.table (a database cannot be named here: connect to it)")
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


#: Whether lower() folds more than A-Z under the database's collation ("C": ASCII only); asked once when a
#: key column is citext, whose keys compare case-folded. The JVM sink (PgColumnTypes.java) runs the same text.
FOLDS_UNICODE_QUERY = "SELECT lower('\u00c0\u00c9\u00ce') = '\u00e0\u00e9\u00ee'"

# --8<-- [start:columns_query]
#: One row per column: name, full type, the cast that never narrows, how to compare it. The JVM sink
#: (rtm_lakebase/jvm/PgColumnTypes.java) runs the same text; tests/sink/test_type_matrix.py checks both.
#: Domains resolve to their base type (arrays of domains to the base element's array), so no cast
#: applies a domain's length; the assignment into the column applies it, and its constraints.
#: native_equality: types whose "=" holds only for values stored the same (no "1 day" = "24 hours",
#: no citext case folding, no json without "="); every other column is compared as text.
COLUMNS_QUERY = """
SELECT a.attname,
       format_type(w.oid, NULL) AS base_type,
       format_type(a.atttypid, a.atttypmod) AS full_type,
       a.attnotnull,
       w.typcategory = 'A' AS is_array,
       format_type(w.oid, -1) AS cast_type,
       CASE WHEN a.attgenerated <> '' THEN 'generated' WHEN a.attidentity = 'a' THEN 'identity always'
            ELSE '' END AS not_writable,
       w.oid IN (16, 17, 18, 19, 20, 21, 23, 25, 26, 1042, 1043, 1082, 1114, 1184, 2950) AS native_equality
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL (
  WITH RECURSIVE d(oid, depth) AS (
    SELECT a.atttypid, 0
    UNION ALL
    SELECT t.typbasetype, d.depth + 1 FROM d JOIN pg_catalog.pg_type t ON t.oid = d.oid WHERE t.typtype = 'd'
  ) SELECT oid FROM d ORDER BY depth DESC LIMIT 1) b
JOIN pg_catalog.pg_type bt ON bt.oid = b.oid
LEFT JOIN LATERAL (
  WITH RECURSIVE d(oid, depth) AS (
    SELECT bt.typelem, 0 WHERE bt.typcategory = 'A'
    UNION ALL
    SELECT t.typbasetype, d.depth + 1 FROM d JOIN pg_catalog.pg_type t ON t.oid = d.oid WHERE t.typtype = 'd'
  ) SELECT et.typarray AS oid FROM d JOIN pg_catalog.pg_type et ON et.oid = d.oid ORDER BY depth DESC LIMIT 1
) e ON true
JOIN pg_catalog.pg_type w ON w.oid = COALESCE(e.oid, b.oid)
WHERE c.relname = %(table)s
  AND n.nspname = COALESCE(%(schema)s, current_schema())
  AND c.relkind IN ('r', 'p')
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
# --8<-- [end:columns_query]


def fetch_columns(conn: psycopg.Connection, table: str, schema: str | None = None) -> dict[str, ColumnInfo]:
    """The table's columns in order, from ``pg_attribute`` (names passed as parameters)."""
    table, schema = pg_name(table), pg_name(schema) if schema else schema
    rows = conn.execute(COLUMNS_QUERY, {"table": table, "schema": schema}).fetchall()
    if not rows:
        where = f"{schema}.{table}" if schema else f"{table} (in the current schema)"
        raise TableNotFound(
            f"table {where!r} not found; create it first (see create_table_sql). table='schema.table' is "
            "read as SQL reads it (unquoted names in lower case, \"Quoted\" names exactly); with schema= "
            "set, table is the exact name")
    return {r[0]: ColumnInfo(r[0], r[1], r[2], bool(r[3]), bool(r[4]), r[5], r[6], bool(r[7])) for r in rows}


def primary_key_columns(conn: psycopg.Connection, table: str, schema: str | None = None) -> list[str]:
    """The table's primary-key columns (empty when it has none)."""
    table, schema = pg_name(table), pg_name(schema) if schema else schema
    rows = conn.execute(
        """
        SELECT a.attname
        FROM pg_catalog.pg_index i
        JOIN pg_catalog.pg_class c ON c.oid = i.indrelid
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
        WHERE c.relname = %(table)s AND n.nspname = COALESCE(%(schema)s, current_schema())
          AND i.indisprimary
        ORDER BY array_position(i.indkey::int2[], a.attnum)
        """,
        {"table": table, "schema": schema},
    ).fetchall()
    return [r[0] for r in rows]


def _select_from_arrays(columns: Sequence[str], types: Mapping[str, ColumnInfo]) -> sql.Composed:
    """``SELECT u.c0, u.c1::integer[] … FROM unnest(%b::bpchar[], %b::text[], …) AS u(c0, c1, …)``.

    One binary array parameter per column, cast to the column's never-narrowing
    type (:data:`COLUMNS_QUERY`); array columns go as text and are cast per row.
    The type names are the catalog's own ``format_type()`` text, never user input.
    """
    binary = sql.Placeholder(format=psycopg.adapt.PyFormat.BINARY)
    picks, params, aliases = [], [], []
    for i, c in enumerate(columns):
        info, alias = types[c], sql.Identifier(f"c{i}")
        aliases.append(alias)
        params.append(sql.SQL("{}::{}[]").format(binary, sql.SQL(info.transport_type)))
        if info.is_array:
            picks.append(sql.SQL("u.{}::{}").format(alias, sql.SQL(info.cast_type)))
        else:
            picks.append(sql.SQL("u.{}").format(alias))
    return sql.SQL("SELECT {} FROM unnest({}) AS u({})").format(
        sql.SQL(", ").join(picks), sql.SQL(", ").join(params), sql.SQL(", ").join(aliases))


def _compared(prefix: str, column: str, info: ColumnInfo | None) -> sql.Composed:
    """``t.col`` where "=" means "stored the same", else ``t.col::text`` (json has no "=", citext folds case)."""
    ref = sql.SQL(prefix + ".{}").format(sql.Identifier(column))
    return ref if info is None or info.native_equality else ref + sql.SQL("::text")


# --8<-- [start:upsert_statement]
def upsert_statement(target: sql.Identifier, columns: Sequence[str], key_columns: Sequence[str],
                     types: Mapping[str, ColumnInfo], version_column: str | None = None,
                     skip_unchanged: bool = True) -> sql.Composed:
    """One-statement batch upsert from per-column arrays.

    With ``version_column`` a stored row is replaced only by a strictly newer
    version, so a replayed (older or equal) row never overwrites it. Without
    it, ``skip_unchanged`` turns identical updates into no-ops (no new tuple,
    no WAL, no dead row to vacuum).
    """
    cols = [sql.Identifier(c) for c in columns]
    updates = [c for c in columns if c not in key_columns]
    statement = sql.SQL("INSERT INTO {target} AS t ({cols}) {rows} "
                        "ON CONFLICT ({keys}) ").format(
        target=target, cols=sql.SQL(", ").join(cols), rows=_select_from_arrays(columns, types),
        keys=sql.SQL(", ").join(sql.Identifier(k) for k in key_columns))
    if not updates:
        return statement + sql.SQL("DO NOTHING")
    statement += sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
        sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates)
    if version_column:
        statement += sql.SQL(" WHERE t.{v} IS NULL OR t.{v} < EXCLUDED.{v}").format(
            v=sql.Identifier(version_column))
    elif skip_unchanged:
        statement += sql.SQL(" WHERE ({old}) IS DISTINCT FROM ({new})").format(
            old=sql.SQL(", ").join(_compared("t", c, types.get(c)) for c in updates),
            new=sql.SQL(", ").join(_compared("EXCLUDED", c, types.get(c)) for c in updates))
    return statement
# --8<-- [end:upsert_statement]


def insert_ignore_statement(target: sql.Identifier, columns: Sequence[str], key_columns: Sequence[str],
                            types: Mapping[str, ColumnInfo]) -> sql.Composed:
    """Insert rows whose key is new; rows whose key exists are left as they are."""
    conflict = sql.SQL("")
    if key_columns:
        conflict = sql.SQL("({}) ").format(sql.SQL(", ").join(sql.Identifier(k) for k in key_columns))
    return sql.SQL("INSERT INTO {target} ({cols}) {rows} "
                   "ON CONFLICT {conflict}DO NOTHING").format(
        target=target, cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        rows=_select_from_arrays(columns, types), conflict=conflict)


def copy_statement(target: sql.Identifier, columns: Sequence[str]) -> sql.Composed:
    """``COPY target (cols) FROM STDIN`` (text format: measured as fast as binary, no type setup)."""
    return sql.SQL("COPY {target} ({cols}) FROM STDIN").format(
        target=target, cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns))


_SAFE_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_ ]*(\(\s*\d+\s*(,\s*\d+\s*)?\))?(\[\])?$")


def create_table_sql(table: str, columns: Mapping[str, str] | Iterable[tuple[str, str]],
                     key_columns: Sequence[str] = (), schema: str | None = None,
                     fillfactor: int | None = None,
                     autovacuum_scale_factor: float | None = None) -> sql.Composed:
    """``CREATE TABLE IF NOT EXISTS`` for a sink target.

    ``columns`` maps names to plain type names (``bigint``, ``text``,
    ``varchar(64)``, ``timestamptz``, ``numeric(12,2)``); anything else is refused,
    since types are the one part that cannot be quoted as an identifier.
    ``fillfactor`` < 100 leaves room on each page for HOT updates of hot rows.
    """
    items = list(columns.items() if isinstance(columns, Mapping) else columns)
    if not items:
        raise ValueError("columns must not be empty")
    parts = []
    for name, type_name in items:
        if not _SAFE_TYPE.match(type_name.strip()):
            raise ValueError(f"refusing column type {type_name!r} for {name!r}: use a plain type name")
        not_null = sql.SQL(" NOT NULL") if name in key_columns else sql.SQL("")
        parts.append(sql.SQL("{} {}{}").format(sql.Identifier(name), sql.SQL(type_name.strip()), not_null))
    if key_columns:
        parts.append(sql.SQL("PRIMARY KEY ({})").format(
            sql.SQL(", ").join(sql.Identifier(k) for k in key_columns)))
    options = []
    if fillfactor is not None:
        if not 10 <= int(fillfactor) <= 100:
            raise ValueError("fillfactor must be within 10..100")
        options.append(sql.SQL("fillfactor = {}").format(sql.Literal(int(fillfactor))))
    if autovacuum_scale_factor is not None:
        options.append(sql.SQL("autovacuum_vacuum_scale_factor = {}").format(
            sql.Literal(float(autovacuum_scale_factor))))
    statement = sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
        table_identifier(table, schema), sql.SQL(", ").join(parts))
    if options:
        statement += sql.SQL(" WITH ({})").format(sql.SQL(", ").join(options))
    return statement
