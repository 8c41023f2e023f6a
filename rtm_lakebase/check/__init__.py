"""The pack's checker for your own code: ``python3 -m rtm_lakebase.check FILE_OR_FOLDER...``.

Standard library only, so it runs with a bare ``python3`` from the folder that
holds ``rtm_lakebase/`` (the installed skill's folder, or a clone). It reports
the patterns that break a real-time query or a Postgres sink (``RTM``,
``SINK``, ``SQL``, ``CONT`` codes) and known-wrong claims in prose
(``PROSE``), as ``path:line:col CODE message`` plus a ``fix:`` line, or
``--format json``; exit 0 when clean, 1 on findings, 2 on bad usage.

One module per job: :mod:`~rtm_lakebase.check.cli` (the command),
:mod:`~rtm_lakebase.check.files` (files and folders),
:mod:`~rtm_lakebase.check.python`, :mod:`~rtm_lakebase.check.notebook` and
:mod:`~rtm_lakebase.check.markdown` (one per file kind),
:mod:`~rtm_lakebase.check.rules` (one module per rule family),
:mod:`~rtm_lakebase.check.codes` (every code and its fix),
:mod:`~rtm_lakebase.check.optouts`, :mod:`~rtm_lakebase.check.reading`,
:mod:`~rtm_lakebase.check.findings`, :mod:`~rtm_lakebase.check.limits`.
"""

from rtm_lakebase.check.codes import CODES
from rtm_lakebase.check.files import UsageProblem, check_file, check_paths
from rtm_lakebase.check.findings import Finding

__all__ = ["CODES", "Finding", "UsageProblem", "check_file", "check_paths"]
