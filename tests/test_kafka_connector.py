"""Spark's Kafka connector built from its sources jar (pack_lab/kafka_connector.py).

The unit tests fake Maven and scalac (nothing is compiled): what a build packs,
that a warm cache does not compile again, that a changed input rebuilds, and that
a failure leaves nothing behind and says what is missing in one line. The tests
marked ``kafka`` check the real build the set-up made for the pinned PySpark and
that the shared session loads Spark's Kafka source from it.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from pack_lab import kafka_connector as kc
from pack_lab import maven_jars, scala_build

SCALA = "org/apache/spark/sql/kafka010/KafkaSourceProvider.scala"


def _sources_jar(path: Path, services: bool = True) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        archive.writestr(SCALA, "package org.apache.spark.sql.kafka010\nclass KafkaSourceProvider\n")
        archive.writestr("org/apache/spark/sql/kafka010/package-info.java", "package x;\n")
        archive.writestr("error/kafka-error-conditions.json", "{}\n")
        if services:
            archive.writestr(kc.SERVICES, kc.PROVIDER + "\n")
    return path


class _Fakes:
    """Stands in for Maven (the two sets), the wheel and scalac; counts compiles."""

    def __init__(self, tmp_path: Path, monkeypatch, services: bool = True, wheel_version: str = "4.3.0"):
        self.compiles = 0
        self.fail: str | None = None
        self.wheel = tmp_path / "wheel" / "jars"
        self.wheel.mkdir(parents=True)
        (self.wheel / "scala-compiler-2.13.18.jar").write_bytes(b"x")
        (self.wheel / "spark-sql_2.13-4.3.0.jar").write_bytes(b"x")
        sources = _sources_jar(tmp_path / "spark-sql-kafka-0-10_2.13-4.2.0-sources.jar", services)
        deps = [tmp_path / "kafka-clients-3.9.2.jar"]
        deps[0].write_bytes(b"x")
        entries = {maven_jars.connector_sources_set("4.2.0"): {"jars": {sources.name: "s"}},
                   maven_jars.connector_deps_set("4.2.0"): {"jars": {deps[0].name: "d"}}}
        monkeypatch.setattr(maven_jars, "fetch", lambda name, cache: [sources] if "src" in name else deps)
        monkeypatch.setattr(maven_jars, "jars", lambda name, cache=None, lock_path=None: deps)
        monkeypatch.setattr(maven_jars, "_entry", lambda name, lock_path=None: entries[name])
        monkeypatch.setattr(scala_build, "wheel_jars", lambda python: (wheel_version, self.wheel))
        monkeypatch.setattr(kc, "_java_version", lambda: 'openjdk version "17"')
        monkeypatch.setattr(scala_build, "scalac", self.scalac)

    def scalac(self, jars, sources, out, *, extra_classpath=(), options=(), allow_warnings=True):
        self.compiles += 1
        assert jars == self.wheel and [s.name for s in sources] == ["KafkaSourceProvider.scala"]
        assert [p.name for p in extra_classpath] == ["kafka-clients-3.9.2.jar"]
        if self.fail:
            raise scala_build.BuildFailed(self.fail)
        target = out / "org/apache/spark/sql/kafka010/KafkaSourceProvider.class"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"\xca\xfe\xba\xbe")
        return ["warning: 2 deprecations; re-run with -deprecation for details"]


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_unbuilt_connector_names_the_command(tmp_path):
    with pytest.raises(kc.ConnectorUnavailable, match=r"kafka_connector build 4\.3\.0") as info:
        kc.jars("4.3.0", cache=tmp_path)
    assert "\n" not in str(info.value)
    with pytest.raises(kc.ConnectorUnavailable, match="no connector sources are pinned for PySpark 3.5.0"):
        kc.jars("3.5.0", cache=tmp_path)


def test_build_packs_classes_and_resources_then_a_warm_cache_compiles_nothing(tmp_path, monkeypatch):
    fakes = _Fakes(tmp_path, monkeypatch)
    cache = tmp_path / "cache"
    built, *deps = kc.build("4.3.0", "python", cache=cache)
    assert built == cache / "spark-kafka-4.3.0" / "spark-sql-kafka-0-10_2.13-4.2.0-for-pyspark-4.3.0.jar"
    assert [d.name for d in deps] == ["kafka-clients-3.9.2.jar"]
    with zipfile.ZipFile(built) as archive:
        names = set(archive.namelist())
        assert archive.read(kc.SERVICES).decode().strip() == kc.PROVIDER
    assert names == {"META-INF/MANIFEST.MF", kc.SERVICES, "error/kafka-error-conditions.json",
                     "org/apache/spark/sql/kafka010/KafkaSourceProvider.class"}  # no sources, no package-info
    stamp = json.loads((built.parent / kc._STAMP).read_text())
    assert stamp["inputs"]["release"] == "4.2.0" and stamp["scala_compiler"] == ["scala-compiler-2.13.18.jar"]
    assert stamp["scalac_options"] == ["-release", "17"] and stamp["scalac_output"]
    assert _leftovers(cache) == ["spark-kafka-4.3.0"]
    assert kc.build("4.3.0", "python", cache=cache)[0] == built and fakes.compiles == 1  # warm: nothing compiled
    assert kc.jars("4.3.0", cache=cache)[0] == built


def test_a_changed_wheel_rebuilds(tmp_path, monkeypatch):
    fakes = _Fakes(tmp_path, monkeypatch)
    cache = tmp_path / "cache"
    kc.build("4.3.0", "python", cache=cache)
    (fakes.wheel / "spark-sql_2.13-4.3.0.jar").write_bytes(b"a different jar")
    kc.build("4.3.0", "python", cache=cache)
    assert fakes.compiles == 2


def test_a_failed_compile_leaves_nothing_and_says_why_in_one_line(tmp_path, monkeypatch):
    fakes = _Fakes(tmp_path, monkeypatch)
    fakes.fail = "scalac failed on 32 sources: error: value foo is not a member of Bar"
    cache = tmp_path / "cache"
    with pytest.raises(kc.ConnectorUnavailable, match=r"for PySpark 4\.3\.0: scalac failed.*not a member") as info:
        kc.build("4.3.0", "python", cache=cache)
    assert "\n" not in str(info.value)
    assert _leftovers(cache) == []
    with pytest.raises(kc.ConnectorUnavailable):
        kc.jars("4.3.0", cache=cache)


def test_a_sources_jar_without_the_service_file_is_refused(tmp_path, monkeypatch):
    _Fakes(tmp_path, monkeypatch, services=False)
    cache = tmp_path / "cache"
    with pytest.raises(kc.ConnectorUnavailable, match="has no META-INF/services"):
        kc.build("4.3.0", "python", cache=cache)
    assert _leftovers(cache) == []


def test_the_wheel_must_be_the_version_built_for(tmp_path, monkeypatch):
    fakes = _Fakes(tmp_path, monkeypatch, wheel_version="4.2.1")
    with pytest.raises(kc.ConnectorUnavailable, match=r"has pyspark 4\.2\.1, not 4\.3\.0"):
        kc.build("4.3.0", "python", cache=tmp_path / "cache")
    assert fakes.compiles == 0


def test_every_pyspark_line_has_pinned_sources_and_deps():
    lock = json.loads(maven_jars.LOCK.read_text())
    for version, release in maven_jars.CONNECTOR_SOURCES.items():
        (sources_jar,) = lock[maven_jars.connector_sources_set(release)]["jars"]
        assert sources_jar == f"spark-sql-kafka-0-10_2.13-{release}-sources.jar", version
        deps = lock[maven_jars.connector_deps_set(release)]["jars"]
        assert {name.rsplit("-", 1)[0] for name in deps} == {
            "spark-token-provider-kafka-0-10_2.13", "kafka-clients", "commons-pool2"}, version


# ------------------------------------------------------------ the real build (set-up made it)


@pytest.mark.kafka
def test_the_pinned_connector_is_built_from_the_sources_jar_for_java_17():
    try:
        built = kc.jars("4.3.0")[0]
    except kc.ConnectorUnavailable as exc:
        pytest.skip(str(exc))
    stamp = json.loads((built.parent / kc._STAMP).read_text())
    assert stamp["inputs"]["pyspark"] == "4.3.0" and stamp["inputs"]["release"] == "4.2.0"
    assert stamp["scalac_options"] == ["-release", "17"]
    assert not [line for line in stamp["scalac_output"] if "error" in line.lower()]  # the 4.3.0 jars took it
    with zipfile.ZipFile(built) as archive:
        classes = [n for n in archive.namelist() if n.endswith(".class")]
        assert kc.PROVIDER in archive.read(kc.SERVICES).decode()
        assert "error/kafka-error-conditions.json" in archive.namelist()
        assert not [n for n in archive.namelist() if n.endswith((".scala", ".java"))]
        majors = {int.from_bytes(archive.read(n)[6:8], "big") for n in classes}
    assert len(classes) == stamp["classes"] and majors == {61}


@pytest.mark.kafka
@pytest.mark.spark
def test_the_session_loads_spark_kafka_source_from_the_built_connector(spark):
    from pack_lab.kafka_version_check import provider_jar

    try:
        built = kc.jars("4.3.0")[0]
    except kc.ConnectorUnavailable as exc:
        pytest.skip(str(exc))
    assert Path(provider_jar(spark)).name == built.name


def test_compare_lists_what_differs_from_a_checkout(tmp_path, monkeypatch):
    jar = _sources_jar(tmp_path / "src.jar")
    monkeypatch.setattr(maven_jars, "jars", lambda name, cache=None, lock_path=None: [jar])
    module = tmp_path / "spark" / kc.MODULE_DIRS[0]
    with zipfile.ZipFile(jar) as archive:
        for name in archive.namelist():
            if name == "META-INF/MANIFEST.MF":
                continue
            kind = "scala" if name.endswith(".scala") else "java" if name.endswith(".java") else "resources"
            target = module / kind / name
            target.parent.mkdir(parents=True, exist_ok=True)
            # a CRLF checkout with trailing blanks hashes like the jar's LF text
            target.write_bytes(archive.read(name).replace(b"\n", b"  \r\n"))
    assert kc.compare("4.3.0", tmp_path / "spark") == []
    (module / "scala" / SCALA).write_text("package org.apache.spark.sql.kafka010\nclass KafkaSourceProvider2\n")
    (module / "scala" / "org/apache/spark/sql/kafka010/New.scala").write_text("object New\n")
    (module / "resources" / "error/kafka-error-conditions.json").unlink()
    token = tmp_path / "spark" / kc.MODULE_DIRS[1] / "scala" / "org/apache/spark/kafka010/KafkaTokenUtil.scala"
    token.parent.mkdir(parents=True)
    token.write_text("object KafkaTokenUtil\n")
    assert kc.compare("4.3.0", tmp_path / "spark") == [
        f"changed  {SCALA}", "only in src.jar  error/kafka-error-conditions.json",
        "only in the checkout  org/apache/spark/sql/kafka010/New.scala",
        "not compared  1 token-provider files (no sources jar is served; the lab uses that module's binary jar)"]
    with pytest.raises(kc.ConnectorUnavailable, match="has no connector/kafka-0-10-sql"):
        kc.compare("4.3.0", tmp_path / "nowhere")
