"""Spark's Kafka connector, built for each PySpark line from its sources jar, cached under ``.cache/jars/``.

Maven Central does not serve ``spark-sql-kafka-0-10_2.13`` for PySpark 4.3.0, 4.2.1
or 4.1.4 (see :data:`pack_lab.maven_jars.CONNECTOR_SOURCES`), so the set-up builds it:

1. the newest served ``-sources.jar`` of the line and the connector's dependencies
   (token-provider binary, kafka-clients, commons-pool2) are fetched as pinned,
   checksummed sets by :mod:`pack_lab.maven_jars`;
2. the Scala sources are compiled with the pyspark wheel's own ``scala-compiler``
   (:mod:`pack_lab.scala_build`), ``-release 17``, against that wheel's jars plus
   those dependencies; the sources jar's resources (the ``META-INF/services``
   DataSourceRegister file, the error conditions) are copied in;
3. the classes are packed into ``.cache/jars/spark-kafka-<pyspark>/`` with a stamp
   naming every input, so a warm cache costs nothing and a changed input rebuilds.

::

    python -m pack_lab.kafka_connector build 4.3.0            # with .venv's pyspark
    python -m pack_lab.kafka_connector build 4.1.4 --python .cache/pyspark-4.1.4/bin/python
    python -m pack_lab.kafka_connector path 4.3.0             # the jars for spark.jars
    python -m pack_lab.kafka_connector compare 4.3.0 --spark-checkout ~/spark   # at a release tag

``compare`` hashes every file of the sources jar used for a version and of a Spark
checkout's ``connector/kafka-0-10-sql`` and ``connector/kafka-0-10-token-provider``
(``src/main/scala`` and ``src/main/resources``, text normalised: LF line ends, no
trailing blanks) and lists what differs, so someone with the ``v4.3.0`` tag checked
out can tell whether the built connector is that release's source.

Nothing is left behind on failure; a failure is one line naming what is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from pack_lab import maven_jars, scala_build

ROOT = Path(__file__).resolve().parent.parent
CACHE = maven_jars.CACHE
_STAMP = ".built"
#: Bump when the build recipe below changes, so cached builds are redone.
RECIPE = 1
SERVICES = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


class ConnectorUnavailable(maven_jars.JarsUnavailable):
    """The connector for a PySpark version is not built (or could not be); the message says why."""


def _say(message: str) -> None:
    print(f"[connector] {message}", file=sys.stderr, flush=True)


def release_for(spark_version: str) -> str:
    """The Spark release whose connector sources are built for PySpark ``spark_version``."""
    try:
        return maven_jars.CONNECTOR_SOURCES[spark_version]
    except KeyError:
        raise ConnectorUnavailable(f"no connector sources are pinned for PySpark {spark_version}; "
                                   f"known: {', '.join(maven_jars.CONNECTOR_SOURCES)}") from None


def build_dir(spark_version: str, cache: Path = CACHE) -> Path:
    return cache / f"spark-kafka-{spark_version}"


def jar_name(spark_version: str) -> str:
    return f"spark-sql-kafka-0-10_2.13-{release_for(spark_version)}-for-pyspark-{spark_version}.jar"


def _inputs(spark_version: str, lock_path: Path = maven_jars.LOCK) -> dict:
    """What a build depends on that is known without running anything: the pinned jars."""
    release = release_for(spark_version)
    return {"recipe": RECIPE, "pyspark": spark_version, "release": release,
            "sources": maven_jars._entry(maven_jars.connector_sources_set(release), lock_path)["jars"],
            "deps": maven_jars._entry(maven_jars.connector_deps_set(release), lock_path)["jars"]}


def _read_stamp(spark_version: str, cache: Path) -> dict | None:
    stamp = build_dir(spark_version, cache) / _STAMP
    try:
        return json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _wheel_fingerprint(jars: Path) -> str:
    """Names and sizes of the wheel's jars: what the classes were compiled against."""
    listing = "\n".join(f"{p.name} {p.stat().st_size}" for p in sorted(jars.glob("*.jar")))
    return scala_build.sha256_text(listing)


def _java_version() -> str:
    proc = subprocess.run([scala_build.tool("java"), "-version"], capture_output=True, text=True)
    return (proc.stderr.strip().splitlines() or ["?"])[0]


