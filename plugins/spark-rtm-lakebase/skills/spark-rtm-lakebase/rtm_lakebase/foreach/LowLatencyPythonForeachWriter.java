/*
 * A Python foreach writer at milliseconds: PySpark's own PythonForeachWriter with one change,
 * how rows are batched on their way to the Python worker. Built by scripts/build_jvm_sink.sh;
 * driven from Python by rtm_lakebase/foreach (start_foreach_query).
 *
 * Stock PySpark (4.1-4.3) feeds a Python foreach writer through SerDeUtil.AutoBatchedPickler,
 * whose batch doubles (1, 2, 4, ... rows) until a pickled batch passes 1 MB and which blocks
 * until the batch is full, and the runner then holds the bytes until spark.buffer.size (64 KB)
 * is filled. Under real-time mode a row waits for later rows: seconds at 50-1,000 rows/s.
 *
 * This writer keeps everything else of the stock path: the same PythonFunction and schema
 * (built by PySpark's DataStreamWriter code), the same UnsafeRowBuffer between the task thread
 * and the writer thread, the same row conversion and pickling (EvaluatePython, a Pickler as in
 * AutoBatchedPickler), the same PythonRunner and worker protocol, the same WriterThread and
 * error handling. What changes:
 *   1. Batching: a batch is at least one row plus whatever rows are already buffered, capped
 *      at maxBatchRows rows and maxBatchBytes bytes (UnsafeRow sizes). It never waits for
 *      rows that have not arrived, so a slow stream sends rows one by one and a fast one
 *      batches by itself (rows pile up while the worker is busy).
 *   2. Flushing: the runner's "timely flush" hook (a BasePythonRunner setting, off for
 *      foreach) is on with a zero timeout, so each batch goes to the worker's socket as soon
 *      as it is pickled instead of waiting for 64 KB.
 *   3. If the writer thread has already ended with an error (e.g. the worker's socket broke),
 *      the next process() throws it instead of buffering more rows for nobody until close().
 *   4. Failing fast. Stock PySpark reads the worker's output (where an exception arrives) on the
 *      same thread that feeds it rows, and that thread blocks while it waits for the next row,
 *      so on a quiet stream a worker's exception sits unread until the batch ends. Here, while
 *      it waits for rows, the feeding thread also watches the worker's socket (its own
 *      selector on the worker's channel, taken in newWriter): when the worker writes before
 *      its input ended, which for a foreach writer is only an exception or a crash, it ends
 *      the input so the runner reads the error at once. When the writer thread then ends with
 *      that error before close(), it interrupts the task thread (captured in open()), so the
 *      task and the query fail within seconds, not at the end of the long real-time batch;
 *      the task's failure names the worker's error: where the interrupt lands in this writer
 *      (process()), process() throws that error; where it lands in the source, which waits for
 *      rows (e.g. its Thread.sleep throws InterruptedException), Spark fails the task with the
 *      source's exception and keeps it first whatever a writer throws later (close()'s error
 *      only becomes a suppressed one), so a task failure listener makes the worker's error the
 *      root cause of that exception: the message reads "InterruptedException ... Caused by:"
 *      the worker's error, on every supported release. The pack's
 *      PostgresForeachWriter makes its worker raise a flush that failed for good at once
 *      (rtm_lakebase/sink/interrupt.py); any writer whose worker raises gets the same.
 * It extends PythonForeachWriter so Spark hands it UnsafeRows exactly as it does the stock
 * writer (ForeachWriterTable checks for that class); it overrides open/process/close and never
 * uses the parent's internals.
 *
 * The few calls whose signatures differ between Spark 4.1, 4.2 and 4.3 (EvaluatePython.toJava,
 * the traceback-with-locals setting) are resolved by reflection once per task.
 */
package rtm_lakebase.foreach;

import java.io.File;
import java.io.IOException;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import net.razorvine.pickle.Pickler;
import org.apache.spark.JobArtifactSet;
import org.apache.spark.JobArtifactState;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.api.python.ChainedPythonFunctions;
import org.apache.spark.api.python.PythonFunction;
import org.apache.spark.api.python.BasePythonRunner;
import org.apache.spark.api.python.PythonRunner;
import org.apache.spark.api.python.PythonWorker;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.python.EvaluatePython;
import org.apache.spark.sql.execution.python.streaming.PythonForeachWriter;
import org.apache.spark.sql.execution.python.streaming.WriterThread;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.NextIterator;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.util.TaskFailureListener;
import org.apache.spark.util.Utils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

