"""Compile Scala sources with a pyspark wheel's own ``scala-compiler``, against that wheel's jars.

Every pyspark wheel ships ``jars/scala-compiler-*.jar`` next to Spark's jars, so
Spark code can be rebuilt for exactly the Spark a virtual environment runs, with
no Scala install and no sbt::

    jars = wheel_jars(".venv/bin/python")            # <site-packages>/pyspark/jars
    warnings = scalac(jars, sources, out, extra_classpath=[...])

Used by ``pack_lab/kafka_connector.py`` (Spark's Kafka connector from its sources
jar) and ``upstream/python-foreach-latency/compile_patch.py`` (the upstream patch).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

#: Spark 4.x is built for Java 17 (class major 61).
RELEASE_OPTIONS = ["-release", "17"]


class BuildFailed(RuntimeError):
    """One build step failed; the message names it and its cause."""


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise BuildFailed(f"`{name}` is needed and was not found on PATH (a JDK 17 provides java and javap)")
    return found


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def wheel_jars(python: str | Path) -> tuple[str, Path]:
    """``(pyspark version, jars folder)`` of the pyspark that ``python`` imports; checks scala-compiler is there."""
    proc = subprocess.run([str(python), "-c", "import os, pyspark; "
                           "print(pyspark.__version__); print(os.path.dirname(pyspark.__file__))"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildFailed(f"pyspark is not importable by {python}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    version, folder = proc.stdout.split()[-2:]
    jars = Path(folder) / "jars"
    if not any(jars.glob("scala-compiler-*.jar")):
        raise BuildFailed(f"no scala-compiler jar in {jars} (pyspark {version})")
    return version, jars


def scalac(jars: Path, sources: Sequence[Path], out: Path, *, extra_classpath: Sequence[Path] = (),
           options: Sequence[str] = (), allow_warnings: bool = True) -> list[str]:
    """Compile ``sources`` into ``out`` with the wheel's compiler; return scalac's warning lines.

    The classpath is every jar of the wheel plus ``extra_classpath``. A compile error, or any
    warning when ``allow_warnings`` is false, raises :class:`BuildFailed` naming the first one.
    """
    out.mkdir(parents=True, exist_ok=True)
    wheel = f"{jars}{os.sep}*"
    classpath = os.pathsep.join([wheel, *(str(p) for p in extra_classpath)])
    proc = subprocess.run([tool("java"), "-Xss8m", "-cp", wheel, "scala.tools.nsc.Main", *RELEASE_OPTIONS, *options,
                           "-classpath", classpath, "-d", str(out), *(str(s) for s in sources)],
                          capture_output=True, text=True)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    if proc.returncode != 0 or not any(out.rglob("*.class")):
        first = next((line for line in lines if "error" in line.lower()), " ".join(lines)[:300] or "no classes")
        raise BuildFailed(f"scalac failed on {_names(sources)}: {first.strip()}")
    if lines and not allow_warnings:
        raise BuildFailed(f"scalac warned on {_names(sources)}: {lines[0]}")
    return lines


def _names(sources: Sequence[Path]) -> str:
    return sources[0].name if len(sources) == 1 else f"{len(sources)} sources"