def jars(spark_version: str, cache: Path = CACHE, lock_path: Path = maven_jars.LOCK) -> list[Path]:
    """The built connector and its dependencies for ``spark.jars``, or :class:`ConnectorUnavailable`."""
    release = release_for(spark_version)
    stamp = _read_stamp(spark_version, cache)
    built = build_dir(spark_version, cache) / jar_name(spark_version)
    try:
        current = stamp is not None and stamp.get("inputs") == _inputs(spark_version, lock_path)
    except maven_jars.JarsUnavailable:
        current = False
    if not (current and built.is_file()):
        raise ConnectorUnavailable(
            f"Spark's Kafka connector for PySpark {spark_version} is not built in {build_dir(spark_version, cache)}; "
            f"run `bash scripts/setup.sh` (or `.venv/bin/python -m pack_lab.kafka_connector build {spark_version}`; "
            "needs Maven and a JDK 17)")
    return [built, *maven_jars.jars(maven_jars.connector_deps_set(release), cache, lock_path)]


def kafka_clients_jar(spark_version: str = "4.3.0", cache: Path = CACHE) -> Path:
    """The kafka-clients jar the connector of ``spark_version`` uses (the lab's client compiles against it)."""
    deps = maven_jars.jars(maven_jars.connector_deps_set(release_for(spark_version)), cache)
    return next(p for p in deps if p.name.startswith("kafka-clients-"))


def build(spark_version: str, python: str | Path = sys.executable, cache: Path = CACHE) -> list[Path]:
    """Build (or find cached) the connector for PySpark ``spark_version`` with ``python``'s pyspark wheel."""
    try:
        return _build(spark_version, Path(python), cache)
    except scala_build.BuildFailed as exc:
        raise ConnectorUnavailable(f"building Spark's Kafka connector for PySpark {spark_version}: {exc}") from None


def _build(spark_version: str, python: Path, cache: Path) -> list[Path]:
    release = release_for(spark_version)
    (sources_jar,) = maven_jars.fetch(maven_jars.connector_sources_set(release), cache)
    deps = maven_jars.fetch(maven_jars.connector_deps_set(release), cache)
    wheel_version, wheel = scala_build.wheel_jars(python)
    if wheel_version != spark_version:
        raise scala_build.BuildFailed(f"{python} has pyspark {wheel_version}, not {spark_version}")
    compiler = sorted(p.name for p in wheel.glob("scala-compiler-*.jar"))
    expected = {"inputs": _inputs(spark_version), "wheel_jars": _wheel_fingerprint(wheel),
                "scala_compiler": compiler, "java": _java_version(), "scalac_options": scala_build.RELEASE_OPTIONS}
    stamp = _read_stamp(spark_version, cache)
    target = build_dir(spark_version, cache)
    if stamp is not None and {k: stamp.get(k) for k in expected} == expected and (target / jar_name(spark_version)).is_file():
        return jars(spark_version, cache)
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".spark-kafka-{spark_version}.", dir=cache))
    try:
        sources, classes = work / "src", work / "classes"
        scala_files = _unpack(sources_jar, sources, classes)
        _say(f"compiling Spark's Kafka connector {release} ({len(scala_files)} Scala files) for PySpark "
             f"{spark_version} with the wheel's {compiler[0]} (a minute or two)")
        started = time.monotonic()
        warnings = scala_build.scalac(wheel, scala_files, classes, extra_classpath=deps)
        seconds = time.monotonic() - started
        services = classes / SERVICES
        if not services.is_file() or PROVIDER not in services.read_text(encoding="utf-8"):
            raise scala_build.BuildFailed(f"{sources_jar.name} has no {SERVICES} naming {PROVIDER}")
        out = work / "out"
        out.mkdir()
        _pack(classes, out / jar_name(spark_version), release, spark_version)
        record = dict(expected, classes=sum(1 for _ in classes.rglob("*.class")), scalac_output=warnings,
                      compile_seconds=round(seconds, 1))
        (out / _STAMP).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        out.chmod(0o755)
        shutil.rmtree(target, ignore_errors=True)
        out.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _say(f"built {jar_name(spark_version)} ({record['classes']} classes, {seconds:.0f} s) in "
         f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
    return jars(spark_version, cache)


def _unpack(sources_jar: Path, sources: Path, classes: Path) -> list[Path]:
    """Scala files into ``sources``; resources (everything else but the manifest) into ``classes``."""
    scala_files = []
    with zipfile.ZipFile(sources_jar) as archive:
        for name in archive.namelist():
            if name.endswith("/") or name == "META-INF/MANIFEST.MF" or name.endswith(".java"):
                continue  # the only Java file is package-info.java (documentation, no class in the release jar)
            into = sources if name.endswith(".scala") else classes
            path = into / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.read(name))
            if into is sources:
                scala_files.append(path)
    if not scala_files:
        raise scala_build.BuildFailed(f"{sources_jar.name} holds no Scala sources")
    return sorted(scala_files)


