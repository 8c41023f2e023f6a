"""Apply python-foreach-available-rows.patch to Spark 4.3.0's PythonForeachWriter.scala and compile it.

Maven Central serves Spark's sources jars up to 4.2.0, not 4.3.0, so the 4.3.0 file is rebuilt:
the 4.2.0 file from ``spark-sql_2.13-4.2.0-sources.jar`` (pinned sha256: the set
``spark-sql-src-4.2.0`` of ``pack_lab/maven_jars.py``, cached under ``.cache/jars/``) plus
``spark-4.3.0-from-4.2.0.patch``. That base is compiled with the pyspark wheel's own
``scala-compiler`` (``pack_lab/scala_build.py``) and must give, class by class, the bytecode of the
4.3.0 jar in the wheel (``javap -c -l``: instructions and line numbers; constant-pool indices
ignored). Only then is the upstream patch applied (``git apply``, no fuzz) and the result
compiled against the same jars::

    .venv/bin/python upstream/python-foreach-latency/compile_patch.py --out DIR [--json FILE]

``DIR/patched/`` then holds the patched classes; put it ahead of Spark's jars
(``reproduce.py --spark-classes DIR/patched``) to run the patched writer. Exit status 0 only if
every step passed; a failed step prints one line naming it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the shared compile step lives in pack_lab/scala_build.py
from pack_lab import maven_jars, scala_build
from pack_lab.scala_build import sha256, tool

SPARK_VERSION = "4.3.0"
SOURCE_FILE = "sql/core/src/main/scala/org/apache/spark/sql/execution/python/streaming/PythonForeachWriter.scala"
PACKAGE_PATH = "org/apache/spark/sql/execution/python/streaming/"
#: The newest Spark release whose sources jar Maven Central serves (checked 2026-11-27).
SOURCES_SET = "spark-sql-src-4.2.0"
SOURCES_ARTIFACT = "org.apache.spark:spark-sql_2.13:4.2.0:sources"
SOURCES_JAR_SHA256 = "4341f82ed23399ff4aa5e9dc9441a0c8ac063b13e7952dbc437e6659aee4b36e"
SOURCE_FILE_SHA256 = "1cfb911f1feea453c206c47b0b4c8eaec75fe84a180bd273f86db9ee46ae73a3"
BASE_PATCH = HERE / "spark-4.3.0-from-4.2.0.patch"
UPSTREAM_PATCH = HERE / "python-foreach-available-rows.patch"
#: Spark 4.3.0 is built for Java 17 (class major 61, invokedynamic string concatenation).
SCALAC_OPTIONS = [*scala_build.RELEASE_OPTIONS, "-deprecation", "-feature"]

#: One step failed; the message names it and its cause.
StepFailed = scala_build.BuildFailed


def say(message: str) -> None:
    print(f"[compile_patch] {message}", file=sys.stderr, flush=True)


def spark_jars() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise StepFailed(f"pyspark is not importable here ({exc}); run with the repository's .venv/bin/python") from exc
    if pyspark.__version__ != SPARK_VERSION:
        raise StepFailed(f"pyspark {pyspark.__version__} is installed; this check is for {SPARK_VERSION}")
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not any(jars.glob("scala-compiler-*.jar")):
        raise StepFailed(f"no scala-compiler jar in {jars}")
    return jars


def fetch_sources_jar() -> Path:
    """The pinned 4.2.0 sources jar, fetched once with Maven (``pack_lab/maven_jars.py``) and checked."""
    try:
        (jar,) = maven_jars.fetch(SOURCES_SET)
    except maven_jars.JarsUnavailable as exc:
        raise StepFailed(str(exc)) from None
    if sha256(jar) != SOURCES_JAR_SHA256:
        raise StepFailed(f"{jar.name} has sha256 {sha256(jar)}, pinned {SOURCES_JAR_SHA256}")
    return jar


def git_apply(patch: Path, tree: Path) -> None:
    for check in (["--check"], []):
        proc = subprocess.run([tool("git"), "apply", *check, str(patch)], cwd=tree, capture_output=True, text=True)
        if proc.returncode != 0:
            raise StepFailed(f"{patch.name} does not apply cleanly: {proc.stderr.strip().splitlines()[0]}")


def scalac(jars: Path, source: Path, out: Path) -> float:
    """Compile one file with the wheel's scala-compiler; warnings fail (the patch must compile cleanly)."""
    out.mkdir(parents=True)
    started = time.monotonic()
    scala_build.scalac(jars, [source], out, options=SCALAC_OPTIONS[2:], allow_warnings=False)
    return time.monotonic() - started


