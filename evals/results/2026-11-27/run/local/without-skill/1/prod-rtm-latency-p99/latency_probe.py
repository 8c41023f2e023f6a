import sys, time, tempfile, threading
sys.path.insert(0, sys.argv[2])
from solution import start
import psycopg
from pyspark.sql import SparkSession, DataFrame, functions as F
DSN=sys.argv[1]; DUR=float(sys.argv[3]) if len(sys.argv)>3 else 40
with psycopg.connect(DSN, autocommit=True) as c:
    c.execute("drop table if exists events")
    c.execute("create table events (id bigint primary key, sent_ms bigint, payload text, committed_ms bigint default (extract(epoch from clock_timestamp())*1000)::bigint)")
spark=SparkSession.builder.master("local[4]").config("spark.ui.enabled","false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
jvm=spark._jvm
from pyspark.sql.types import StructType
schema_ddl="id long, sent_ms long, payload string"
enc=jvm.org.apache.spark.sql.Encoders.STRING()
s=jvm.org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream.apply(2, enc, spark._jsparkSession.sqlContext())
raw=DataFrame(s.toDF(), spark)
df=raw.select(F.split("value",",").alias("a")).select(F.col("a")[0].cast("long").alias("id"),F.col("a")[1].cast("long").alias("sent_ms"),F.col("a")[2].alias("payload"))
t_s=time.time(); q=start(df, DSN, "events", tempfile.mkdtemp()); print("start() took", round(time.time()-t_s,2))
time.sleep(0.2)
i=0; t0=time.time()
while time.time()-t0<DUR:
    jl=jvm.java.util.ArrayList()
    now=int(time.time()*1000)
    jl.add(f"{i},{now},price-{i}"); i+=1
    s.addData(jvm.scala.jdk.javaapi.CollectionConverters.asScala(jl))
    time.sleep(max(0,(t0+i*0.01)-time.time()))
time.sleep(3)
print("exception:", q.exception())
q.stop()
with psycopg.connect(DSN) as c:
    lat=[r[0] for r in c.execute("select committed_ms-sent_ms from events order by 1").fetchall()]
n=len(lat); print("sent",i,"written",n)
if n:
    print("p50",lat[n//2],"p90",lat[int(n*.9)],"p99",lat[int(n*.99)],"max",lat[-1])
spark.stop()
