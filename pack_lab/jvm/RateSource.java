/*
 * The lab's deterministic rate source, usable in real-time mode and in micro-batch. Built by
 * scripts/build_jvm_sink.sh into pack_lab/jvm/build/; driven from Python by pack_lab/rate_source.py.
 *
 *   spark.readStream.format("pack_lab.jvm.RateSource")
 *        .option("rowsPerSecond", 1000).option("totalRows", 1800000).option("startMs", t0)
 *        .load()   // id BIGINT, sent_ms BIGINT, payload STRING
 *
 * Row i has id = i and sent_ms = startMs + floor(i * 1000 / rowsPerSecond), and is emitted no
 * earlier than sent_ms by the wall clock; there are totalRows rows. Every row is computed from
 * its id, so the source holds no rows, costs the same at row 10 and at row 10 million, and a
 * replay from a checkpoint yields the same rows (sinks' exactly-once checks stay meaningful).
 *
 * Why not Spark's LowLatencyMemoryStream (the only real-time source in the pyspark wheel): it keeps
 * every row it was given on the driver and serves each one to the executors by an RPC call, so it
 * slows as it holds more; over a 30-minute soak at 1,000 rows/s it fell behind.
 *
 * With numPartitions = p > 1, partition k emits ids k, k + p, k + 2p, ... An offset is, for each
 * partition, the next id it will emit (JSON array). Real-time mode: a task reads from its start
 * offset with no end, waiting for each row's time; its reader reports the next id (getOffset) and
 * the engine merges them (mergeOffsets). Micro-batch: latestOffset() is the rows due by now,
 * capped at totalRows, and a batch emits [start, end) without waiting.
 */
package pack_lab.jvm;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeMode;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

public final class RateSource implements TableProvider {

  static final StructType SCHEMA = new StructType()
      .add("id", DataTypes.LongType, false)
      .add("sent_ms", DataTypes.LongType, false)
      .add("payload", DataTypes.StringType, false);

  /** The validated options; bad input fails here, at load(), with one line naming the option. */
  static final class Settings implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    final long rowsPerSecond;
    final long totalRows;
    final long startMs;
    final String payload;
    final int numPartitions;

    Settings(Map<String, String> options) {
      CaseInsensitiveStringMap o = new CaseInsensitiveStringMap(options);
      Set<String> known = new HashSet<>(Arrays.asList(
          "rowspersecond", "totalrows", "startms", "payload", "numpartitions", "path"));
      for (String key : o.keySet()) {
        if (!known.contains(key.toLowerCase(java.util.Locale.ROOT))) {
          throw new IllegalArgumentException("RateSource: unknown option '" + key
              + "'; known: rowsPerSecond, totalRows, startMs, payload, numPartitions");
        }
      }
      rowsPerSecond = number(o, "rowsPerSecond", null, 1);
      totalRows = number(o, "totalRows", null, 0);
      startMs = number(o, "startMs", null, 0);
      numPartitions = (int) Math.min(number(o, "numPartitions", 1L, 1), 1024);
      payload = o.containsKey("payload") ? o.get("payload") : "x".repeat(64);
      if (rowsPerSecond > 1_000_000) {
        throw new IllegalArgumentException("RateSource: rowsPerSecond must be at most 1000000, got "
            + rowsPerSecond);
      }
    }

    private static long number(CaseInsensitiveStringMap o, String name, Long fallback, long min) {
      String raw = o.get(name);
      if (raw == null) {
        if (fallback == null) {
          throw new IllegalArgumentException("RateSource: option " + name + " is required");
        }
        return fallback;
      }
      long value;
      try {
        value = Long.parseLong(raw.trim());
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("RateSource: option " + name + " must be a whole number, got '"
            + raw + "'");
      }
      if (value < min) {
        throw new IllegalArgumentException("RateSource: option " + name + " must be at least " + min
            + ", got " + value);
      }
      return value;
    }

    /** When row {@code id} is due: startMs + floor(id * 1000 / rowsPerSecond). */
    long sentMs(long id) {
      return startMs + Math.multiplyExact(id, 1000L) / rowsPerSecond;
    }

    /** How many rows are due at wall-clock time {@code nowMs}, capped at totalRows. */
    long dueBy(long nowMs) {
      if (nowMs < startMs) {
        return 0;
      }
      long n = Math.min(totalRows, (nowMs - startMs) * rowsPerSecond / 1000 + 1);
      while (n > 0 && sentMs(n - 1) > nowMs) {
        n--;
      }
      while (n < totalRows && sentMs(n) <= nowMs) {
        n++;
      }
      return n;
    }

