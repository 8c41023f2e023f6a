/*
 * A ForeachWriter that only counts rows and how late they arrive: the sink of
 * benchmarks/rate_source.py, which measures how fast a source emits in real-time mode without a
 * database in the way. Local mode only (the counters live in the JVM's statics; on a cluster each
 * executor would count its own). Column 1 of the row must be sent_ms (epoch ms, BIGINT).
 */
package pack_lab.jvm;

import java.util.concurrent.atomic.AtomicLong;

import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

public final class CountingWriter extends ForeachWriter<Row> {
  private static final long serialVersionUID = 1L;
  private static final AtomicLong ROWS = new AtomicLong();
  private static final AtomicLong LAG_SUM_MS = new AtomicLong();
  private static final AtomicLong LAG_MAX_MS = new AtomicLong();

  /** Rows seen since the last reset. */
  public static long rows() {
    return ROWS.get();
  }

  /** Sum over those rows of (arrival time - sent_ms), ms. */
  public static long lagSumMs() {
    return LAG_SUM_MS.get();
  }

  public static long lagMaxMs() {
    return LAG_MAX_MS.get();
  }

  public static void reset() {
    ROWS.set(0);
    LAG_SUM_MS.set(0);
    LAG_MAX_MS.set(0);
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    return true;
  }

  @Override
  public void process(Row row) {
    long lag = System.currentTimeMillis() - row.getLong(1);
    LAG_SUM_MS.addAndGet(lag);
    LAG_MAX_MS.accumulateAndGet(lag, Math::max);
    ROWS.incrementAndGet();
  }

  @Override
  public void close(Throwable error) {
  }
}
