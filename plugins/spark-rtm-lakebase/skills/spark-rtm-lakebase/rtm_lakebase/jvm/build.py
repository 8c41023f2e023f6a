"""Compile the JVM sink and the fast foreach writer from this package: ``python -m rtm_lakebase.jvm build``.

Both ship as Java source inside ``rtm_lakebase`` (``jvm/*.java``, ``foreach/*.java``), so
wherever the package is (an installed wheel, the installed skill's folder, the repository)
this compiles them against the PySpark installed in the running Python, with ``javac`` from
``JAVA_HOME`` or the ``PATH``::

    python -m rtm_lakebase.jvm build                 # into the package's build/ folders
    python -m rtm_lakebase.jvm build --out ./jars    # elsewhere (then set RTM_JVM_SINK_JAR / RTM_FOREACH_JAR)

It prints each jar's path on stdout, and the Postgres JDBC driver the JVM sink needs at run
time (``--jdbc PATH``, ``$PG_JDBC_JAR`` or Debian's copy) or how to get it. A jar is rebuilt
only when its sources, ``javac`` or PySpark changed; each one gets a ``.sha256`` file (its
``.java`` files' hash), which :func:`rtm_lakebase.jvm.jvm_sink_jars` and
:func:`rtm_lakebase.foreach.foreach_jars` check before use. A failure is one line on stderr
(``javac``'s own messages above it) and exit status 1; nothing half-written stays behind.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
#: The Postgres JDBC driver: ``--jdbc``, else ``$PG_JDBC_JAR``, else the pinned pgjdbc the repository's set-up
#: fetched from Maven Central into ``.cache/jars/pgjdbc/`` (checksum checked: ``pack_lab/maven_jars.py``), else
#: Debian's libpostgresql-jdbc-java copy. (One definition: ``rtm_lakebase.jvm.sink`` imports these.)
DRIVER_ENV = "PG_JDBC_JAR"
PG_JDBC_VERSION = "42.7.14"
CACHED_DRIVER = PACKAGE.parent / ".cache" / "jars" / "pgjdbc" / f"postgresql-{PG_JDBC_VERSION}.jar"
SYSTEM_DRIVER = Path("/usr/share/java/postgresql.jar")
#: For clusters: ``spark.jars.packages`` with these Maven coordinates fetches the driver.
PG_JDBC_MAVEN = f"org.postgresql:postgresql:{PG_JDBC_VERSION}"
JDK_HINT = ("install a JDK 17+ (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless; macOS: brew install "
            "openjdk@17) or set JAVA_HOME to one")


class BuildError(Exception):
    """The build cannot go on; the message (one line) names the cause and what to do."""


@dataclass(frozen=True)
class Target:
    """One jar: every ``*.java`` in ``sources`` (plus ``*.json`` resources of ``resources``) into ``jar``."""

    label: str
    sources: Path
    jar_name: str
    env: str | None = None  # the variable that points the Python side at a jar built elsewhere
    resources: Path | None = None
    resource_prefix: str = ""  # where the resources sit inside the jar (the Java side loads them from there)

    def default_jar(self) -> Path:
        return self.sources / "build" / self.jar_name


#: The user's two jars. (The pack's lab builds its own rate source with :func:`compile_jar` too.)
TARGETS = (
    # The JVM sink carries the outcome table (rtm_lakebase/sink/outcomes.json) as Outcomes.RESOURCE.
    Target("the JVM sink", PACKAGE / "jvm", "rtm-lakebase-jvm-sink.jar", "RTM_JVM_SINK_JAR", PACKAGE / "sink",
           "rtm_lakebase/jvm/"),
    Target("the fast foreach writer", PACKAGE / "foreach", "rtm-lakebase-foreach.jar", "RTM_FOREACH_JAR"),
)


def say(message: str) -> None:
    print(f"[build] {message}", file=sys.stderr, flush=True)


def find_javac() -> str:
    """``$JAVA_HOME/bin/javac``, else ``javac`` on the PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "javac"), os.X_OK):
        return os.path.join(java_home, "bin", "javac")
    found = shutil.which("javac")
    if not found:
        raise BuildError(f"javac not found (JAVA_HOME and PATH): {JDK_HINT}")
    return found


