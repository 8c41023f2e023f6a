"""EventsWriter(dsn, table): the pack's own hardened Python foreach writer from the `rtm_lakebase` package.

IMPORTANT - could not be completed as asked in this environment: the `rtm_lakebase` package ships with
the skill, which this arm does not have; the only copy on this machine lives in a source tree I am not
allowed to read, so I did not import or inspect it and do not know the exact name/signature of its
writer class. Rather than inventing
an API or writing my own writer (which the task forbids), this module locates the pack's writer at import
time of EventsWriter():

  * it looks in `rtm_lakebase` and its submodules for a class that implements the foreach-writer contract
    (open / process / close) and whose constructor accepts the connection string and table
    (as dsn/table keywords, or positionally);
  * if exactly one such class exists it is returned, instantiated for (dsn, table);
  * otherwise it raises an ImportError that says what was found, instead of guessing.

Usage (the writer is what goes into foreach):
    query = (df.select("id", "version", "payload").writeStream
               .foreach(EventsWriter(dsn, "public.events"))
               .outputMode("update").trigger(realTime="5 minutes")
               .option("checkpointLocation", ckpt).start())

What the pack's writer is expected to provide (requirements from the task): version-guarded upsert
(newest version wins under replays and late older versions), rejection of hostile values, reconnect
with bounded retries on a Postgres restart, a raised error when the server stays unreachable - no row
lost silently, no error swallowed.
"""

import importlib
import inspect
import pkgutil

_WRITER_METHODS = ("open", "process", "close")


def _candidate_writer_classes():
    try:
        pack = importlib.import_module("rtm_lakebase")
    except ImportError as e:
        raise ImportError(
            "The pack's package `rtm_lakebase` is not installed; install the skill's package "
            "(it ships the hardened foreach writer) - this solution deliberately does not re-implement it."
        ) from e
    modules = [pack]
    for info in pkgutil.walk_packages(getattr(pack, "__path__", []), prefix="rtm_lakebase."):
        if info.name.endswith(".check") or ".tests" in info.name:
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except Exception:
            continue
    found = {}
    for mod in modules:
        for name, obj in vars(mod).items():
            if (inspect.isclass(obj) and not name.startswith("_")
                    and obj.__module__.startswith("rtm_lakebase")
                    and all(callable(getattr(obj, m, None)) for m in _WRITER_METHODS)):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def _instantiate(cls, dsn, table):
    params = inspect.signature(cls).parameters
    if "dsn" in params and "table" in params:
        return cls(dsn=dsn, table=table)
    return cls(dsn, table)


def EventsWriter(dsn, table):
    """Return the pack's foreach writer configured for `table` (id text PK, version bigint, payload text)."""
    found = _candidate_writer_classes()
    if len(found) != 1:
        raise ImportError(
            "Could not identify rtm_lakebase's foreach writer unambiguously; candidates: "
            f"{sorted(found) or 'none'}. Import it explicitly here once its name is known.")
    (cls,) = found.values()
    return _instantiate(cls, dsn, table)
