"""benchmarks/tail_latency.py: its attribution of late rows, on rows whose story is known.

No Spark here: the analysis runs on synthetic (id, due, emitted, committed) rows
and a synthetic progress list; the script itself is run by hand (its JSON is
committed under benchmarks/results/).
"""

from __future__ import annotations

from benchmarks.tail_latency import analyse, boundary_parts, gc_pauses


def _rows(stall_from: int, stall_to: int, n: int = 10_000) -> list[tuple[int, int, int, int]]:
    """1,000 rows/s due at id ms; emitted 2 ms late, except those due in the stall: emitted after it, 10 a ms."""
    rows = []
    for i in range(n):
        emitted = i + 2 if not stall_from <= i < stall_to else stall_to + (i - stall_from) // 10
        rows.append((i, i, emitted, emitted + 5))
    return rows


def test_rows_waiting_through_a_batch_boundary_are_put_down_to_it():
    progress = [{"timestamp": "1970-01-01T00:00:00.000Z", "durationMs": {"triggerExecution": 5100}},
                {"timestamp": "1970-01-01T00:00:05.200Z", "durationMs": {"triggerExecution": 10000,
                                                                          "queryPlanning": 40}}]
    out = analyse("rtm-jvm", "5 seconds", _rows(5000, 5300), (1000, 9000), progress, [], "clock", [1.0],
                  {"rate": 1000, "started_ms": 0})
    assert out["rows_counted"] == out["rows_due_in_window"] == 8000
    assert out["late_at_source"]["by_cause"] == {"batch boundary": 278, "JVM pause": 0, "other stall": 0,
                                                 "no stall": 0}
    [stall] = out["stalls"]
    assert stall["cause"] == "batch boundary" and stall["length_ms"] == 299
    assert stall["parts"] == {"last_rows_to_batch_end": 5100 - 5001, "between_batches": 100,
                              "start_to_first_row": 5300 - 5200, "next_batch_phases_ms": {"queryPlanning": 40}}
    assert out["end_to_end"]["p50"] == 7 and out["end_to_end"]["max"] == 305


def test_a_stall_inside_a_jvm_pause_is_put_down_to_the_pause(tmp_path):
    log = tmp_path / "gc.log"
    # the safepoint line is written when the pause ends: 1970-01-01T00:00:05.300 minus 290 ms
    log.write_text('[1970-01-01T00:00:05.300+0000] Safepoint "G1CollectForAllocation", Time since last: 1 ns, '
                   "Reaching safepoint: 1 ns, Cleanup: 1 ns, At safepoint: 1 ns, Total: 290000000 ns\n"
                   '[1970-01-01T00:00:06.000+0000] Safepoint "Cleanup", Time since last: 1 ns, Total: 50000 ns\n')
    pauses = gc_pauses(str(log))
    assert pauses == [(5010, 5300, "G1CollectForAllocation")]  # the 0.05 ms one is below the 1 ms floor
    out = analyse("rtm-jvm", "5 minutes", _rows(5000, 5300), (1000, 9000), [], pauses, "clock", [1.0],
                  {"rate": 1000, "started_ms": 0})
    assert out["late_at_source"]["by_cause"]["JVM pause"] == 278
    assert out["stalls"][0]["cause"] == "JVM pause"


def test_a_boundary_without_the_next_batch_progress_is_cut_at_the_end_only():
    progress = [{"timestamp": "1970-01-01T00:00:00.000Z", "durationMs": {"triggerExecution": 5100}}]
    parts = boundary_parts({"from_ms": 5001, "to_ms": 5300}, progress)
    assert parts == {"last_rows_to_batch_end": 99, "batch_end_to_first_row": 200}