public class LowLatencyPythonForeachWriter extends PythonForeachWriter {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(LowLatencyPythonForeachWriter.class);

  /** Defaults for the batch caps (the stock pickler aims at about 1 MB per batch). */
  public static final int DEFAULT_MAX_BATCH_ROWS = 4096;
  public static final long DEFAULT_MAX_BATCH_BYTES = 1L << 20;

  private final PythonFunction func;
  private final StructType schema;
  private final int maxBatchRows;
  private final long maxBatchBytes;
  private final Option<String> jobArtifactUUID;

  // Per task, set in open().
  private transient PythonForeachWriter.UnsafeRowBuffer buffer;
  private transient Feed feed;
  private transient WriterThread writerThread;
  private transient Object lock;
  private transient Thread taskThread;        // interrupted when the writer thread fails before close()
  private transient boolean closing;          // guarded by lock
  private transient boolean interruptedTask;  // guarded by lock
  private transient boolean causeAttached;    // the worker's error is the cause of the task's failure

  public LowLatencyPythonForeachWriter(PythonFunction func, StructType schema) {
    this(func, schema, DEFAULT_MAX_BATCH_ROWS, DEFAULT_MAX_BATCH_BYTES);
  }

  public LowLatencyPythonForeachWriter(PythonFunction func, StructType schema, int maxBatchRows,
                                       long maxBatchBytes) {
    super(func, schema);
    if (maxBatchRows < 1) {
      throw new IllegalArgumentException("maxBatchRows must be at least 1, got " + maxBatchRows);
    }
    if (maxBatchBytes < 1) {
      throw new IllegalArgumentException("maxBatchBytes must be at least 1, got " + maxBatchBytes);
    }
    this.func = func;
    this.schema = schema;
    this.maxBatchRows = maxBatchRows;
    this.maxBatchBytes = maxBatchBytes;
    // As PythonForeachWriter: the job's artifact session, read on the driver.
    Option<JobArtifactState> state = JobArtifactSet.getCurrentJobArtifactState();
    this.jobArtifactUUID = state.isDefined() ? Option.apply(state.get().uuid()) : Option.empty();
  }

  public int maxBatchRows() {
    return maxBatchRows;
  }

  public long maxBatchBytes() {
    return maxBatchBytes;
  }

  @Override
  public boolean open(long partitionId, long version) {
    TaskContext context = TaskContext.get();
    PythonForeachWriter.UnsafeRowBuffer rows = new PythonForeachWriter.UnsafeRowBuffer(
        context.taskMemoryManager(), new File(Utils.getLocalDir(SparkEnv.get().conf())),
        schema.fields().length);
    buffer = rows;
    Feed rowsFeed = new Feed();
    feed = rowsFeed;
    Iterator<byte[]> input = new AvailableRowsPickler(rows.iterator(), rowsFeed, schema, maxBatchRows,
        maxBatchBytes);
    Iterator<byte[]> output = newRunner(rowsFeed).compute(input, context.partitionId(), context);
    lock = new Object();
    taskThread = Thread.currentThread();
    closing = false;
    interruptedTask = false;
    causeAttached = false;
    context.addTaskFailureListener((TaskFailureListener) (ctx, error) -> attachCause(error));
    writerThread = new FailFastWriterThread(output, this::writerFailed);
    writerThread.start();
    context.addTaskCompletionListener((TaskCompletionListener) ctx -> {
      rowsFeed.closeWatch();
      rows.close();
    });
    return true;
  }

  @Override
  public void process(UnsafeRow value) {
    Throwable failed = writerThread._exception();
    if (failed != null) {
      throw LowLatencyPythonForeachWriter.<RuntimeException>sneakyThrow(failed);
    }
    try {
      buffer.add(value);
      feed.added();
    } catch (RuntimeException | Error e) {
      throw LowLatencyPythonForeachWriter.<RuntimeException>sneakyThrow(ownInterrupt(e));
    }
  }