def normalized_bytecode(class_file: Path) -> list[str]:
    """``javap -p -c -l`` without the constant-pool indices and the source file line."""
    text = subprocess.run([tool("javap"), "-p", "-c", "-l", str(class_file)], capture_output=True, text=True,
                          check=True).stdout
    return [re.sub(r"#\d+(,\s*\d+)?", "#", line) for line in text.splitlines() if not line.startswith("Compiled from")]


def compare_with_jar(compiled: Path, jar: Path) -> list[str]:
    """Class files of the compiled base that differ from (or are missing in) ``jar``."""
    differing = []
    with tempfile.TemporaryDirectory() as shipped, zipfile.ZipFile(jar) as archive:
        for class_file in sorted(compiled.rglob("*.class")):
            name = class_file.relative_to(compiled).as_posix()
            try:
                archive.extract(name, shipped)
            except KeyError:
                differing.append(f"{name} (not in {jar.name})")
                continue
            if normalized_bytecode(class_file) != normalized_bytecode(Path(shipped) / name):
                differing.append(name)
    return differing


def run(out: Path) -> dict:
    jars = spark_jars()
    sql_jar = jars / f"spark-sql_2.13-{SPARK_VERSION}.jar"
    for name in ("java", "javap", "git"):
        tool(name)
    sources_jar = fetch_sources_jar()
    tree = out / "src"
    with zipfile.ZipFile(sources_jar) as archive:
        inner = SOURCE_FILE.split("src/main/scala/", 1)[1]
        (tree / SOURCE_FILE).parent.mkdir(parents=True)
        (tree / SOURCE_FILE).write_bytes(archive.read(inner))
    digest = sha256(tree / SOURCE_FILE)
    if digest != SOURCE_FILE_SHA256:
        raise StepFailed(f"the 4.2.0 PythonForeachWriter.scala has sha256 {digest}, pinned {SOURCE_FILE_SHA256}")
    say("4.2.0 source extracted and checked; rebuilding 4.3.0's with spark-4.3.0-from-4.2.0.patch")
    git_apply(BASE_PATCH, tree)
    say("compiling the rebuilt 4.3.0 source with the wheel's scala-compiler (about a minute)")
    base_seconds = scalac(jars, tree / SOURCE_FILE, out / "base")
    differing = compare_with_jar(out / "base", sql_jar)
    base_classes = sorted(p.relative_to(out / "base").as_posix() for p in (out / "base").rglob("*.class"))
    if differing:
        raise StepFailed(f"the rebuilt base is not 4.3.0's: {', '.join(differing)} differ from {sql_jar.name}")
    say(f"base: {len(base_classes)} classes, bytecode and line numbers equal to {sql_jar.name}")
    git_apply(UPSTREAM_PATCH, tree)
    say(f"{UPSTREAM_PATCH.name} applied cleanly; compiling the patched source")
    patched_seconds = scalac(jars, tree / SOURCE_FILE, out / "patched")
    patched_classes = sorted(p.relative_to(out / "patched").as_posix() for p in (out / "patched").rglob("*.class"))
    say(f"patched: {len(patched_classes)} classes in {out / 'patched'}")
    return {
        "spark_version": SPARK_VERSION,
        "sql_jar_sha256": sha256(sql_jar),
        "scala_compiler": sorted(p.name for p in jars.glob("scala-compiler-*.jar")),
        "scalac_options": SCALAC_OPTIONS,
        "sources_artifact": SOURCES_ARTIFACT,
        "sources_jar_sha256": SOURCES_JAR_SHA256,
        "base_patch": BASE_PATCH.name,
        "base_classes_equal_to_jar": base_classes,
        "upstream_patch": UPSTREAM_PATCH.name,
        "upstream_patch_sha256": sha256(UPSTREAM_PATCH),
        "patched_classes": patched_classes,
        "compile_seconds": {"base": round(base_seconds, 1), "patched": round(patched_seconds, 1)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="empty or new folder for the sources and classes")
    parser.add_argument("--json", type=Path, help="write what was checked to this file")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        print(f"compile_patch: {out} is not empty; give a new or empty folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    try:
        summary = run(out)
    except (StepFailed, OSError, subprocess.CalledProcessError) as exc:
        print(f"compile_patch: {exc}", file=sys.stderr)
        return 1
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"ok: {UPSTREAM_PATCH.name} applies to Spark {SPARK_VERSION}'s PythonForeachWriter.scala and compiles "
          f"({len(summary['patched_classes'])} classes in {out / 'patched'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
