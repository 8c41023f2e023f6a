"""Old keyword names that keep working, each with a one-line warning naming the new one.

The names of :class:`~rtm_lakebase.sink.SinkSettings` are the names everywhere
(``key_columns``, ``max_batch_rows``, ``max_dwell_ms``, ...); a function that
used other names for the same knob takes them through :func:`take_old_names`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def take_old_names(where: str, old: Mapping[str, Any], renames: Mapping[str, tuple[str, Callable[[Any], Any] | None]],
                   new: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` with each old keyword of ``old`` moved to its new name (converted), warning once per name.

    ``renames``: old name → (new name, conversion or None). An old name that is
    not known raises ``TypeError`` as Python does; an old and a new name for the
    same knob, both given, raise ``TypeError`` too.
    """
    unknown = sorted(set(old) - set(renames))
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
    result = dict(new)
    for name, value in old.items():
        target, convert = renames[name]
        if result.get(target, defaults.get(target)) != defaults.get(target):
            raise TypeError(f"{where}(): give {target}= or the old name {name}=, not both")
        warnings.warn(f"{where}(): {name}= is deprecated, use {target}=", FutureWarning, stacklevel=3)
        result[target] = convert(value) if convert is not None else value
    return result
