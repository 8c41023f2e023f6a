"""Blocks generated into Markdown: one marker syntax, one registry, one writer, one check.

A generated block sits between two HTML comments::

    <!-- generated:NAME -->

    ...written by `python scripts/skills.py generate`; never edited by hand...

    <!-- /generated:NAME -->

``GENERATORS`` maps each NAME to the function that renders it and the
committed JSON it renders from. ``skills.py generate`` rewrites every block of
every Markdown file (:func:`skillcheck.regenerate.write_blocks`); ``skills.py validate`` reports a
stale block as GEN001, bad markers as GEN002 and a generator that cannot run
as GEN003 (:func:`check_blocks`). A script that produces the JSON (a
benchmark, the support-matrix test) calls ``write_blocks`` with its own
name instead of carrying a writer of its own.

To register a generator: add one line to ``GENERATORS`` naming the module
file, a module-level function ``render(data) -> str`` (``data`` is the parsed
JSON source; the function must be pure: same JSON, same Markdown) and the JSON
file, then put the two marker lines where the block belongs and run
``skills.py generate``.

Reference excerpts (``<!-- excerpt: MODULE.py#NAME -->`` before a fence) are
the other kind of generated block; ``generate`` rewrites them too (see
:mod:`skillcheck.excerpts`).

Scripts outside the validator put ``scripts/`` on ``sys.path`` and call
``skillcheck.regenerate.write_from_script`` (the writer lives there, above this module).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rtm_lakebase.check.findings import Finding


@dataclass(frozen=True)
class Generator:
    module: str  # Python file relative to the pack root
    function: str  # module-level ``render(data) -> str``
    source: str  # JSON file relative to the pack root, parsed and passed to ``function``


#: NAME -> generator. One line per generated block kind.
GENERATORS: dict[str, Generator] = {
    "foreach-latency": Generator("benchmarks/foreach_latency.py", "markdown_table",
                                 "benchmarks/results/foreach_latency.json"),
    "sink-benchmark": Generator("benchmarks/sink_benchmark.py", "render_markdown",
                                "benchmarks/results/sink_benchmark.json"),
    "rate-sweep": Generator("benchmarks/rate_sweep.py", "markdown_table", "benchmarks/results/rate_sweep.json"),
    "kafka-workload": Generator("benchmarks/kafka_workload.py", "markdown_table",
                                "benchmarks/results/kafka_workload.json"),
    "fast-foreach": Generator("benchmarks/rate_sweep.py", "fast_foreach_table", "benchmarks/results/rate_sweep.json"),
    "support-matrix": Generator("pack_lab/support_matrix.py", "markdown_block",
                                "tests/data/support_matrix_results.json"),
    "sink-outcomes": Generator("pack_lab/outcome_doc.py", "markdown_table", "rtm_lakebase/sink/outcomes.json"),
    "eval-evidence": Generator("scripts/skillcheck/evals/evidence.py", "markdown_block",
                               "evals/results/2026-11-25/run/_report/evidence.json"),
    "eval-evidence-production": Generator("scripts/skillcheck/evals/evidence.py", "markdown_block",
                                          "evals/results/2026-11-27/run/_report/evidence.json"),
}

MARKER_RE = re.compile(r"^[ \t]{0,3}<!--[ \t]*(?P<end>/)?generated:(?P<name>[^\s>]*)[ \t]*-->[ \t]*$")


def start_marker(name: str) -> str:
    return f"<!-- generated:{name} -->"


def end_marker(name: str) -> str:
    return f"<!-- /generated:{name} -->"


@dataclass(frozen=True)
class Span:
    """One block in a document: marker lines are 1-based; ``body`` is the text between them."""

    name: str
    start: int
    end: int
    body: str


def find_blocks(path: str, lines: list[str], skip: Callable[[int], bool] = lambda n: False
                ) -> tuple[list[Span], list[Finding]]:
    """Blocks and marker problems (GEN002) in ``lines``; ``skip(lineno)`` is true inside code fences."""
    spans: list[Span] = []
    problems: list[Finding] = []
    open_name, open_line = None, 0
    for lineno, text in enumerate(lines, 1):
        if "generated:" not in text or skip(lineno):
            continue
        m = MARKER_RE.match(text)
        if not m:
            continue
        name, is_end = m.group("name"), bool(m.group("end"))
        if not is_end:
            if open_name is not None:
                problems.append(Finding(path, open_line, 1, "GEN002",
                                        f"generated block {open_name!r} is not closed before line {lineno}"))
            if name not in GENERATORS:
                problems.append(Finding(path, lineno, 1, "GEN002",
                                        f"unknown generator {name!r} (known: {', '.join(sorted(GENERATORS))})"))
            open_name, open_line = name, lineno
        elif open_name is None:
            problems.append(Finding(path, lineno, 1, "GEN002", f"end marker for {name!r} without a start marker"))
        elif name != open_name:
            problems.append(Finding(path, lineno, 1, "GEN002",
                                    f"end marker for {name!r} closes the block {open_name!r} opened on line {open_line}"))
            open_name = None
        else:
            spans.append(Span(name, open_line, lineno, "\n".join(lines[open_line:lineno - 1])))
            open_name = None
    if open_name is not None:
        problems.append(Finding(path, open_line, 1, "GEN002",
                                f"generated block {open_name!r} has no end marker {end_marker(open_name)!r}"))
    return [s for s in spans if s.name in GENERATORS], problems


class Renderer:
    """Renders each generator at most once per run; failures become GEN003 findings."""

    def __init__(self, root: Path):
        self.root = root
        self._cache: dict[str, tuple[str | None, str | None]] = {}

    def render(self, name: str) -> tuple[str | None, str | None]:
        """(markdown, None) or (None, why it failed)."""
        if name not in self._cache:
            self._cache[name] = self._render(GENERATORS[name])
        return self._cache[name]

    def _render(self, gen: Generator) -> tuple[str | None, str | None]:
        from .readfile import load_json

        if not os.path.lexists(self.root / gen.source):
            return None, f"source {gen.source} not found"
        data, _, problem = load_json(self.root, gen.source, "GEN003")
        if problem:
            return None, f"source {gen.source}: {problem.message}"
        try:
            func = getattr(_load_module(self.root, gen.module), gen.function, None)
            if not callable(func):
                return None, f"{gen.module} has no function {gen.function}()"
            body = func(data)
        except BaseException as exc:  # any failure of the generator is a finding, not a crash
            if isinstance(exc, KeyboardInterrupt):
                raise
            return None, f"{gen.module}:{gen.function}() failed: {type(exc).__name__}: {_one_line(exc)}"
        if not isinstance(body, str):
            return None, f"{gen.module}:{gen.function}() returned {type(body).__name__}, not str"
        return body.strip("\n"), None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def _load_module(root: Path, rel: str):
    """Import ``root/rel`` under a name unique to that file (never a cached module of another root)."""
    path = (root / rel).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{rel} not found")
    name = "_skills_generator_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    added = str(root) not in sys.path
    if added:
        sys.path.insert(0, str(root))
    sys.modules[name] = module  # dataclasses and pickling look the module up while it executes
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if added and str(root) in sys.path:
            sys.path.remove(str(root))
    return module


def block_text(name: str, body: str) -> str:
    """The canonical block: markers, a blank line each side of the body."""
    return f"{start_marker(name)}\n\n{body}\n\n{end_marker(name)}"


def expected_body(body: str) -> str:
    return f"\n{body}\n"


def check_blocks(path: str, lines: list[str], renderer: Renderer,
                 skip: Callable[[int], bool] = lambda n: False) -> list[Finding]:
    """GEN001/GEN002/GEN003 findings of one Markdown document."""
    spans, out = find_blocks(path, lines, skip)
    for span in spans:
        body, problem = renderer.render(span.name)
        if problem:
            out.append(Finding(path, span.start, 1, "GEN003", f"generator {span.name!r}: {problem}"))
        elif span.body != expected_body(body):
            gen = GENERATORS[span.name]
            out.append(Finding(path, span.start, 1, "GEN001",
                               f"generated block {span.name!r} differs from {gen.module}:{gen.function}() of "
                               f"{gen.source}; run `python scripts/skills.py generate`"))
    return out


def rewrite(text: str, renderer: Renderer, names: Iterable[str] | None = None,
            skip: Callable[[int], bool] = lambda n: False) -> tuple[str, list[Finding]]:
    """``text`` with every (named) block re-rendered; problems are returned, their blocks left as they were."""
    lines = text.split("\n")
    spans, problems = find_blocks("", lines, skip)
    wanted = set(names) if names is not None else None
    for span in reversed(spans):  # bottom up: earlier line numbers stay valid
        if wanted is not None and span.name not in wanted:
            continue
        body, problem = renderer.render(span.name)
        if problem:
            problems.append(Finding("", span.start, 1, "GEN003", f"generator {span.name!r}: {problem}"))
            continue
        lines[span.start - 1:span.end] = block_text(span.name, body).split("\n")
    return "\n".join(lines), problems
