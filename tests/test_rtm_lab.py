"""The lab refuses a Spark that cannot run RTM, and rejects rows that do not fit the schema."""

import pytest

from pack_lab.rtm_lab import (
    LabConfig,
    RealTimeMemorySource,
    RealTimeModeUnavailable,
    check_spark_version,
    session_conf,
    spark_version_tuple,
)


@pytest.mark.parametrize("version, expected", [("4.3.0", (4, 3)), ("4.10.1", (4, 10)),
                                               ("4.3.0.dev1", (4, 3)), ("nonsense", (0, 0))])
def test_version_parsing(version, expected):
    assert spark_version_tuple(version) == expected


def test_old_spark_is_refused_naming_the_version_found():
    with pytest.raises(RealTimeModeUnavailable, match=r"pyspark 4\.1\.2 found.*4\.3 or later"):
        check_spark_version("4.1.2")
    assert check_spark_version("4.3.0") == "4.3.0"


def test_session_conf_sizes_slots_and_pins_the_worker_python():
    import sys

    conf = session_conf(LabConfig(cores=6, shuffle_partitions=3))
    assert conf["spark.master"] == "local[6]"
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert conf["spark.pyspark.python"] == sys.executable


@pytest.mark.spark
def test_rows_that_do_not_fit_the_schema_are_refused(spark):
    source = RealTimeMemorySource(spark, "id INT, name STRING")
    with pytest.raises(ValueError, match=r"not in the schema: \['extra'\]"):
        source.add([{"id": 1, "extra": 2}])
    with pytest.raises(ValueError, match="row has 1 values, the schema has 2 columns"):
        source.add([(1,)])
    with pytest.raises(ValueError, match="partition must be in"):
        source.add([{"id": 1, "name": "a"}], partition=1)
    assert source.rows_added == 0
    with pytest.raises(ValueError, match="num_partitions must be at least 1"):
        RealTimeMemorySource(spark, "id INT", num_partitions=0)
