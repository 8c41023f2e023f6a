"""Copy the real pack, break one rule at a time in the copy, and check that exactly that code appears.

The copy is regenerated (manifest) before each mutation, and the findings the
unmodified copy already has are subtracted, so each test sees only what its
own mutation caused. If the real pack has no SKILL.md or no references yet, a
minimal one is added to the copy so every rule can still be exercised.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import textwrap
from pathlib import Path

import pytest

import skillcheck.examples_import as examples_import
from skillcheck.manifest import PackError
from tests.validator.packbuilder import REPO, findings, write_manifest

_IGNORED = shutil.ignore_patterns("node_modules", "site", "dist", "__pycache__", "*.egg-info", "tests",
                                  "spark-warehouse", "metastore_db")


def IGNORE(folder: str, names: list[str]) -> set[str]:
    """Skip tool, build and cache folders, and every hidden folder (.git, .venv, caches of any size)."""
    hidden = {n for n in names if n.startswith(".") and (Path(folder) / n).is_dir()}
    return set(_IGNORED(folder, names)) | hidden

MINIMAL_SKILL = """---
name: spark-rtm-lakebase
description: Minimal stand-in written by the validator tests because the real SKILL.md is missing.
---

# Stand-in

| Reference | Read when |
| --- | --- |
| [Stand-in](references/stand-in.md) | Testing the validator. |
"""

RT = '.outputMode("update").trigger(realTime="5 seconds").start()'


@pytest.fixture(autouse=True, scope="module")
def _memo_imports():
    """Import results depend only on examples/ (and the venv): reuse them across copies with equal examples/."""
    real = examples_import.check_imports
    memo: dict[str, list] = {}

    def cached(root: Path, *args, **kwargs):
        digest = hashlib.sha256()
        for p in sorted((root / "examples").rglob("*.py")):
            digest.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
        key = digest.hexdigest()
        if key not in memo:
            memo[key] = real(root, *args, **kwargs)
        return memo[key]

    examples_import.check_imports = cached
    yield
    examples_import.check_imports = real


def regenerate(root: Path) -> None:
    try:
        write_manifest(root)
    except PackError:
        pass  # the real pack is broken in a way the baseline already reports


@pytest.fixture(scope="module")
def real_copy(tmp_path_factory):
    base = tmp_path_factory.mktemp("realpack") / "pack"
    shutil.copytree(REPO, base, ignore=IGNORE, symlinks=True)
    if (REPO / "tests" / "data").is_dir():  # sources of generated blocks (support matrix results)
        shutil.copytree(REPO / "tests" / "data", base / "tests" / "data")
    if not (base / "SKILL.md").exists():
        (base / "SKILL.md").write_text(MINIMAL_SKILL, encoding="utf-8")
    refs = sorted((base / "references").glob("*.md")) if (base / "references").is_dir() else []
    if not refs:
        (base / "references").mkdir(exist_ok=True)
        (base / "references" / "stand-in.md").write_text("# Stand-in\n\nA reference for the tests.\n", encoding="utf-8")
        text = (base / "SKILL.md").read_text(encoding="utf-8")
        if "references/stand-in.md" not in text:
            (base / "SKILL.md").write_text(text + "\n| [Stand-in](references/stand-in.md) | Testing the validator. |\n",
                                           encoding="utf-8")
    regenerate(base)
    return base


@pytest.fixture(scope="module")
def baseline(real_copy):
    return {(f.path, f.code) for f in findings(real_copy)}


@pytest.fixture
def copy(real_copy, tmp_path):
    target = tmp_path / "pack"
    shutil.copytree(real_copy, target, symlinks=True)
    return target


def target_doc(root: Path) -> str:
    refs = sorted(p.relative_to(root).as_posix() for p in (root / "references").glob("*.md"))
    return refs[0] if refs else "SKILL.md"


def append(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.write_text(p.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + text.strip("\n") + "\n", encoding="utf-8")


def block(root: Path, code: str, lang: str = "python", before: str = "") -> str:
    rel = target_doc(root)
    head = (before + "\n") if before else ""
    append(root, rel, f"{head}```{lang}\n{textwrap.dedent(code).strip()}\n```")
    return rel


def prose(root: Path, text: str) -> str:
    rel = target_doc(root)
    append(root, rel, text)
    return rel


def front_matter_line(root: Path, line: str) -> str:
    p = root / "SKILL.md"
    text = p.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    p.write_text("---\n" + line + "\n" + text[4:], encoding="utf-8")
    return "SKILL.md"


def new_file(root: Path, rel: str, content: str | bytes) -> str:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content, encoding="utf-8")
    return rel


def _stale_generated(root: Path) -> str:
    """Change one committed benchmark figure: every block rendered from it is now stale."""
    p = root / "benchmarks" / "results" / "foreach_latency.json"
    data = p.read_text(encoding="utf-8")
    p.write_text(data.replace('"date": "', '"date": "1999-01-01', 1), encoding="utf-8")
    return "benchmarks/results/foreach_latency.json"


def edit_name(root: Path, new: str) -> str:
    p = root / "SKILL.md"
    p.write_text(re.sub(r"(?m)^name:.*$", f"name: {new}", p.read_text(encoding="utf-8"), count=1), encoding="utf-8")
    return "SKILL.md"


MUTATIONS = {
    "RTM001": lambda r: block(r, 'df.writeStream.foreach(w).outputMode("update").trigger(realTime=True).start()'),
    "RTM002": lambda r: block(r, 't = "2 seconds"\ndf.writeStream.foreach(w).outputMode("update").trigger(realTime=t).start()'),
    "RTM003": lambda r: block(r, 'w = df.writeStream.foreachBatch(f)\nw' + RT),
    "RTM004": lambda r: block(r, 'df.writeStream.foreach(w).outputMode("complete").trigger(realTime="5 seconds").start()'),
    "RTM005": lambda r: block(r, 'df.dropDuplicatesWithinWatermark(["k"]).writeStream.foreach(w)' + RT),
    "RTM006": lambda r: block(r, 'f = pandas_udf(g, "long")\ndf.select(f("x")).writeStream.foreach(w)' + RT),
    "RTM007": lambda r: block(r, 'df.mapInArrow(g, s).writeStream.foreach(w)' + RT),
    "RTM008": lambda r: block(r, 'df.groupBy(session_window("ts", "1 minute")).count().writeStream.foreach(w)' + RT),
    "RTM009": lambda r: block(r, 'stream.join(dim_df, "k").writeStream.foreach(w)' + RT),
    "SINK001": lambda r: block(r, '''
        class W:
            def open(self, partition_id, epoch_id):
                try:
                    self.c = connect()
                except OSError:
                    return False
                return True
        '''),
    "SQL001": lambda r: block(r, 'cur.execute("INSERT INTO %s VALUES (1)" % table)'),
    "CONT001": lambda r: block(r, 'q = df.writeStream \\  # writer\n    .foreach(w)'),
    "PY001": lambda r: block(r, "for x in :\n    pass"),
    "FENCE001": lambda r: block(r, "no tag here", lang=""),
    "FENCE002": lambda r: append(r, target_doc(r), "```python\nx = 1\n"),
    "HTML001": lambda r: append(r, target_doc(r), "Text before.\n\n<!-- a comment that never ends\n\nMore text."),
    "GEN001": lambda r: _stale_generated(r),
    "OPT001": lambda r: block(r, 'cur.execute(f"SELECT {x}")', before="<!-- skills: allow SQL001 -->"),
    "OPT002": lambda r: block(r, "x = 1", before="<!-- skills: allow SQL001 -- nothing here -->"),
    "OPT003": lambda r: block(r, "x = 1", before="<!-- skills: allow NOPE42 -- typo -->"),
    "EXC001": lambda r: block(r, "x = 1", before="<!-- excerpt: examples/not_a_module.py#x -->"),
    "EXC002": lambda r: block(r, "x = 1", before="<!-- excerpt: pack_lab/rtm_lab.py#no-such-region -->"),
    "EXC004": lambda r: prose(r, "<!-- excerpt: pack_lab/rtm_lab.py#x -->\nJust prose."),
    "PROSE001": lambda r: prose(r, "Enable Photon on the real-time cluster."),
    "PROSE002": lambda r: prose(r, "Real-time mode is available from DBR 13.3."),
    "PROSE003": lambda r: prose(r, "Expect results in under 800 ms."),
    "PROSE004": lambda r: prose(r, "Use `realTime=True` for speed."),
    "LINK001": lambda r: prose(r, "See [this](no-such-file.md)."),
    "LINK002": lambda r: prose(r, "See [this](#no-such-heading-anywhere)."),
    "FM002": lambda r: front_matter_line(r, "owner: somebody"),
    "FM003": lambda r: edit_name(r, "Spark_RTM"),
    "FM004": lambda r: edit_name(r, "some-other-name"),
    "FM005": lambda r: (r / "SKILL.md").write_text(
        re.sub(r"(?m)^description:.*$", "description: Uses <angle> brackets.",
               (r / "SKILL.md").read_text(encoding="utf-8"), count=1), encoding="utf-8"),
    "ROUTE001": lambda r: new_file(r, "references/zz-unlisted.md", "# Unlisted\n\nA page nobody routes to.\n"),
    "ROUTE002": lambda r: new_file(r, "references/deep/nested.md", "# Nested\n\nToo deep.\n"),
    "REF001": lambda r: new_file(r, "references/zz-untitled.md", "Some text without a title.\n"),
    "PACK002": lambda r: new_file(r, "references/zz-bytes.md", b"# Bytes\n\n\xff\xfe\n"),
    "EX001": lambda r: new_file(r, "examples/zz_nodoc.py", "X = 1\n"),
    "EXC003": lambda r: new_file(r, "examples/zz_region.py",
                                 '"""Region."""\n# --8<-- [start:r]\nX = 1\n# --8<-- [end:r]\n') and
    block(r, "X = 2", before="<!-- excerpt: examples/zz_region.py#r -->"),
    "FM001": lambda r: front_matter_line(r, "broken: [yaml"),
    "FM006": lambda r: append(r, "SKILL.md", "\n".join(f"Line {i}." for i in range(500))),
    "FM007": lambda r: front_matter_line(r, "compatibility: " + "x" * 600),
    "IMP002": lambda r: new_file(r, "examples/zz_thread.py",
                                 '"""Thread."""\nimport threading, time\nthreading.Thread(target=time.sleep, args=(20,), daemon=True).start()\n'),
    "IMP001": lambda r: new_file(r, "examples/zz_noisy.py", '"""Noisy."""\nprint("imported")\n'),
    "IMP004": lambda r: new_file(r, "examples/zz_raises.py", '"""Raises."""\nraise RuntimeError("at import")\n'),
}

#: Mutations that must leave the manifest stale on purpose (or break it).
MANIFEST_MUTATIONS = {
    "MAN001": lambda r: (r / "manifest.json").unlink(),
    "MAN002": lambda r: (r / "manifest.json").write_text("{not json", encoding="utf-8"),
    "MAN003": lambda r: (r / "manifest.json").write_text(
        (r / "manifest.json").read_text(encoding="utf-8").replace('"generated"', '"extra": 1, "generated"', 1), encoding="utf-8"),
    "MAN004": lambda r: append(r, target_doc(r), "One more sentence."),
    "MAN005": lambda r: (r / "schemas" / "manifest.schema.json").write_text("{", encoding="utf-8"),
}


@pytest.mark.parametrize("code", sorted(MUTATIONS))
def test_breaking_one_rule_reports_its_code(code, copy, baseline):
    MUTATIONS[code](copy)
    regenerate(copy)
    new = {(f.path, f.code) for f in findings(copy)} - baseline
    assert code in {c for _, c in new}, sorted(new)


@pytest.mark.parametrize("code", sorted(MANIFEST_MUTATIONS))
def test_breaking_the_manifest_reports_its_code(code, copy, baseline):
    MANIFEST_MUTATIONS[code](copy)
    new = {(f.path, f.code) for f in findings(copy)} - baseline
    assert code in {c for _, c in new}, sorted(new)


def test_pack001_missing_skill(copy, baseline):
    (copy / "SKILL.md").unlink()
    assert ("SKILL.md", "PACK001") in {(f.path, f.code) for f in findings(copy)}