  /**
   * {@code e} broke this task thread; if our interrupt (point 4) caused it, the worker's error, with
   * {@code e} suppressed, so the task fails naming the cause rather than the interrupt.
   */
  private Throwable ownInterrupt(Throwable e) {
    Throwable failed = writerThread._exception();
    boolean ours;
    synchronized (lock) {
      ours = interruptedTask;
    }
    if (!ours || failed == null || failed == e) {
      return e;
    }
    failed.addSuppressed(e);
    return failed;
  }

  /**
   * Task failure listener: the task fails with whatever our interrupt broke, usually in the source
   * (its wait for rows), and Spark keeps that exception first. Make the worker's error its root
   * cause, so the task's failure (and the query's message) names it: "Caused by: ...".
   */
  private void attachCause(Throwable error) {
    Throwable failed = writerThread == null ? null : writerThread._exception();
    synchronized (lock) {
      if (!interruptedTask || failed == null || error == null) {
        return;
      }
    }
    Throwable root = error;
    boolean interrupted = false;  // only an interrupt's exception gets the worker's error as cause
    for (int depth = 0; depth < 50; depth++) {
      if (root == failed) {
        return;  // the failure already is (or is caused by) the worker's error
      }
      interrupted |= root instanceof InterruptedException || root instanceof java.io.InterruptedIOException
          || root instanceof java.nio.channels.ClosedByInterruptException;
      Throwable next = root.getCause();
      if (next == null || next == root) {
        break;
      }
      root = next;
    }
    if (!interrupted) {
      return;  // something else failed the task: close() adds the worker's error as suppressed
    }
    try {
      root.initCause(failed);
      causeAttached = true;
    } catch (IllegalStateException | IllegalArgumentException e) {
      // its cause is fixed: close() throws the worker's error, which Spark adds as suppressed
    }
  }

  /** The writer thread ended with an error before close(): fail the task now (point 4 above). */
  private void writerFailed(Throwable failed) {
    synchronized (lock) {
      if (closing || taskThread == null) {
        return;  // close() is running: it throws the error itself
      }
      String message = String.valueOf(failed.getMessage());
      LOG.error("fast Python foreach: the Python writer failed; failing the task now: {}",
          message.length() > 2000 ? message.substring(0, 2000) + "..." : message);
      interruptedTask = true;
      taskThread.interrupt();
    }
  }

  @Override
  public void close(Throwable errorOrNull) {
    synchronized (lock) {
      closing = true;
      if (interruptedTask && Thread.currentThread() == taskThread) {
        Thread.interrupted();  // our interrupt did its job; do not let it break the join below
      }
      taskThread = null;
    }
    buffer.allRowsAdded();
    feed.ended();
    try {
      writerThread.join();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while waiting for the Python foreach writer", e);
    }
    Throwable failed = writerThread._exception();
    if (failed != null) {
      if (causeAttached && errorOrNull != null) {
        return;  // the task's failure already has it as its cause; thrown again it shows twice
      }
      throw LowLatencyPythonForeachWriter.<RuntimeException>sneakyThrow(failed);
    }
    if (feed.cut()) {  // never drop rows silently, even if a worker behaves in a way not foreseen
      throw new IllegalStateException("fast Python foreach: the Python worker answered before its input "
          + "ended, without an error, so rows after that point were not delivered; this Spark's worker "
          + "protocol is not the one this writer was built for: use writeStream.foreach(writer)");
    }
  }

