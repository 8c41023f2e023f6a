import sys, time, tempfile, traceback
from pyspark.sql import SparkSession, DataFrame, functions as F
from pyspark.sql.types import *
spark=(SparkSession.builder.master("local[8]").config("spark.ui.enabled","false")
       .config("spark.sql.shuffle.partitions","2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
jvm=spark._jvm
def mem_df():
    enc=jvm.org.apache.spark.sql.Encoders.INT()
    s=jvm.org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream.apply(2, enc, spark._jsparkSession.sqlContext())
    return s, DataFrame(s.toDF(), spark).withColumnRenamed("value","v")
class W:
    def open(self,p,e): return True
    def process(self,r): pass
    def close(self,e): pass
def run(name, build, sink="foreach", wait=8):
    tmp=tempfile.mkdtemp()
    try:
        s,df=mem_df()
        jl=jvm.java.util.ArrayList()
        for i in range(10): jl.add(i)
        s.addData(jvm.scala.jdk.javaapi.CollectionConverters.asScala(jl))
        out=build(df)
        w=out.writeStream.option("checkpointLocation",tmp).outputMode("update").trigger(realTime="5 seconds")
        if sink=="foreach": w=w.foreach(W())
        elif sink=="memory": w=w.format("memory").queryName("m_"+name)
        elif sink=="foreachBatch": w=w.foreachBatch(lambda d,i: None)
        elif sink=="console": w=w.format("console")
        q=w.start()
        t=time.time()
        while time.time()-t<wait and q.isActive: time.sleep(0.5)
        ex=q.exception()
        if ex is not None:
            print(f"RESULT {name}: REJECTED/FAILED -> {str(ex)[:300]!r}")
        else:
            print(f"RESULT {name}: OK (active={q.isActive}) progress={bool(q.lastProgress)}")
        q.stop()
    except Exception as e:
        print(f"RESULT {name}: REJECTED at start -> {str(e)[:300]!r}")
from pyspark.sql.functions import udf, broadcast
plus1=udf(lambda x: x+1, IntegerType())
static=spark.range(10).withColumnRenamed("id","v").withColumn("name",F.lit("x"))
tests={
 "baseline_foreach": (lambda d: d, "foreach"),
 "python_udf": (lambda d: d.select(plus1("v").alias("v")), "foreach"),
 "memory_sink": (lambda d: d, "memory"),
 "foreach_batch": (lambda d: d, "foreachBatch"),
 "drop_duplicates": (lambda d: d.dropDuplicates(["v"]), "foreach"),
 "aggregation": (lambda d: d.groupBy((F.col("v")%3).alias("k")).count(), "foreach"),
 "drop_duplicates_within_watermark": (lambda d: d.withColumn("ts",F.current_timestamp()).withWatermark("ts","10 seconds").dropDuplicatesWithinWatermark(["v"]), "foreach"),
 "session_window": (lambda d: d.withColumn("ts",F.current_timestamp()).withWatermark("ts","10 seconds").groupBy(F.session_window("ts","5 seconds")).count(), "foreach"),
 "broadcast_stream_static_join": (lambda d: d.join(broadcast(static),"v"), "foreach"),
}
only=sys.argv[1:] or list(tests)
for n in only:
    b,s=tests[n]; run(n,b,s)
# rate source
tmp=tempfile.mkdtemp()
if not sys.argv[1:]:
    try:
        q=spark.readStream.format("rate").load().writeStream.foreach(W()).outputMode("update").option("checkpointLocation",tmp).trigger(realTime="5 seconds").start()
        time.sleep(8); ex=q.exception(); print("RESULT rate_source:", "OK" if ex is None else "FAILED -> "+str(ex)[:300]); q.stop()
    except Exception as e: print("RESULT rate_source: REJECTED at start ->", str(e)[:300])
spark.stop()
