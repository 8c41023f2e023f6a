"""Getting rtm_lakebase to Spark's executors: a wheel built from the repository, or a zip for --py-files.

A ``foreach`` writer is pickled on the driver and unpickled by module name in
each Python worker, so the workers must be able to import ``rtm_lakebase``.
These tests build the two artifacts the sink reference names, exactly as it
says, and run a query in a fresh local Spark (its own process) whose Python
workers can import the package ONLY from the shipped artifact:

- the driver and the workers run the venv's Python with ``-S`` (no ``.pth``
  processing, so the repository's editable install is invisible) and a
  ``PYTHONPATH`` of the venv's site-packages only; the working folder is a
  temporary one, never the repository;
- a control run ships nothing and must fail in the worker with
  ``No module named 'rtm_lakebase'`` (proving the isolation holds);
- each shipped run reports where the worker imported the package from (inside
  the artifact), and its ``foreach`` writer upserts rows into Postgres.

The wheel's contents are checked too: the user's package and its metadata,
nothing from the lab, examples, tests or tools, and only pyspark and psycopg as
unconditional requirements.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_IGNORE = shutil.ignore_patterns(".git", ".venv", ".cache", "node_modules", "site", "dist", "build", "__pycache__",
                                 "*.egg-info", "test-artifacts", "spark-warehouse", "metastore_db")

DRIVER = r'''
import json, sys, time
mode, artifact, dsn, table, workdir = sys.argv[1:6]
if mode in ("zip", "none"):
    sys.path.insert(0, artifact)          # the driver's own copy: what a notebook or spark-submit has
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("shipping-" + mode)
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
if mode == "zip":
    spark.sparkContext.addPyFile(artifact)  # what spark-submit --py-files does
import rtm_lakebase
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings
result = {"driver_file": rtm_lakebase.__file__}
try:
    result["worker_file"] = (spark.sparkContext.parallelize([0], 1)
                             .map(lambda _: __import__("rtm_lakebase").__file__).collect()[0])
except Exception as exc:  # the control run: the worker cannot import the package
    result["worker_error"] = str(exc)[-2000:]
    print(json.dumps(result)); spark.stop(); sys.exit(3)
rows = "\n".join(json.dumps({"id": i, "version": v, "name": f"n{i}-{v}"})
                 for i, v in [(1, 1), (2, 1), (1, 2), (3, 5), (2, 0)])
import pathlib
(pathlib.Path(workdir) / "in").mkdir()
(pathlib.Path(workdir) / "in" / "part-0.json").write_text(rows + "\n")
writer = PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("id",), version_column="version"))
query = (spark.readStream.schema("id INT, version INT, name STRING").json(workdir + "/in")
         .writeStream.foreach(writer).outputMode("update")
         .option("checkpointLocation", workdir + "/ck").trigger(availableNow=True).start())
query.awaitTermination(180)
result["exception"] = str(query.exception()) if query.exception() else None
print(json.dumps(result))
spark.stop()
'''


def _copy_repo(dest: Path) -> Path:
    shutil.copytree(REPO, dest, ignore=_IGNORE)
    return dest


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """(wheel, zip, repository copy): built from a clean copy of the repository the way the reference says."""
    base = tmp_path_factory.mktemp("ship")
    src = _copy_repo(base / "repo")
    wheels = base / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                           "-q", "-w", str(wheels), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = wheels.glob("*.whl")
    proc = subprocess.run([sys.executable, "-m", "zipfile", "-c", "rtm_lakebase.zip", "rtm_lakebase/"],
                          cwd=src, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return wheel, src / "rtm_lakebase.zip", src


def test_wheel_holds_only_the_users_package(artifacts):
    wheel, _zip, _src = artifacts
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"rtm_lakebase"}, top
    modules = {n for n in names if n.startswith("rtm_lakebase/")}
    assert "rtm_lakebase/sink/writer.py" in modules and "rtm_lakebase/postgres/connection.py" in modules
    assert not any(n.startswith(("pack_lab/", "examples/", "tests/", "scripts/", "benchmarks/")) for n in names)
    (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    requires = [line.split(":", 1)[1].strip() for line in zipfile.ZipFile(wheel).read(meta).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    unconditional = sorted(r for r in requires if "extra ==" not in r)
    # psycopg only (a tested range, tests/test_install_ranges.py); PySpark comes with the `local` extra.
    assert [r.split("<")[0] for r in unconditional] == ["psycopg[binary]"], requires
    # Test, lint and documentation tools only ever come with the dev extra.
    tools = ("pytest", "hypothesis", "jsonschema", "mkdocs", "mkdocstrings", "websocket-client", "pgserver")
    assert any(r.startswith("pytest") and 'extra == "dev"' in r for r in requires)
    assert not [r for r in requires if r.startswith(tools) and 'extra == "dev"' not in r], requires


def test_pip_install_of_the_wheel_installs_no_lab_or_test_tool(artifacts, tmp_path):
    wheel, _zip, _src = artifacts
    target = tmp_path / "target"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
                           "-q", "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    installed = sorted(p.name for p in target.iterdir())
    assert [n for n in installed if not n.endswith(".dist-info")] == ["rtm_lakebase"], installed


def _isolated_env(tmp_path: Path, extra_path: str | None) -> dict:
    """Driver and workers: the venv's interpreter with -S, site-packages (+ extra_path) only, no repository."""
    wrapper = tmp_path / "python-S"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    paths = [sysconfig.get_paths()["purelib"]] + ([extra_path] if extra_path else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSPARK", "SPARK_"))}
    env.update(PYTHONPATH=os.pathsep.join(paths), PYSPARK_PYTHON=str(wrapper),
               PYSPARK_DRIVER_PYTHON=str(wrapper), PYTHONNOUSERSITE="1")
    return env, wrapper


def _run_driver(tmp_path: Path, mode: str, artifact: Path, dsn: str, table: str, extra_path: str | None = None):
    env, wrapper = _isolated_env(tmp_path, extra_path)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([str(wrapper), str(script), mode, str(artifact), dsn, table, str(work)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"rc={proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.returncode, json.loads(lines[-1])


def _make_table(pg_conn, table: str) -> None:
    pg_conn.execute(f'CREATE TABLE "{table}" (id int PRIMARY KEY, version int, name text)')


def _rows(pg_conn, table: str) -> dict:
    return {i: (v, n) for i, v, n in pg_conn.execute(f'SELECT id, version, name FROM "{table}"').fetchall()}


EXPECTED = {1: (2, "n1-2"), 2: (1, "n2-1"), 3: (5, "n3-5")}


@pytest.mark.slow
@pytest.mark.postgres
def test_control_workers_cannot_import_the_package_unless_it_is_shipped(artifacts, tmp_path, pg_dsn, pg_conn,
                                                                         table_name):
    _wheel, zip_path, src = artifacts
    _make_table(pg_conn, table_name)
    rc, result = _run_driver(tmp_path, "none", zip_path, pg_dsn, table_name)
    assert rc == 3, result
    assert "No module named 'rtm_lakebase'" in result["worker_error"]
    assert result["driver_file"].startswith(str(zip_path))  # the driver itself had it, from the zip
    assert _rows(pg_conn, table_name) == {}


@pytest.mark.slow
@pytest.mark.postgres
def test_zip_shipped_with_addpyfile_reaches_the_workers_and_the_writer_writes(artifacts, tmp_path, pg_dsn,
                                                                               pg_conn, table_name):
    _wheel, zip_path, src = artifacts
    _make_table(pg_conn, table_name)
    rc, result = _run_driver(tmp_path, "zip", zip_path, pg_dsn, table_name)
    assert rc == 0 and result["exception"] is None, result
    worker = result["worker_file"]
    assert "rtm_lakebase.zip" in worker and not worker.startswith(str(REPO)), worker
    assert not worker.startswith(str(src)), "the worker must use Spark's shipped copy, not the driver's file"
    assert _rows(pg_conn, table_name) == EXPECTED


@pytest.mark.slow
@pytest.mark.postgres
def test_wheel_installed_on_the_workers_reaches_them_and_the_writer_writes(artifacts, tmp_path, pg_dsn, pg_conn,
                                                                          table_name):
    wheel, _zip, _src = artifacts
    target = tmp_path / "cluster-library"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
                           "-q", "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    _make_table(pg_conn, table_name)
    rc, result = _run_driver(tmp_path, "wheel", wheel, pg_dsn, table_name, extra_path=str(target))
    assert rc == 0 and result["exception"] is None, result
    assert result["worker_file"].startswith(str(target)), result
    assert result["driver_file"].startswith(str(target)), result
    assert _rows(pg_conn, table_name) == EXPECTED