def _pack(classes: Path, jar: Path, release: str, spark_version: str) -> None:
    manifest = ("Manifest-Version: 1.0\nCreated-By: pack_lab/kafka_connector.py\n"
                f"Implementation-Title: Spark's Kafka connector {release} sources, compiled for PySpark {spark_version}\n"
                f"Implementation-Version: {release}\n\n")
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", (1980, 1, 1, 0, 0, 0)), manifest)
        for path in sorted(p for p in classes.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(path.relative_to(classes).as_posix(), (1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())


MODULE_DIRS = ("connector/kafka-0-10-sql/src/main", "connector/kafka-0-10-token-provider/src/main")


def normalised_sha256(data: bytes) -> str:
    """sha256 of text with LF line ends and no trailing blanks (so a CRLF checkout hashes the same)."""
    lines = data.decode("utf-8").replace("\r\n", "\n").split("\n")
    return scala_build.sha256_text("\n".join(line.rstrip() for line in lines).rstrip("\n") + "\n")


def sources_manifest(sources_jar: Path) -> dict[str, str]:
    """``{path below src/main/{scala,resources}: normalised sha256}`` of a sources jar (no META-INF files)."""
    with zipfile.ZipFile(sources_jar) as archive:
        return {name: normalised_sha256(archive.read(name)) for name in sorted(archive.namelist())
                if not name.endswith("/") and (not name.startswith("META-INF/") or name.startswith("META-INF/services/"))}


def checkout_manifest(checkout: Path, module: str) -> dict[str, str]:
    """The same for one module of a Spark checkout (``src/main/{scala,java,resources}``)."""
    found: dict[str, str] = {}
    for kind in ("scala", "java", "resources"):
        root = checkout / module / kind
        for path in sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []:
            found[path.relative_to(root).as_posix()] = normalised_sha256(path.read_bytes())
    return found


def compare(spark_version: str, checkout: Path, cache: Path = CACHE) -> list[str]:
    """One line per file that differs between the sources jar used for ``spark_version`` and ``checkout``."""
    connector, token_provider = (checkout_manifest(checkout, module) for module in MODULE_DIRS)
    if not connector:
        raise ConnectorUnavailable(f"{checkout} has no {MODULE_DIRS[0]}")
    (sources_jar,) = maven_jars.jars(maven_jars.connector_sources_set(release_for(spark_version)), cache)
    ours = sources_manifest(sources_jar)
    lines = [f"changed  {p}" for p in sorted(set(ours) & set(connector)) if ours[p] != connector[p]]
    lines += [f"only in {sources_jar.name}  {p}" for p in sorted(set(ours) - set(connector))]
    lines += [f"only in the checkout  {p}" for p in sorted(set(connector) - set(ours))]
    if token_provider:
        lines.append(f"not compared  {len(token_provider)} token-provider files (no sources jar is served; "
                     "the lab uses that module's binary jar)")
    return lines


def default_python(spark_version: str) -> Path:
    """The interpreter whose pyspark is ``spark_version``: this one for the pinned, else its cached venv."""
    from pack_lab import spark_versions

    if spark_version == spark_versions.PINNED_VERSION:
        return Path(sys.executable)
    return spark_versions.venv_python(spark_version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pack_lab.kafka_connector", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("build", "path", "compare"))
    parser.add_argument("versions", nargs="+", help=f"PySpark versions: {', '.join(maven_jars.CONNECTOR_SOURCES)}")
    parser.add_argument("--python", help="interpreter whose pyspark wheel compiles it (one version only)")
    parser.add_argument("--spark-checkout", type=Path, help="compare: a Spark source tree at a release tag")
    args = parser.parse_args(argv)
    if args.python and len(args.versions) != 1:
        parser.error("--python goes with exactly one version")
    if (args.command == "compare") != (args.spark_checkout is not None):
        parser.error("compare needs --spark-checkout, and only compare takes it")
    try:
        for version in args.versions:
            if args.command == "build":
                build(version, args.python or default_python(version))
            elif args.command == "compare":
                differences = compare(version, args.spark_checkout)
                print("\n".join(differences) or f"the sources used for PySpark {version} equal the checkout's")
            else:
                print(os.pathsep.join(str(p) for p in jars(version)))
    except (maven_jars.JarsUnavailable, OSError) as exc:
        print(f"kafka_connector: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
