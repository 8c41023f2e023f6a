import sys, time, tempfile, traceback
from pyspark.sql import SparkSession, DataFrame, functions as F
from pyspark.sql.types import *
spark=(SparkSession.builder.master("local[4]").config("spark.ui.enabled","false")
       .config("spark.sql.shuffle.partitions","1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
jvm=spark._jvm
def mem_stream():
    LL=getattr(jvm.org.apache.spark.sql.execution.streaming.sources,"LowLatencyMemoryStream$"); LL=getattr(LL,"MODULE$")
    s=LL.singlePartition(spark._jsparkSession, jvm.org.apache.spark.sql.Encoders.INT())
    return s, DataFrame(s.toDF(), spark)
def add(s, vals):
    jl=jvm.java.util.ArrayList()
    for v in vals: jl.add(int(v))
    s.addData(jvm.scala.jdk.javaapi.CollectionConverters.asScala(jl))
class W:
    def open(self,p,e): return True
    def process(self,r): pass
    def close(self,e): pass
def run(name, build, sink="foreach", mode="update", wait=12):
    ck=tempfile.mkdtemp()
    try:
        s, df = mem_stream()
        out = build(df)
        w = out.writeStream.outputMode(mode).option("checkpointLocation", ck)
        if sink=="foreach": w=w.foreach(W())
        elif sink=="memory": w=w.format("memory").queryName("m_"+name)
        elif sink=="foreach_batch": w=w.foreachBatch(lambda d,i: None)
        elif sink=="console": w=w.format("console")
        q=w.trigger(realTime="5 seconds").start()
    except Exception as e:
        print("RESULT", name, "REJECTED_AT_START", str(e).splitlines()[0][:300]); return
    try:
        add(s, range(10)); t=time.time()
        while time.time()-t<wait and q.isActive: time.sleep(0.5)
        add(s, range(10,20)); time.sleep(2)
        ex=q.exception()
        if ex is not None or not q.isActive:
            m=str(ex) if ex else "stopped"
            i=m.find("STREAMING_REAL_TIME_MODE"); 
            print("RESULT", name, "FAILED_AT_RUNTIME", (m[i:i+300] if i>=0 else m[:300]).replace("\n"," "))
        else:
            print("RESULT", name, "RUNNING_OK", (q.lastProgress or {}).get("numInputRows"))
    finally:
        try: q.stop()
        except Exception as e: print("stop err", str(e)[:100])
tests = {
 "baseline": lambda df: df.select("value"),
 "python_udf": lambda df: df.select(F.udf(lambda x: x+1, IntegerType())("value").alias("v")),
 "drop_duplicates": lambda df: df.dropDuplicates(["value"]),
 "aggregation": lambda df: df.groupBy((F.col("value")%3).alias("k")).count(),
 "drop_duplicates_within_watermark": lambda df: df.withColumn("ts", F.current_timestamp()).withWatermark("ts","10 seconds").dropDuplicatesWithinWatermark(["value"]),
 "session_window": lambda df: df.withColumn("ts", F.current_timestamp()).withWatermark("ts","10 seconds").groupBy(F.session_window("ts","5 seconds")).count(),
 "broadcast_stream_static_join": lambda df: df.join(F.broadcast(spark.createDataFrame([(i, "n%d"%i) for i in range(20)], "value int, name string")), "value"),
}
try:
    from pyspark.sql.streaming import StatefulProcessor
    import pandas as pd
    class P(StatefulProcessor):
        def init(self, h):
            self.c = h.getValueState("c", "n long")
        def handleInputRows(self, key, rows, timerValues):
            n = 0
            for pdf in rows: n += len(pdf)
            yield pd.DataFrame({"k": [key[0]], "n": [n]})
        def close(self): pass
    tests["transform_with_state_in_pandas"] = lambda df: df.withColumn("k", F.col("value") % 3).groupBy("k").transformWithStateInPandas(P(), "k int, n long", "Update", "None")
except Exception as e:
    print("RESULT tws setup failed", e)
only=sys.argv[1:] 
for n,b in tests.items():
    if only and n not in only: continue
    run(n,b)
if not only or "sinks" in only:
    run("memory_sink", lambda df: df.select("value"), sink="memory")
    run("foreach_batch", lambda df: df.select("value"), sink="foreach_batch")
    run("console_sink", lambda df: df.select("value"), sink="console")
if not only or "rate" in only:
    ck=tempfile.mkdtemp()
    try:
        q=spark.readStream.format("rate").option("rowsPerSecond",5).load().writeStream.outputMode("update").foreach(W()).option("checkpointLocation",ck).trigger(realTime="5 seconds").start()
        time.sleep(12); ex=q.exception()
        print("RESULT rate_source", "FAILED_AT_RUNTIME "+str(ex).splitlines()[0][:300] if ex or not q.isActive else "RUNNING_OK")
        q.stop()
    except Exception as e: print("RESULT rate_source REJECTED_AT_START", str(e).splitlines()[0][:300])
spark.stop()
