"""The upstream patch (upstream/python-foreach-latency/) against the pinned Spark 4.3.0.

compile_patch.py rebuilds 4.3.0's PythonForeachWriter.scala (4.2.0 sources jar from Maven Central
+ spark-4.3.0-from-4.2.0.patch), checks that it compiles to the 4.3.0 jar's bytecode, applies
python-foreach-available-rows.patch without fuzz and compiles it with the wheel's scala-compiler.
The patched classes are then put ahead of Spark's jars and a stock ``writeStream.foreach`` query
must hand a lone row to ``process()`` while its long batch runs, which stock 4.3.0 does not.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "upstream" / "python-foreach-latency"
pytestmark = [pytest.mark.upstream_patch, pytest.mark.slow]


def _load_compile_patch():
    spec = importlib.util.spec_from_file_location("compile_patch", FOLDER / "compile_patch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("upstream-patch") / "build"
    summary_file = out.parent / "summary.json"
    proc = subprocess.run([sys.executable, str(FOLDER / "compile_patch.py"), "--out", str(out),
                           "--json", str(summary_file)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, json.loads(summary_file.read_text())


def test_rebuilt_base_is_spark_430_and_the_patch_compiles_on_it(compiled):
    out, summary = compiled
    module = _load_compile_patch()
    # the base's classes are the ones the 4.3.0 jar has for this file, all equal to the jar's
    with zipfile.ZipFile(module.spark_jars() / "spark-sql_2.13-4.3.0.jar") as jar:
        shipped = sorted(n for n in jar.namelist() if n.startswith(module.PACKAGE_PATH)
                         and n.rsplit("/", 1)[1].startswith(("PythonForeachWriter", "WriterThread")))
    assert summary["base_classes_equal_to_jar"] == shipped
    assert module.compare_with_jar(out / "base", module.spark_jars() / "spark-sql_2.13-4.3.0.jar") == []
    # the patch's new pickler is among the compiled classes, and they are Java 17 class files
    pickler = module.PACKAGE_PATH + "PythonForeachWriter$AvailableRowsPickler.class"
    assert pickler in summary["patched_classes"]
    assert (out / "patched" / pickler).read_bytes()[6:8] == (61).to_bytes(2, "big")
    assert summary["upstream_patch_sha256"] == module.sha256(module.UPSTREAM_PATCH)


def test_bytecode_check_tells_the_patched_classes_from_the_jar(compiled):
    out, _ = compiled
    module = _load_compile_patch()
    differing = module.compare_with_jar(out / "patched", module.spark_jars() / "spark-sql_2.13-4.3.0.jar")
    assert module.PACKAGE_PATH + "PythonForeachWriter.class" in differing
    assert any("AvailableRowsPickler" in name and "not in" in name for name in differing)


def test_patch_does_not_apply_to_the_unrebuilt_420_source(tmp_path):
    module = _load_compile_patch()
    source = tmp_path / module.SOURCE_FILE
    source.parent.mkdir(parents=True)
    with zipfile.ZipFile(module.fetch_sources_jar()) as archive:
        source.write_bytes(archive.read(module.SOURCE_FILE.split("src/main/scala/", 1)[1]))
    with pytest.raises(module.StepFailed, match="does not apply cleanly"):
        module.git_apply(module.UPSTREAM_PATCH, tmp_path)


def _lone_row(*extra: str, wait: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.run([sys.executable, str(FOLDER / "reproduce.py"), "--lone-row", "--wait", str(wait), *extra],
                          capture_output=True, text=True, env=env, timeout=600)


def test_patched_writer_hands_a_lone_row_to_process(compiled):
    out, _ = compiled
    proc = _lone_row("--spark-classes", str(out / "patched"), wait=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    assert "lone row 2 reached process()" in proc.stdout


def test_stock_writer_holds_a_lone_row_until_more_rows_or_the_batch_end():
    proc = _lone_row(wait=30)
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-2000:]
    assert "lone row 1 did not reach process() within 30 s" in proc.stdout
