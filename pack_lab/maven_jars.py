"""Pinned, checksummed jar sets from Maven Central, cached under ``.cache/jars/<set>/``.

The lab needs a few real Java components that neither the pyspark wheel nor
Debian ships at the right version: the Kafka broker, the sources and dependencies of
Spark's Kafka connector (built by ``pack_lab/kafka_connector.py``) and the Postgres JDBC driver. Each is a *set* in :data:`SETS` (Maven
coordinates, pinned), and ``pack_lab/maven_jars.lock.json`` records the
sha256 of every jar of every set. ``fetch`` resolves a set with Maven (a
generated pom and ``mvn dependency:copy-dependencies``, so Maven uses its own
default repository and local cache), checks every jar against the lock, and
only then moves the folder into place::

    python -m pack_lab.maven_jars fetch kafka-broker spark-kafka-deps-4.2.0 pgjdbc
    python -m pack_lab.maven_jars lock kafka-broker     # maintainers: re-pin a set

A set whose folder carries a stamp equal to its lock entry is not fetched
again, so the set-up costs nothing once the cache is warm. A jar whose
checksum differs from the lock is an error and nothing is kept.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "jars"
LOCK = Path(__file__).resolve().parent / "maven_jars.lock.json"
_STAMP = ".verified"

KAFKA_VERSION = "4.4.0"
PGJDBC_VERSION = "42.7.14"

#: Spark's Kafka connector is *built* by ``pack_lab/kafka_connector.py`` for each PySpark line, from
#: the connector's sources jar (Maven Central serves ``spark-sql-kafka-0-10_2.13`` and its
#: ``-sources.jar`` for 4.1.0–4.1.3 and 4.2.0, not for 4.1.4, 4.2.1 or 4.3.0; checked 2026-11-27).
#: Each line uses the newest served sources of its line. Of the token-provider module, Maven Central
#: serves among the 4.1/4.2 releases only the 4.1.1 and 4.2.0 binaries and no sources jar, so its binary is used (it is on the
#: compile classpath and on ``spark.jars``). The kafka-clients and commons-pool2 versions are the
#: ones the connector's parent pom names (4.1.3: 3.9.1/2.12.1; 4.2.0: 3.9.2/2.13.1).
CONNECTOR_SOURCES = {"4.3.0": "4.2.0", "4.2.1": "4.2.0", "4.1.4": "4.1.3"}
_TOKEN_PROVIDER = {"4.2.0": "4.2.0", "4.1.3": "4.1.1"}
_CONNECTOR_DEPS = {"4.2.0": ("3.9.2", "2.13.1"), "4.1.3": ("3.9.1", "2.12.1")}


def connector_sources_set(release: str) -> str:
    """Name of the set holding the connector's sources jar of Spark ``release``."""
    return f"spark-kafka-src-{release}"


def connector_deps_set(release: str) -> str:
    """Name of the set holding what the connector of ``release`` needs beside the wheel's jars."""
    return f"spark-kafka-deps-{release}"


def _connector_sets(release: str) -> dict[str, dict]:
    clients, pool = _CONNECTOR_DEPS[release]
    token = _TOKEN_PROVIDER[release]
    return {
        connector_sources_set(release): {
            "about": f"the sources jar of Spark's Kafka connector {release}",
            "transitive": False,
            "artifacts": [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{release}:sources"],
        },
        connector_deps_set(release): {
            "about": f"the jars Spark's Kafka connector {release} needs beside pyspark's (token provider "
                     f"{token}, kafka-clients {clients}, commons-pool2 {pool})",
            "transitive": False,
            "artifacts": [f"org.apache.spark:spark-token-provider-kafka-0-10_2.13:{token}",
                          f"org.apache.kafka:kafka-clients:{clients}",
                          f"org.apache.commons:commons-pool2:{pool}"],
        },
    }


SETS: dict[str, dict] = {
    "kafka-broker": {
        "about": f"Apache Kafka {KAFKA_VERSION} broker (KRaft) with a log4j2 binding",
        "transitive": True,
        "artifacts": [f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
                      "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"],
    },
    "pgjdbc": {
        "about": f"the Postgres JDBC driver {PGJDBC_VERSION}",
        "transitive": False,
        "artifacts": [f"org.postgresql:postgresql:{PGJDBC_VERSION}"],
    },
    "spark-sql-src-4.2.0": {
        "about": "the sources jar of spark-sql 4.2.0 (upstream/python-foreach-latency rebuilds 4.3.0's "
                 "PythonForeachWriter.scala from it)",
        "transitive": False,
        "artifacts": ["org.apache.spark:spark-sql_2.13:4.2.0:sources"],
    },
    **{name: spec for release in sorted(set(CONNECTOR_SOURCES.values()))
       for name, spec in _connector_sets(release).items()},
}


class JarsUnavailable(RuntimeError):
    """A jar set is not cached (or not verified); the message says how to get it."""


def _say(message: str) -> None:
    print(f"[jars] {message}", file=sys.stderr, flush=True)


def set_dir(name: str, cache: Path = CACHE) -> Path:
    return cache / name


def _lock(lock_path: Path = LOCK) -> dict:
    if not lock_path.is_file():
        return {}
    return json.loads(lock_path.read_text(encoding="utf-8"))


def _entry(name: str, lock_path: Path = LOCK) -> dict:
    entry = _lock(lock_path).get(name)
    if entry is None or entry.get("artifacts") != SETS[name]["artifacts"]:
        raise JarsUnavailable(f"{lock_path.name} has no entry for {name} with these artifacts; "
                              f"run `python -m pack_lab.maven_jars lock {name}`")
    return entry


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stamp_text(entry: dict) -> str:
    return json.dumps(entry, sort_keys=True)


def is_ready(name: str, cache: Path = CACHE, lock_path: Path = LOCK) -> bool:
    folder = set_dir(name, cache)
    try:
        entry = _entry(name, lock_path)
    except JarsUnavailable:
        return False
    stamp = folder / _STAMP
    return stamp.is_file() and stamp.read_text(encoding="utf-8") == _stamp_text(entry)


def jars(name: str, cache: Path = CACHE, lock_path: Path = LOCK) -> list[Path]:
    """The verified jars of set ``name``, or :class:`JarsUnavailable` saying how to fetch them."""
    if name not in SETS:
        raise KeyError(f"unknown jar set {name!r}; known: {', '.join(SETS)}")
    if not is_ready(name, cache, lock_path):
        raise JarsUnavailable(
            f"{SETS[name]['about']} is not in {set_dir(name, cache)}; run `bash scripts/setup.sh` "
            f"(or `.venv/bin/python -m pack_lab.maven_jars fetch {name}`; needs Maven and Java)")
    entry = _entry(name, lock_path)
    return [set_dir(name, cache) / jar for jar in sorted(entry["jars"])]


def _pom(name: str) -> str:
    deps = []
    for coords in SETS[name]["artifacts"]:
        group, artifact, version, *classifier = coords.split(":")
        classifier_tag = f"<classifier>{classifier[0]}</classifier>" if classifier else ""
        # A set that is not transitive excludes everything below its artifacts, so Maven does not
        # even read their dependencies' descriptors (Spark's poms name extra repositories).
        exclusions = ("" if SETS[name]["transitive"] else
                      "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>")
        deps.append(f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                    f"<version>{version}</version>{classifier_tag}{exclusions}</dependency>")
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>rtm-pack.jars</groupId><artifactId>{name}</artifactId><version>1</version>"
            f"<packaging>pom</packaging><dependencies>{''.join(deps)}</dependencies></project>\n")