    /** The first id of partition k at or after {@code id}. */
    long firstAtOrAfter(int k, long id) {
      long p = numPartitions;
      if (id <= k) {
        return k;
      }
      return k + ((id - k + p - 1) / p) * p;
    }
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    new Settings(options);
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    if (schema != null && !schema.equals(SCHEMA)) {
      throw new IllegalArgumentException("RateSource: the schema is fixed (" + SCHEMA.simpleString()
          + "); do not pass .schema(" + schema.simpleString() + ")");
    }
    return new RateTable(new Settings(properties));
  }

  static final class RateTable implements Table, SupportsRead {
    private final Settings settings;

    RateTable(Settings settings) {
      this.settings = settings;
    }

    @Override
    public String name() {
      return "RateSource(" + settings.rowsPerSecond + " rows/s, " + settings.totalRows + " rows)";
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return new HashSet<>(Arrays.asList(TableCapability.MICRO_BATCH_READ));
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> new Scan() {
        @Override
        public StructType readSchema() {
          return SCHEMA;
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
          return new RateStream(settings);
        }
      };
    }
  }

  /** Per partition, the next id it emits. */
  static final class RateOffset extends Offset {
    final long[] next;

    RateOffset(long[] next) {
      this.next = next;
    }

    @Override
    public String json() {
      StringBuilder s = new StringBuilder("[");
      for (int i = 0; i < next.length; i++) {
        s.append(i == 0 ? "" : ",").append(next[i]);
      }
      return s.append(']').toString();
    }
  }

  static final class RatePartitionOffset implements PartitionOffset {
    private static final long serialVersionUID = 1L;
    final int partition;
    final long next;

    RatePartitionOffset(int partition, long next) {
      this.partition = partition;
      this.next = next;
    }
  }

  static final class RateStream implements MicroBatchStream, SupportsRealTimeMode {
    private final Settings settings;

    RateStream(Settings settings) {
      this.settings = settings;
    }

    @Override
    public Offset initialOffset() {
      long[] next = new long[settings.numPartitions];
      for (int k = 0; k < next.length; k++) {
        next[k] = k;
      }
      return new RateOffset(next);
    }

    @Override
    public Offset deserializeOffset(String json) {
      String body = json.trim();
      if (!body.startsWith("[") || !body.endsWith("]")) {
        throw new IllegalArgumentException("RateSource: not an offset of this source: " + json);
      }
      String[] parts = body.substring(1, body.length() - 1).split(",");
      if (parts.length != settings.numPartitions) {
        throw new IllegalArgumentException("RateSource: the checkpoint has " + parts.length
            + " partition(s) but numPartitions is " + settings.numPartitions
            + "; restart with the same numPartitions or a new checkpoint");
      }
      long[] next = new long[parts.length];
      for (int i = 0; i < parts.length; i++) {
        next[i] = Long.parseLong(parts[i].trim());
      }
      return new RateOffset(next);
    }

    @Override
    public Offset latestOffset() {
      long due = settings.dueBy(System.currentTimeMillis());
      long[] next = new long[settings.numPartitions];
      for (int k = 0; k < next.length; k++) {
        next[k] = settings.firstAtOrAfter(k, due);
      }
      return new RateOffset(next);
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
      long[] from = ((RateOffset) start).next;
      long[] to = ((RateOffset) end).next;
      InputPartition[] parts = new InputPartition[from.length];
      for (int k = 0; k < from.length; k++) {
        parts[k] = new RatePartition(settings, k, from[k], to[k], false);
      }
      return parts;
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start) {
      long[] from = ((RateOffset) start).next;
      InputPartition[] parts = new InputPartition[from.length];
      for (int k = 0; k < from.length; k++) {
        parts[k] = new RatePartition(settings, k, from[k], Long.MAX_VALUE, true);
      }
      return parts;
    }

    @Override
    public Offset mergeOffsets(PartitionOffset[] offsets) {
      long[] next = new long[settings.numPartitions];
      Arrays.fill(next, -1);
      for (PartitionOffset o : offsets) {
        RatePartitionOffset r = (RatePartitionOffset) o;
        next[r.partition] = r.next;
      }
      for (int k = 0; k < next.length; k++) {
        if (next[k] < 0) {
          throw new IllegalStateException("RateSource: no offset reported for partition " + k);
        }
      }
      return new RateOffset(next);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new RateReaderFactory();
    }

    @Override
    public void commit(Offset end) {
    }

    @Override
    public void stop() {
    }

    @Override
    public String toString() {
      return "RateSource[" + settings.rowsPerSecond + " rows/s]";
    }
  }

  static final class RatePartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final Settings settings;
    final int partition;
    final long start;
    final long end;
    final boolean realTime;

    RatePartition(Settings settings, int partition, long start, long end, boolean realTime) {
      this.settings = settings;
      this.partition = partition;
      this.start = start;
      this.end = end;
      this.realTime = realTime;
    }
  }

  static final class RateReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return new RateReader((RatePartition) partition);
    }
  }

  /**
   * Reads one partition. Real-time mode: no end, each row waits for its sent_ms. Micro-batch: the
   * rows of [start, end) are already due (latestOffset saw them), so it does not wait.
   */
  static final class RateReader implements SupportsRealTimeRead<InternalRow> {
    private final RatePartition p;
    private final Settings s;
    private final long limit;
    private final UTF8String payload;
    private long next;
    private InternalRow current;

    RateReader(RatePartition p) {
      this.p = p;
      this.s = p.settings;
      this.limit = Math.min(p.end, s.totalRows);
      this.payload = UTF8String.fromString(s.payload);
      this.next = p.start;
    }

    private void emit() {
      current = new GenericInternalRow(new Object[] {next, s.sentMs(next), payload});
      next += s.numPartitions;
    }

    @Override
    public boolean next() {
      if (next >= limit || (p.realTime && s.sentMs(next) > System.currentTimeMillis())) {
        return false;
      }
      emit();
      return true;
    }

    @Override
    public RecordStatus nextWithTimeout(Long timeoutMs) throws IOException {
      long deadline = System.currentTimeMillis() + Math.max(0L, timeoutMs);
      try {
        while (true) {
          long now = System.currentTimeMillis();
          long due = next < limit ? s.sentMs(next) : Long.MAX_VALUE;
          if (due <= now) {
            emit();
            return RecordStatus.newStatusWithoutArrivalTime(true);
          }
          if (now >= deadline) {
            return RecordStatus.newStatusWithoutArrivalTime(false);
          }
          Thread.sleep(Math.max(1L, Math.min(due, deadline) - now));
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new InterruptedIOException("RateSource: interrupted while waiting for the next row");
      }
    }

    @Override
    public InternalRow get() {
      return current;
    }

    @Override
    public PartitionOffset getOffset() {
      return new RatePartitionOffset(p.partition, next);
    }

    @Override
    public void close() {
    }
  }
}
