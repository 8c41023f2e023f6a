"""Drive the JVM writer object directly through py4j (no streaming query): open, rows, close."""

from __future__ import annotations


def java_row(spark, ddl: str, values: list):
    """A Spark Row with schema ``ddl`` holding ``values`` (Python values py4j converts, or Java objects)."""
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    array = gateway.new_array(jvm.java.lang.Object, len(values))
    for i, value in enumerate(values):
        array[i] = value
    schema = jvm.org.apache.spark.sql.types.StructType.fromDDL(ddl)
    return jvm.org.apache.spark.sql.catalyst.expressions.GenericRowWithSchema(array, schema)


def java_list(spark, items: list):
    out = spark.sparkContext._jvm.java.util.ArrayList()
    for item in items:
        out.add(item)
    return out


def write_rows(writer, rows) -> str:
    """open, process every row, close; returns the writer's metrics, raises what close() raises."""
    assert writer.open(0, 0)
    error = None
    try:
        for row in rows:
            writer.process(row)
    except Exception as exc:  # the writer's error: close() must still run
        error = exc
    writer.close(None)
    if error is not None:
        raise error
    return writer.metrics()