  /** PySpark's runner for a foreach writer, with the per-batch flush switched on. */
  private PythonRunner newRunner(Feed rowsFeed) {
    SQLConf conf = SQLConf.get();
    Option<String> exec = conf.pysparkWorkerPythonExecutable();
    final String pythonExec = exec.isDefined() ? exec.get() : func.pythonExec();
    final boolean faultHandler = conf.pythonUDFWorkerFaulthandlerEnabled();
    final long idleTimeout = conf.pythonUDFWorkerIdleTimeoutSeconds();
    final boolean killOnIdle = conf.pythonUDFWorkerKillOnIdleTimeout();
    final long dumpInterval = conf.pythonUDFWorkerTracebackDumpIntervalSeconds();
    final boolean killOnFlushFailure = conf.pythonUDFDaemonKillWorkerOnFlushFailure();
    final boolean hideTraceback = conf.pysparkHideTraceback();
    final boolean simplifiedTraceback = conf.pysparkSimplifiedTraceback();
    final boolean withLocals = optionalBooleanConf(conf, "pysparkTracebackWithLocals");
    ChainedPythonFunctions chained = new ChainedPythonFunctions(
        CollectionConverters.asScala(List.of(func)).toList());
    return new PythonRunner(CollectionConverters.asScala(List.of(chained)).toList(), jobArtifactUUID) {
      @Override
      public String pythonExec() {
        return pythonExec;
      }

      @Override
      public boolean faultHandlerEnabled() {
        return faultHandler;
      }

      @Override
      public long idleTimeoutSeconds() {
        return idleTimeout;
      }

      @Override
      public boolean killOnIdleTimeout() {
        return killOnIdle;
      }

      @Override
      public long tracebackDumpIntervalSeconds() {
        return dumpInterval;
      }

      @Override
      public boolean killWorkerOnFlushFailure() {
        return killOnFlushFailure;
      }

      @Override
      public boolean hideTraceback() {
        return hideTraceback;
      }

      @Override
      public boolean simplifiedTraceback() {
        return simplifiedTraceback;
      }

      // Spark 4.3+; an unused extra method on older releases.
      @Override
      public boolean tracebackWithLocals() {
        return withLocals;
      }

      // The change: write each pickled batch to the worker as soon as it is made.
      @Override
      public boolean timelyFlushEnabled() {
        return true;
      }

      @Override
      public long timelyFlushTimeoutNanos() {
        return 0L;
      }

      // Point 4: the worker whose socket the rows feed watches while it waits.
      @Override
      public BasePythonRunner<byte[], byte[]>.Writer newWriter(SparkEnv env, PythonWorker worker,
          Iterator<byte[]> inputIterator, int partitionIndex, TaskContext context) {
        rowsFeed.watch(worker);
        return super.newWriter(env, worker, inputIterator, partitionIndex, context);
      }
    };
  }

  private static boolean optionalBooleanConf(SQLConf conf, String getter) {
    try {
      return (Boolean) SQLConf.class.getMethod(getter).invoke(conf);
    } catch (NoSuchMethodException e) {
      return false;
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("could not read SQLConf." + getter, e);
    }
  }

  @SuppressWarnings("unchecked")
  private static <T extends Throwable> T sneakyThrow(Throwable t) throws T {
    throw (T) t;
  }

  /** Spark's WriterThread, telling the writer when it ends with an error. */
  static final class FailFastWriterThread extends WriterThread {
    private final java.util.function.Consumer<Throwable> onFailure;

    FailFastWriterThread(Iterator<byte[]> output, java.util.function.Consumer<Throwable> onFailure) {
      super(output);
      this.onFailure = onFailure;
    }

    @Override
    public void run() {
      super.run();
      Throwable failed = _exception();
      if (failed != null) {
        onFailure.accept(failed);
      }
    }
  }

  /**
   * Between the task thread (process, close) and the feeding thread (the pickler): how many rows
   * were added, whether all were, and the Python worker, whose socket the feeding thread watches
   * while it waits for rows (point 4).
   */
  static final class Feed {
    private static final long WATCH_NANOS = 100_000_000L;  // how often a waiting feed looks at the worker
    private final AtomicLong added = new AtomicLong();
    private volatile boolean ended;
    private volatile boolean cut;  // the input was ended because the worker wrote first
    private volatile Thread waiter;
    private volatile PythonWorker worker;
    private Selector selector;  // the feeding thread's, on the worker's channel; null until it waits
    private boolean watchBroken;

    long count() {
      return added.get();
    }

    boolean cut() {
      return cut;
    }

    void added() {
      added.incrementAndGet();
      Thread t = waiter;
      if (t != null) {
        LockSupport.unpark(t);
      }
    }

    void ended() {
      ended = true;
      Thread t = waiter;
      if (t != null) {
        LockSupport.unpark(t);
      }
    }

    void watch(PythonWorker w) {
      worker = w;
    }

    /**
     * Waits until a row was added beyond {@code taken} or all rows were added (true), or the worker
     * wrote to its socket first (false: it failed; end the input so its error is read now).
     */
    boolean awaitRows(long taken) {
      if (added.get() > taken || ended) {
        return true;
      }
      waiter = Thread.currentThread();
      try {
        while (added.get() <= taken && !ended) {
          if (workerSpoke()) {
            cut = true;
            return false;
          }
          LockSupport.parkNanos(this, WATCH_NANOS);
        }
        return true;
      } finally {
        waiter = null;
      }
    }

