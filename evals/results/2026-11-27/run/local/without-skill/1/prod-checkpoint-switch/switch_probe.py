import sys, time, tempfile, os
sys.path.insert(0,"/work/evalrun2/run/local/without-skill/1/prod-checkpoint-switch")
from solution import configure, counts
from pyspark.sql import SparkSession, DataFrame, functions as F
mode=sys.argv[1]
spark=SparkSession.builder.master("local[6]").config("spark.ui.enabled","false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
if mode=="configured": configure(spark)
elif mode=="hdfs_v2":
    spark.conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion","2"); spark.conf.set("spark.sql.shuffle.partitions","2")
else: spark.conf.set("spark.sql.shuffle.partitions","2")
jvm=spark._jvm
ck=tempfile.mkdtemp()
LOG=tempfile.mktemp()
def mk(n_rows):
    s=jvm.org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream.apply(2, jvm.org.apache.spark.sql.Encoders.STRING(), spark._jsparkSession.sqlContext())
    jl=jvm.java.util.ArrayList()
    for i in range(n_rows): jl.add(f"e{i},k{i%3}")
    s.addData(jvm.scala.jdk.javaapi.CollectionConverters.asScala(jl))
    df=DataFrame(s.toDF(), spark).select(F.split("value",",")[0].alias("event_id"), F.split("value",",")[1].alias("k"))
    return s, df
class W:
    def open(self,p,e): return True
    def process(self,r): open(LOG,"a").write(f"{r['k']}={r['count']}\n")
    def close(self,e): pass
# run 1: micro-batch
s,df=mk(9)
q=counts(df).writeStream.foreach(W()).outputMode("update").option("checkpointLocation",ck).trigger(processingTime="1 second").start()
q.processAllAvailable(); q.stop()
print("run1 output:", open(LOG).read().split())
open(LOG,"w").close()
# run 2: real-time on same checkpoint; same first 9 rows + 6 new
s,df=mk(15)
try:
    q=counts(df).writeStream.foreach(W()).outputMode("update").option("checkpointLocation",ck).trigger(realTime="5 seconds").start()
    t=time.time()
    while time.time()-t<15 and q.isActive and not open(LOG).read(): time.sleep(0.5)
    time.sleep(1)
    print("run2 exception:", str(q.exception())[:300] if q.exception() else None)
    print("run2 output:", open(LOG).read().split())
    q.stop()
except Exception as e:
    print("run2 start error:", str(e)[:400])
spark.stop()
