"""Per-thread CPU of named process trees, from Linux ``/proc`` (what ``top -H`` shows, summed over a run).

Take a :class:`CpuSnapshot` before and after a run and subtract them::

    groups = {"spark": [spark_pid], "kafka broker": [broker_pid], "postgres": [postmaster_pid]}
    before = CpuSnapshot.take(groups)
    ...  # the run
    profile = CpuSnapshot.take(groups).since(before)

``profile`` gives CPU seconds per group (each root and all its descendants; a process under
several roots counts for the nearest), per thread name
(JVM threads carry their Java name, cut to 15 characters by the kernel; numbers are folded,
so ``GC Thread#0`` and ``GC Thread#1`` count together), the busiest single threads, and the
whole machine's busy share from ``/proc/stat`` (other jobs included). Threads that ended during
the run are missed; a process that ended is counted through its parent's reaped-children time,
except for a parent that also has children in another group (their time could not be told apart). On a system without ``/proc`` every figure is empty.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(text: str) -> tuple[str, list[str]]:
    """``(comm, fields after comm)`` of a ``/proc/.../stat`` line (comm may hold spaces)."""
    return text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()


def _processes() -> dict[int, int]:
    """``pid -> ppid`` of every live process."""
    parents = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            _, fields = _stat_fields(entry.read_text())
        except (OSError, ValueError):
            continue
        parents[int(entry.parent.name)] = int(fields[1])
    return parents


def descendants(roots: list[int], parents: dict[int, int] | None = None) -> set[int]:
    """``roots`` and every live process below them."""
    parents = _processes() if parents is None else parents
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, frontier = set(), [r for r in roots if r in parents]
    while frontier:
        pid = frontier.pop()
        if pid not in tree:
            tree.add(pid)
            frontier.extend(children.get(pid, []))
    return tree


def fold(name: str) -> str:
    """Thread name with its numbers folded: ``GC Thread#3`` → ``GC Thread#N``."""
    return re.sub(r"\d+", "N", name)


def machine_busy_ticks() -> tuple[int, int]:
    """``(busy, total)`` jiffies of all CPUs since boot (``/proc/stat``)."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0, 0
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


@dataclass
class CpuSnapshot:
    """CPU ticks per ``(group, pid, tid, thread name)`` at one moment."""

    taken: float
    threads: dict[tuple[str, int, int, str], int] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    reaped: dict[str, int] = field(default_factory=dict)
    machine: tuple[int, int] = (0, 0)

    @classmethod
    def take(cls, groups: dict[str, list[int]]) -> CpuSnapshot:
        snap = cls(taken=time.monotonic(), machine=machine_busy_ticks())
        parents = _processes()
        trees = {group: descendants([r for r in roots if r], parents) for group, roots in groups.items()}
        owner: dict[int, str] = {}  # a process in several trees belongs to the smallest (e.g. a child server)
        for group, tree in sorted(trees.items(), key=lambda kv: -len(kv[1])):
            owner.update(dict.fromkeys(tree, group))
        for group in groups:
            snap.reaped[group] = 0
            for pid in sorted(p for p, g in owner.items() if g == group):
                try:
                    comm, fields = _stat_fields(Path(f"/proc/{pid}/stat").read_text())
                except (OSError, ValueError):
                    continue
                snap.process_names[pid] = comm
                if not any(parents.get(c) == pid and owner.get(c) != group for c in owner):
                    snap.reaped[group] += int(fields[13]) + int(fields[14])  # cutime + cstime
                for task in Path(f"/proc/{pid}/task").glob("[0-9]*"):
                    try:
                        name, tfields = _stat_fields((task / "stat").read_text())
                    except (OSError, ValueError):
                        continue
                    snap.threads[(group, pid, int(task.name), name)] = int(tfields[11]) + int(tfields[12])
        return snap

    def carry(self, earlier: CpuSnapshot, group: str) -> CpuSnapshot:
        """Keep ``group``'s threads as ``earlier`` saw them where they have exited since (a process
        that finished between the two snapshots, like a producer that was told to stop)."""
        for key, ticks in earlier.threads.items():
            if key[0] == group and key not in self.threads:
                self.threads[key] = ticks
                self.process_names.setdefault(key[1], earlier.process_names.get(key[1], "?"))
        return self

    def since(self, before: CpuSnapshot, cores: int | None = None, top: int = 12) -> dict[str, Any]:
        """What the run between ``before`` and this snapshot cost, as a JSON-ready dict."""
        wall = max(self.taken - before.taken, 1e-9)
        cores = cores or os.cpu_count() or 1
        used = {key: (ticks - before.threads.get(key, 0)) / _TICKS for key, ticks in self.threads.items()}
        groups: dict[str, float] = {}
        names: dict[tuple[str, str, str], float] = {}
        for (group, pid, _tid, name), seconds in used.items():
            groups[group] = groups.get(group, 0.0) + seconds
            key = (group, fold(self.process_names.get(pid, "?")), fold(name))
            names[key] = names.get(key, 0.0) + seconds
        for group, ticks in self.reaped.items():  # children that exited during the run (e.g. a Python worker)
            groups[group] = groups.get(group, 0.0) + max(0, ticks - before.reaped.get(group, 0)) / _TICKS
        busy = self.machine[0] - before.machine[0]
        total = self.machine[1] - before.machine[1]
        hottest = sorted(used.items(), key=lambda kv: -kv[1])[:top]
        return {
            "wall_s": round(wall, 2),
            "cores": cores,
            "cpu_s_by_group": {g: round(s, 2) for g, s in sorted(groups.items(), key=lambda kv: -kv[1])},
            "cores_used_by_group": {g: round(s / wall, 2) for g, s in sorted(groups.items(), key=lambda kv: -kv[1])},
            "machine_busy_share": round(busy / total, 3) if total > 0 else None,
            "thread_names": [
                {"group": g, "process": p, "thread": t, "cpu_s": round(s, 2), "cores": round(s / wall, 2)}
                for (g, p, t), s in sorted(names.items(), key=lambda kv: -kv[1])[:top] if s > 0],
            "hottest_threads": [
                {"group": g, "process": self.process_names.get(pid, "?"), "thread": name,
                 "cores": round(s / wall, 2)}
                for (g, pid, _tid, name), s in hottest if s > 0],
        }
