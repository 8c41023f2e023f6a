"""The user's package ``rtm_lakebase/`` stays in rooms: subpackages, no import circle, no flat prefix families.

- the import graph of every module (top-level, function-level and ``TYPE_CHECKING`` imports alike, and the
  parent packages an import runs first) has no cycle;
- every module imports on its own in a fresh interpreter, in a random order, with nothing of the package
  imported before it (a circle that only bites at run time fails here);
- no folder holds two modules or subpackages whose names share a ``xxx_`` prefix (a prefix standing in for
  a folder), and the top level holds subpackages only;
- every subpackage's ``__all__`` names exist.

The checks are run on small made-up packages too, so each one is shown to fail when it should.
"""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "rtm_lakebase"


# --- the checks ------------------------------------------------------------------------------------

def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under the package folder ``root`` (packages by ``__init__``)."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, wherever the import statement sits.

    Importing ``a.b.c`` first runs the packages ``a`` and ``a.b`` unless the importer is inside them
    (then they are already being imported): those count as edges too.
    """
    mods = modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        here = name if is_pkg else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # `from pkg import mod` imports the module; `from pkg import name` runs pkg/__init__.py
                targets.update(f"{source}.{a.name}" if f"{source}.{a.name}" in mods else source for a in node.names)
        for t in targets:
            if t not in mods or t == name:
                continue  # outside the package, or not one of its modules
            graph[name].add(t)
            graph[name].update(a for a in _ancestors(t) if a != name and a not in _ancestors(name))
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def prefix_families(root: Path) -> list[str]:
    """Folders holding two or more modules/subpackages named ``xxx_...`` with the same ``xxx``."""
    out = []
    for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
        if not (folder / "__init__.py").is_file():
            continue
        names = [p.stem for p in folder.glob("*.py") if not p.stem.startswith("__")]
        names += [p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
        family: dict[str, list[str]] = defaultdict(list)
        for n in names:
            if "_" in n.strip("_"):
                family[n.strip("_").split("_")[0]].append(n)
        out += [f"{folder.relative_to(root.parent).as_posix()}/: {sorted(v)}"
                for k, v in sorted(family.items()) if len(v) > 1]
    return out


# --- the package -----------------------------------------------------------------------------------

def test_the_package_has_no_import_circle():
    graph = import_graph(PACKAGE)
    assert "rtm_lakebase.sink.writer" in graph and graph["rtm_lakebase.sink.writer"], "the graph is empty"
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_prefix_stands_in_for_a_folder():
    assert prefix_families(PACKAGE) == []


def test_the_top_level_holds_only_subpackages():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"modules outside a subpackage: {loose}"
    rooms = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert {"sink", "postgres", "jvm", "calc", "check", "foreach"} <= set(rooms), rooms


def test_the_package_is_the_library_not_examples_or_oracles():
    # Pipelines a user copies live in examples/, the tests' oracles in pack_lab/oracles.py (issue 30, item 6).
    assert not (PACKAGE / "pipelines").exists()
    import ast

    defined = {node.name for path in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert not {n for n in defined if n.startswith("expected_")} | ({"latest_updates", "output_key",
                                                                    "start_upsert_query"} & defined)


_IMPORT_EACH = r"""
import importlib, json, random, sys
names, seed = json.loads(sys.argv[1]), int(sys.argv[2])
random.Random(seed).shuffle(names)
failed = {}
for name in names:
    for loaded in [m for m in sys.modules if m == "rtm_lakebase" or m.startswith("rtm_lakebase.")]:
        del sys.modules[loaded]
    try:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            getattr(module, attr)
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"order": names, "failed": failed}))
"""


def test_every_module_imports_first_in_a_fresh_interpreter():
    names = sorted(modules(PACKAGE))
    seed = random.randrange(1 << 30)
    proc = subprocess.run([sys.executable, "-c", _IMPORT_EACH, json.dumps(names), str(seed)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(result["order"]) == names
    assert result["failed"] == {}, f"seed {seed}: {result['failed']}"


# --- the checks fail when they should ----------------------------------------------------------------

def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "rtm_lakebase"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_a_circle_inside_a_function_or_type_checking_block_is_found(tmp_path):
    root = _package(tmp_path, {
        "sink/__init__.py": "",
        "sink/writer.py": "from rtm_lakebase.sink.target import Target\n",
        "sink/target.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                          "    from rtm_lakebase.sink.writer import Writer\n",
    })
    assert find_cycle(import_graph(root)) == ["rtm_lakebase.sink.target", "rtm_lakebase.sink.writer",
                                              "rtm_lakebase.sink.target"]
    (root / "sink/target.py").write_text("def f():\n    from .writer import Writer\n", encoding="utf-8")
    assert find_cycle(import_graph(root)) is not None


def test_a_circle_through_a_package_init_is_found(tmp_path):
    root = _package(tmp_path, {
        "postgres/__init__.py": "from rtm_lakebase.postgres.connection import connect\n",
        "postgres/connection.py": "",
        "postgres/extra.py": "from rtm_lakebase.sink import Writer\n",
        "sink/__init__.py": "from rtm_lakebase.sink.writer import Writer\n",
        "sink/writer.py": "from rtm_lakebase.postgres.connection import connect\n",
    })
    assert find_cycle(import_graph(root)) is None
    # sink.writer's import runs postgres/__init__.py first; if that imports the sink, it is a circle.
    (root / "postgres/__init__.py").write_text("from rtm_lakebase.postgres.extra import x\n", encoding="utf-8")
    assert find_cycle(import_graph(root)) is not None


def test_a_package_importing_its_own_modules_is_no_circle(tmp_path):
    root = _package(tmp_path, {
        "sink/__init__.py": "from rtm_lakebase.sink.writer import Writer\n",
        "sink/writer.py": "from rtm_lakebase.sink.settings import Settings\n",
        "sink/settings.py": "",
    })
    assert find_cycle(import_graph(root)) is None
    (root / "sink/settings.py").write_text("from rtm_lakebase.sink import Writer\n", encoding="utf-8")
    assert find_cycle(import_graph(root)) is not None


@pytest.mark.parametrize("files, family", [
    ({"sink_rows.py": "", "sink_buffer.py": ""}, "rtm_lakebase/: ['sink_buffer', 'sink_rows']"),
    ({"calc/__init__.py": "", "calc/pg_a.py": "", "calc/pg_b/__init__.py": ""}, "rtm_lakebase/calc/: ['pg_a', 'pg_b']"),
])
def test_a_prefix_family_is_found(tmp_path, files, family):
    assert prefix_families(_package(tmp_path, files)) == [family]


def test_names_with_different_prefixes_are_no_family(tmp_path):
    root = _package(tmp_path, {"calc/__init__.py": "", "calc/connection_budget.py": "", "calc/sizing.py": "",
                               "postgres/__init__.py": "", "postgres/connection.py": ""})
    assert prefix_families(root) == []


@pytest.mark.parametrize("module", ["rtm_lakebase.foreach", "rtm_lakebase.jvm.build", "rtm_lakebase.sink.deprecated_names"])
def test_modules_for_any_writer_import_without_psycopg(module):
    # The fast foreach path runs any writer, and the per-version venvs (4.1.4, 4.2.1) have no psycopg: importing
    # the sink package (which needs psycopg) from rtm_lakebase.foreach broke them.
    import subprocess
    import sys

    code = f"import sys; sys.modules['psycopg'] = None; import {module}"
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