    /** True when the worker wrote something (or closed its socket): for a foreach, an error. */
    private synchronized boolean workerSpoke() {
      PythonWorker w = worker;
      if (w == null || watchBroken) {
        return false;
      }
      try {
        if (selector == null) {
          selector = Selector.open();
          w.channel().register(selector, SelectionKey.OP_READ);
        }
        return selector.selectNow() > 0;
      } catch (IOException | RuntimeException e) {
        watchBroken = true;  // e.g. a blocking channel: no fast failure, the batch end reports it
        LOG.warn("fast Python foreach: cannot watch the Python worker ({}); a writer error shows "
            + "at the batch end", e.toString());
        closeWatch();
        return false;
      }
    }

    synchronized void closeWatch() {
      watchBroken = true;
      if (selector != null) {
        try {
          selector.close();
        } catch (IOException ignored) {
          // closing our own selector: nothing to do
        }
        selector = null;
      }
    }
  }

  /**
   * Pickles the rows that are available: blocks for the first row only, then takes rows
   * already in the buffer until a cap is reached. One element = one pickled batch (a list of
   * rows), exactly the format AutoBatchedPickler produces.
   */
  static final class AvailableRowsPickler extends AbstractIterator<byte[]> {
    private final NextIterator<UnsafeRow> rows;
    private final Feed feed;
    private final StructType schema;
    private final int maxRows;
    private final long maxBytes;
    private final RowConverter converter;
    private final Pickler pickler = new Pickler(true, false);
    private final ArrayList<Object> batch = new ArrayList<>();
    private long taken;

    AvailableRowsPickler(NextIterator<UnsafeRow> rows, Feed feed, StructType schema,
                         int maxRows, long maxBytes) {
      this.rows = rows;
      this.feed = feed;
      this.schema = schema;
      this.maxRows = maxRows;
      this.maxBytes = maxBytes;
      this.converter = new RowConverter();
    }

    @Override
    public boolean hasNext() {
      // Waits until a row is buffered or all rows were added; false at once if the worker failed.
      return feed.awaitRows(taken) && rows.hasNext();
    }

    @Override
    public byte[] next() {
      long bytes = 0;
      do {
        UnsafeRow row = rows.next();  // the queue reuses this object: convert before the next
        taken++;
        bytes += row.getSizeInBytes();
        batch.add(converter.toJava(row, schema));
      } while (batch.size() < maxRows && bytes < maxBytes && feed.count() - taken > 0);
      try {
        return pickler.dumps(batch.toArray());
      } catch (java.io.IOException e) {
        throw new java.io.UncheckedIOException(e);
      } finally {
        batch.clear();
      }
    }
  }

  /** EvaluatePython.toJava(row, schema, binaryAsBytes[, None]): 3 arguments in 4.1/4.2, 4 in 4.3. */
  static final class RowConverter {
    private final Method toJava;
    private final Object[] extra;

    RowConverter() {
      EvaluatePython.registerPicklers();
      Method found = null;
      for (Method m : EvaluatePython.class.getMethods()) {
        if (m.getName().equals("toJava") && java.lang.reflect.Modifier.isStatic(m.getModifiers())
            && (found == null || m.getParameterCount() > found.getParameterCount())) {
          found = m;
        }
      }
      if (found == null || found.getParameterCount() < 3 || found.getParameterCount() > 4) {
        throw new IllegalStateException("this Spark's EvaluatePython.toJava is not one this writer knows");
      }
      toJava = found;
      boolean binaryAsBytes = SQLConf.get().pysparkBinaryAsBytes();
      extra = found.getParameterCount() == 3 ? new Object[] {binaryAsBytes}
          : new Object[] {binaryAsBytes, Option.empty()};
    }

    Object toJava(UnsafeRow row, DataType schema) {
      Object[] args = new Object[2 + extra.length];
      args[0] = row;
      args[1] = schema;
      System.arraycopy(extra, 0, args, 2, extra.length);
      try {
        return toJava.invoke(null, args);
      } catch (java.lang.reflect.InvocationTargetException e) {
        throw LowLatencyPythonForeachWriter.<RuntimeException>sneakyThrow(e.getCause());
      } catch (IllegalAccessException e) {
        throw new IllegalStateException(e);
      }
    }
  }
}