def pyspark_jars() -> Path:
    """The ``jars`` folder of the PySpark this Python imports: the classes the Java sources compile against."""
    try:
        import pyspark
    except ImportError:
        raise BuildError(f"pyspark is not installed in this Python ({sys.executable}): install the PySpark your "
                         "cluster runs (e.g. pip install 'pyspark==4.3.0') and run the build again") from None
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not jars.is_dir():
        raise BuildError(f"pyspark {getattr(pyspark, '__version__', '?')} has no jars folder at {jars} "
                         "(a pyspark-client or Spark Connect-only install?): install the full pyspark package")
    return jars


def sources(folder: Path) -> list[Path]:
    """The ``.java`` files of a folder in the order their hash is taken (name, bytewise)."""
    return sorted(folder.glob("*.java"), key=lambda p: p.name.encode())


def resource_files(folder: Path | None) -> list[Path]:
    return sorted(folder.glob("*.json"), key=lambda p: p.name.encode()) if folder and folder.is_dir() else []


def sources_sha(folder: Path, resources: Sequence[Path] = ()) -> str:
    """The hash recorded next to a jar: its ``.java`` files' bytes in name order, then its resources' bytes."""
    digest = hashlib.sha256()
    for path in [*sources(folder), *resources]:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _javac_version(javac: str) -> str:
    try:
        out = subprocess.run([javac, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"{javac} does not run ({type(exc).__name__}): {JDK_HINT}") from None
    return (out.stdout + out.stderr).strip().splitlines()[0] if (out.stdout + out.stderr).strip() else "javac"


def _stamp(folder: Path, resources: list[Path], javac_version: str, jars: Path) -> str:
    digest = hashlib.sha256(sources_sha(folder).encode())
    for path in resources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    spark_api = sorted(p.name for p in jars.glob("spark-sql-api_*.jar"))
    return f"{digest.hexdigest()} {javac_version} {' '.join(spark_api)}"


def compile_jar(folder: Path, jar: Path, *, label: str, javac: str, jars: Path,
                resources: Path | None = None, resource_prefix: str = "", created_by: str = "rtm_lakebase.jvm.build",
                javac_version: str | None = None) -> bool:
    """Compile every ``folder/*.java`` into ``jar`` (with ``resources/*.json`` under ``resource_prefix``).

    Returns False when the jar is already current (same sources, javac and PySpark), True when built.
    """
    java = sources(folder)
    if not java:
        raise BuildError(f"no .java files in {folder}")
    extra = resource_files(resources)
    stamp = _stamp(folder, extra, javac_version or _javac_version(javac), jars)
    stamp_file = jar.with_name(f".{jar.stem}.build-stamp")
    if jar.is_file() and stamp_file.is_file() and stamp_file.read_text(encoding="utf-8") == stamp:
        return False
    say(f"compiling {label} ({len(java)} Java files -> {jar})")
    try:
        jar.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp.", dir=jar.parent))
    except OSError as exc:
        raise BuildError(f"cannot write {jar.parent} ({exc.strerror or exc}): pass --out DIR to put the jars "
                         "somewhere writable") from None
    try:
        classes = tmp / "classes"
        cmd = [javac, "--release", "17", "-Xlint:all,-path", "-encoding", "UTF-8", "-cp", str(jars / "*"),
               "-d", str(classes), *map(str, java)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        # Warnings about Spark's own annotations are noise; anything about these sources is shown.
        ours = [line for line in (result.stdout + result.stderr).splitlines() if str(folder) in line]
        if result.returncode != 0:
            print(result.stdout + result.stderr, file=sys.stderr, end="")
            raise BuildError(f"javac failed on {folder}/*.java (messages above)")
        for line in ours:
            print(line, file=sys.stderr)
        out = tmp / "out.jar"
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", f"Manifest-Version: 1.0\nCreated-By: {created_by}\n\n")
            for path in sorted(classes.rglob("*")):
                if path.is_file():
                    z.write(path, path.relative_to(classes).as_posix())
            for path in extra:
                z.write(path, resource_prefix + path.name)
        os.replace(out, jar)
        jar.with_suffix(".sha256").write_text(sources_sha(folder, extra) + "\n", encoding="utf-8")
        stamp_file.write_text(stamp, encoding="utf-8")
    except subprocess.TimeoutExpired:
        raise BuildError(f"javac did not finish in 900 s on {folder}") from None
    except OSError as exc:
        raise BuildError(f"could not write {jar} ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def readable_file(path: Path) -> bool:
    """A file this process can read. An unreadable one (a cache folder another user made 0700) counts as absent,
    so the lookup goes on to the next place instead of failing on a permission error."""
    try:
        return path.is_file() and os.access(path, os.R_OK)
    except OSError:
        return False


def find_driver(given: str | None = None, cached: Path = CACHED_DRIVER, system: Path = SYSTEM_DRIVER) -> Path | None:
    """The Postgres JDBC driver jar: ``given``, ``$PG_JDBC_JAR``, the pinned pgjdbc the set-up fetched and verified
    (``cached``), Debian's copy (``system``); None when there is none."""
    for candidate, where in ((given, "--jdbc"), (os.environ.get(DRIVER_ENV), f"${DRIVER_ENV}")):
        if candidate:
            if not Path(candidate).is_file():
                raise BuildError(f"{where}={candidate} is not a file: point it at the Postgres JDBC driver "
                                 "(postgresql-42.x.jar)")
            return Path(candidate).resolve()
    if readable_file(cached) and readable_file(cached.parent / ".verified"):
        return cached
    return system if readable_file(system) else None


def build(out: Path | None = None, jdbc: str | None = None) -> dict[str, Path]:
    """Build both jars (into ``out`` or the package's build folders); returns label -> jar path."""
    driver = find_driver(jdbc)  # a wrong path given is reported before minutes of compiling
    javac = find_javac()
    jars = pyspark_jars()
    version = _javac_version(javac)
    built: dict[str, Path] = {}
    for target in TARGETS:
        jar = (out / target.jar_name) if out else target.default_jar()
        compile_jar(target.sources, jar, label=target.label, javac=javac, jars=jars, resources=target.resources,
                    resource_prefix=target.resource_prefix, javac_version=version)
        built[target.label] = jar.resolve()
    for target in TARGETS:
        line = f"{target.label}: {built[target.label]}"
        if out and target.env:
            line += f"  (set {target.env}={built[target.label]})"
        print(line)
    if driver:
        print(f"the Postgres JDBC driver: {driver}")
    else:
        print(f"the Postgres JDBC driver: not found; the JVM sink needs it at run time: set {DRIVER_ENV}="
              f"/path/to/postgresql-42.x.jar, install Debian's copy (apt-get install libpostgresql-jdbc-java), "
              f"or on a cluster use spark.jars.packages={PG_JDBC_MAVEN}")
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rtm_lakebase.jvm",
        description="Compile the JVM sink and the fast foreach writer against the installed PySpark.")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile both jars and print their paths")
    b.add_argument("--out", type=Path, help="folder for the jars (default: the package's build/ folders)")
    b.add_argument("--jdbc", help=f"the Postgres JDBC driver jar (default: ${DRIVER_ENV}, then {SYSTEM_DRIVER})")
    args = parser.parse_args(argv)
    try:
        build(args.out, args.jdbc)
    except BuildError as exc:
        print(f"rtm_lakebase.jvm build: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rtm_lakebase.jvm build: interrupted", file=sys.stderr)
        return 130
    return 0
