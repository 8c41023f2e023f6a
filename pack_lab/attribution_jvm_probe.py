"""Can a Python program run the JVM ``transformWithState`` in open-source real-time mode? A probe.

PySpark's ``groupBy(...).transformWithState(...)`` always plans the Python
operator (``TransformWithStateInPySparkExec``), which real-time mode refuses
in Spark 4.3. The JVM operator (``TransformWithStateExec``) is on the
real-time allowlist, but it runs only a processor compiled for the JVM. This
probe checks the one route left to a Python program: compile a small Java
``StatefulProcessor`` with ``javac``, put it on the driver's class path, and
call the Java Dataset API through py4j (``df._jdf``, an internal attribute),
with a Python ``foreach`` sink and ``trigger(realTime=...)``.

Run ``python -m pack_lab.attribution_jvm_probe``; it prints one JSON object:
``{"ok": bool, "rows": [...], "operator": [...], "real_time_scan": bool,
"plan": "...", "error": ...}``; exit status 0 only when the JVM operator ran
in real-time mode and emitted the expected counts. It starts
its own SparkSession in a child process (the class must be on the class
path when the JVM starts), so call it from a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: A per-key running count: the smallest JVM processor that keeps state.
JAVA_SOURCE = """
package packlab;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.jdk.javaapi.CollectionConverters;

public class CountProcessor extends StatefulProcessor<String, String, String> {
  private transient ValueState<Long> count;

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    count = getHandle().getValueState("count", Encoders.LONG(), TTLConfig.NONE());
  }

  @Override
  public scala.collection.Iterator<String> handleInputRows(
      String key, scala.collection.Iterator<String> rows, TimerValues timerValues) {
    long n = count.exists() ? count.get() : 0L;
    List<String> out = new ArrayList<>();
    while (rows.hasNext()) {
      rows.next();
      n += 1;
      out.add(key + ":" + n);
    }
    count.update(n);
    return CollectionConverters.asScala(out.iterator());
  }
}
"""


def _pyspark_jars() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")


def build_jar(workdir: Path) -> Path:
    """Compile :data:`JAVA_SOURCE` with ``javac`` and pack it with ``jar``; return the jar."""
    for tool in ("javac", "jar"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found: install a JDK 17 (Debian: openjdk-17-jdk-headless)")
    src = workdir / "src" / "packlab" / "CountProcessor.java"
    src.parent.mkdir(parents=True)
    src.write_text(JAVA_SOURCE, encoding="utf-8")
    classes = workdir / "classes"
    subprocess.run(["javac", "-nowarn", "-cp", _pyspark_jars(), "-d", str(classes), str(src)],
                   check=True, capture_output=True, text=True)
    jar = workdir / "count-processor.jar"
    subprocess.run(["jar", "cf", str(jar), "-C", str(classes), "."], check=True,
                   capture_output=True, text=True)
    return jar


def run_probe(jar: Path, workdir: Path, timeout_s: float = 120.0) -> dict:
    """In this process: start a session with ``jar``, run the JVM operator in real-time mode."""
    from pyspark.sql import DataFrame

    from pack_lab.file_sink import read_rows
    from pack_lab.rtm_lab import RealTimeMemorySource, build_session

    spark = build_session(cores=4, shuffle_partitions=2, app_name="jvm-tws-probe",
                          extra_conf={"spark.driver.extraClassPath": str(jar),
                                      "spark.jars": str(jar)})
    jvm = spark.sparkContext._jvm
    source = RealTimeMemorySource(spark, "k STRING")
    raw = source.raw_dataframe()  # one string column, "value": the key itself here
    encoders = jvm.org.apache.spark.sql.Encoders
    by_value = raw._jdf.groupBy(jvm.org.apache.spark.api.python.PythonUtils.toSeq([raw["value"]._jc]))
    grouped = getattr(by_value, "as")(encoders.STRING(), encoders.STRING())  # `as` is a Python keyword
    counted = grouped.transformWithState(
        jvm.packlab.CountProcessor(), getattr(jvm.org.apache.spark.sql.streaming.TimeMode, "None")(),
        jvm.org.apache.spark.sql.streaming.OutputMode.Update(), encoders.STRING())
    df = DataFrame(counted.toDF(), spark)
    out = workdir / "out"
    from pack_lab.file_sink import JsonLinesForeachWriter

    query = (df.writeStream.foreach(JsonLinesForeachWriter(out)).outputMode("update")
             .trigger(realTime="5 seconds")
             .option("checkpointLocation", str(workdir / "checkpoint")).start())
    result = {"ok": False, "rows": [], "operator": None, "error": None,
              "trigger": "realTime=5 seconds"}
    try:
        jseq = jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray(
            jvm.org.apache.commons.lang3.StringUtils.split("a\nb\na", "\n"))
        source._stream.addData(jseq)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and query.isActive and len(read_rows(out)) < 3:
            time.sleep(0.5)
        result["rows"] = sorted(r["value"] for r in read_rows(out))
        result["active"] = query.isActive
        if not query.isActive:
            result["error"] = str(query.exception())
        plan = query._jsq.explainInternal(False)  # what query.explain() prints
        result["operator"] = sorted({word.lstrip("+-:*() ") for word in plan.split()
                                     if word.lstrip("+-:*() ").startswith("TransformWithState")})
        result["plan"] = plan
        result["real_time_scan"] = "RealTimeStreamScan" in plan
        result["ok"] = result["active"] and result["real_time_scan"] and result["rows"] == ["a:1", "a:2", "b:1"]
    finally:
        query.stop()
        spark.stop()
    return result


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="jvm-tws-probe-"))
    try:
        try:
            jar = build_jar(workdir)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            print(json.dumps({"ok": False, "error": f"build failed: {detail.strip()[:500]}"}))
            return 2
        try:
            result = run_probe(jar, workdir)
        except Exception as exc:  # one line for the caller, not a py4j traceback
            first = (str(exc).strip().splitlines() or [""])[0]
            result = {"ok": False, "error": f"{type(exc).__name__}: {first[:500]}"}
        print(json.dumps(result))
        return 0 if result["ok"] else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
