"""One Node requirement everywhere: package.json ``engines``, every locked package, setup.sh, README, site.

package.json's range must be accepted by every package in package-lock.json (an ``ini`` 7.x needing
Node ^22.22.2 once slipped in under a README that said Node 20), and setup.sh, the README and the getting-started
page must state the same range.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _version(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in re.findall(r"\d+", text)[:3]]
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def _accepts(comparator: str, v: tuple[int, int, int]) -> bool:
    m = re.fullmatch(r"(>=|<=|>|<|\^|~|=)?\s*v?([\d.x*]+)", comparator.strip())
    assert m, f"unparsed engines comparator {comparator!r}"
    op, raw = m.group(1) or "", m.group(2)
    want = _version(raw)
    given = len([p for p in raw.split(".") if p.isdigit()])
    if op == ">=":
        return v >= want
    if op == ">":
        return v > want
    if op == "<=":
        return v <= want
    if op == "<":
        return v < want
    if op == "^":
        return v >= want and v[0] == want[0]
    if op == "~":
        return v >= want and v[:2] == want[:2]
    return v[:given] == want[:given]  # bare "20" or "20.1.2"


def satisfies(range_: str, version: str) -> bool:
    """npm engines semantics for the forms locked packages use: '||' of space-separated comparators."""
    v = _version(version)
    for alternative in range_.split("||"):
        comparators = re.findall(r"(?:>=|<=|>|<|\^|~|=)?\s*v?[\d.x*]+", alternative)
        if comparators and all(_accepts(c, v) for c in comparators):
            return True
    return False


REQUIRED = json.loads((REPO / "package.json").read_text())["engines"]["node"]
#: The lowest version of each line the range admits, and a newer one.
FLOORS = ["20.17.0", "22.9.0", "24.0.0"]


@pytest.mark.parametrize("case", [("^22.22.2 || ^24.15.0 || >=26.0.0", "22.9.0", False),
                                  ("18 || 20 || >=22", "20.17.0", True), ("20 || >=22", "21.0.0", False),
                                  (">= 4", "20.17.0", True), ("^20.17.0 || >=22.9.0", "20.16.0", False)])
def test_range_evaluation(case):
    range_, version, expected = case
    assert satisfies(range_, version) is expected


def test_every_locked_package_accepts_the_required_node():
    assert [v for v in FLOORS if satisfies(REQUIRED, v)] == FLOORS
    lock = json.loads((REPO / "package-lock.json").read_text())
    refused = {f"{name} {meta.get('version')} ({meta['engines']['node']}) refuses {v}"
               for name, meta in lock["packages"].items() if isinstance(meta.get("engines"), dict)
               and "node" in meta["engines"] for v in FLOORS if not satisfies(meta["engines"]["node"], v)}
    assert not refused, sorted(refused)


def test_setup_readme_and_site_state_the_same_requirement():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert f'NODE_REQUIRED="{REQUIRED}"' in setup
    for rel in ("README.md", "docs/getting-started.md"):
        text = (REPO / rel).read_text(encoding="utf-8")
        assert "Node.js 20.17+ or 22.9+" in text, rel
        assert not re.search(r"Node(?:\.js)? 20\+", text), rel
