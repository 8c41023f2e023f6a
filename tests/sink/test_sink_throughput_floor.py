"""The Python sink's write modes keep their speed relative to a raw ``COPY`` measured in the same run.

``benchmarks/sink_ratios.py`` times each mode (append, upsert, version-guarded
upsert, unchanged replay) and a raw ``COPY`` of the same rows in interleaved
rounds on the session Postgres; a mode's figure is the median of its per-round
ratios to ``COPY``, so load on the machine hits both sides alike. A ratio under
its floor (``benchmarks/results/sink_ratio_floors.json``, set by
``benchmarks/sink_ratios.py --write-floors`` well under what several loaded runs
measured) fails CI. The second test shows the check can fail: with one commit
per row the upsert mode falls under its floor.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.postgres


def test_every_mode_holds_its_floor_against_copy(pg_dsn):
    from benchmarks.sink_ratios import CI_BATCH, CI_ROUNDS, CI_ROWS, MODES, check, measure, read_floors

    floors = read_floors()
    assert set(floors) == set(MODES) and all(0 < f < 1.5 for f in floors.values()), floors
    result = measure(pg_dsn, CI_ROWS, CI_BATCH, CI_ROUNDS)
    assert set(result["modes"]) >= set(MODES)
    failures = check(result, floors)
    assert not failures, "\n".join(failures) + f"\n(load average {result['load_average_1m']})"


def test_a_mode_slowed_to_a_commit_per_row_fails_the_check(pg_dsn, monkeypatch):
    from benchmarks.sink_ratios import check, measure, read_floors
    from rtm_lakebase.sink.target import PostgresTarget

    write = PostgresTarget.write

    def one_row_per_commit(self, batch, by_timer):  # each row its own statement and transaction
        for row in batch:
            write(self, [row], by_timer)

    monkeypatch.setattr(PostgresTarget, "write", one_row_per_commit)
    result = measure(pg_dsn, rows=200, batch=200, rounds=1, modes=("upsert",))
    failures = check(result, read_floors())
    assert [line.split(":")[0] for line in failures] == ["upsert"], (failures, result["modes"]["upsert"])


def test_check_reports_only_modes_under_their_floor():
    from benchmarks.sink_ratios import check, floors_from

    result = {"modes": {"append": {"ratio": 0.9, "baseline": "copy", "ratio_per_round": [0.9]},
                        "upsert": {"ratio": 0.1, "baseline": "keyed_copy", "ratio_per_round": [0.1]}}}
    assert check(result, {"append": 0.5, "upsert": 0.3}) == [
        "upsert: 0.100x keyed_copy is below its floor 0.300x (per round [0.1])"]
    assert check(result, {"append": 0.5, "upsert": 0.1}) == []  # at the floor is not under it
    runs = [{"modes": {m: {"ratio": r} for m, r in (("append", 0.9), ("upsert", 0.5),
                                                    ("versioned_upsert", 0.4), ("replay", 0.7))}},
            {"modes": {m: {"ratio": r} for m, r in (("append", 0.8), ("upsert", 0.6),
                                                    ("versioned_upsert", 0.45), ("replay", 0.5))}}]
    assert floors_from(runs, margin=0.5) == {"append": 0.4, "upsert": 0.25, "versioned_upsert": 0.2, "replay": 0.25}