def _resolve(name: str, out: Path) -> None:
    """Copy the set's jars into ``out`` with Maven, printing one line per download."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsUnavailable("Maven (mvn) is needed to fetch the pinned jars and was not found; "
                              "install it (Debian/Ubuntu: apt-get install maven; macOS: brew install maven)")
    work = Path(tempfile.mkdtemp(prefix=f"rtm-pack-mvn-{name}-"))
    try:
        (work / "pom.xml").write_text(_pom(name), encoding="utf-8")
        cmd = [mvn, "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
               f"-DoutputDirectory={out}", "-DincludeScope=runtime",
               f"-DexcludeTransitive={'false' if SETS[name]['transitive'] else 'true'}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
        tail: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = (tail + [line])[-15:]
            downloaded = re.search(r"Downloaded from \S+ \S+/([^/\s]+\.jar)", line)
            if downloaded:
                _say(f"  downloaded {downloaded.group(1)}")
        if proc.wait() != 0:
            errors = [t for t in tail if "ERROR" in t][:3] or tail[-3:]
            raise JarsUnavailable(f"Maven could not resolve {name}: " + " | ".join(errors))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fetch(name: str, cache: Path = CACHE, lock_path: Path = LOCK) -> list[Path]:
    """Make sure set ``name`` is cached and verified; return its jars."""
    if is_ready(name, cache, lock_path):
        return jars(name, cache, lock_path)
    entry = _entry(name, lock_path)
    target = set_dir(name, cache)
    cache.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=cache))
    try:
        _say(f"fetching {SETS[name]['about']} ({len(entry['jars'])} jars)")
        _resolve(name, building)
        found = {p.name: _sha256(p) for p in building.glob("*.jar")}
        for jar, expected in entry["jars"].items():
            if found.get(jar) != expected:
                raise JarsUnavailable(f"{jar} of {name}: sha256 {found.get(jar, 'missing')} "
                                      f"does not match the lock ({expected}); nothing was kept")
        for extra in set(found) - set(entry["jars"]):
            (building / extra).unlink()
        (building / _STAMP).write_text(_stamp_text(entry), encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        building.chmod(0o755)  # mkdtemp made it 0700: the jars are read by other users too (the eval sandbox)
        building.rename(target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    _say(f"{name}: {len(entry['jars'])} jars verified in {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
    return jars(name, cache, lock_path)


def lock(names: list[str], lock_path: Path = LOCK) -> None:
    """Resolve each set afresh and record its jars' sha256 (a maintainer's step)."""
    data = _lock(lock_path)
    for name in names:
        with tempfile.TemporaryDirectory() as out:
            _resolve(name, Path(out))
            data[name] = {"artifacts": SETS[name]["artifacts"],
                          "jars": {p.name: _sha256(p) for p in sorted(Path(out).glob("*.jar"))}}
        lock_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        _say(f"locked {name}: {len(data[name]['jars'])} jars")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pack_lab.maven_jars", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("fetch", "lock", "path"))
    parser.add_argument("sets", nargs="*", help=f"jar sets (default: all): {', '.join(SETS)}")
    args = parser.parse_args(argv)
    names = args.sets or list(SETS)
    unknown = [n for n in names if n not in SETS]
    if unknown:
        print(f"maven_jars: unknown jar set(s) {', '.join(unknown)}; known: {', '.join(SETS)}", file=sys.stderr)
        return 2
    try:
        if args.command == "lock":
            lock(names)
        elif args.command == "fetch":
            for name in names:
                fetch(name)
        else:
            for name in names:
                print(os.pathsep.join(str(p) for p in jars(name)))
    except (JarsUnavailable, OSError) as exc:
        print(f"maven_jars: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
