/*
 * A low-latency Postgres/Lakebase sink for Spark Structured Streaming (real-time mode or
 * micro-batch): a ForeachWriter<Row> that stays in the JVM, so rows never wait for a Python
 * worker. Built by scripts/build_jvm_sink.sh; driven from Python by rtm_lakebase/jvm/sink.py.
 * This class only wires the parts, each the twin of a module of the Python sink (rtm_lakebase/sink/):
 *
 *   SinkSettings  the options (SinkSettings' names; older names still read)   settings.py
 *   Target        connection, table, statement, one batch as one transaction    target.py
 *   Statements    the SQL text                                                  statements.py
 *   RowBuffer     rows deduplicated by key, handed over sorted                  buffer.py
 *   Flusher       the one thread that writes (size, dwell time, back-pressure)  flusher.py
 *   Diagnosis     the row and column a failed flush stops at                    diagnosis.py
 *   Outcomes      retry / reconnect / bad row / permanent, from outcomes.json   errors.py
 *   Errors        the exceptions                                                errors.py
 *
 * - One JDBC connection per task (from the executor's pool, PgConnector), opened in open() with
 *   bounded, jittered retries; open() throws on failure (returning false would make Spark drop the
 *   partition's rows silently). A permanent login failure throws at once.
 * - Modes: "upsert" (INSERT ... ON CONFLICT (key) DO UPDATE, skipping no-op updates, or with a
 *   version column only letting a strictly newer version replace a row), "insert_ignore"
 *   (ON CONFLICT DO NOTHING) and "append" (COPY ... FROM STDIN when every column's Spark type is
 *   the column's own kind, see PgCopy; else plain INSERT; append_copy=false forces INSERT).
 * - A flush that fails for good interrupts the task thread, so the task fails at once instead of at
 *   the end of the long batch; the error is thrown by the next process() or, when the interrupt broke
 *   the source's wait for rows, becomes the cause of the source's InterruptedException (attachCause).
 * - When the task fails for another reason, close() cancels the flush in flight at once.
 * - Identifiers are always double-quoted; the password never appears in toString, logs or messages.
 */
package rtm_lakebase.jvm;

import java.util.Map;
import java.util.Set;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;
import org.apache.spark.util.TaskFailureListener;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import rtm_lakebase.jvm.Errors.PostgresSinkException;

public class PostgresForeachWriter extends ForeachWriter<Row> {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(PostgresForeachWriter.class);

    /** Every option name the writer reads (SinkSettings' names and the older ones). */
    public static final Set<String> OPTIONS = SinkSettings.OPTIONS;

    private final SinkSettings settings;  // travels to the executors

    // -- per task, built in open() --
    private transient SinkMetrics metrics;
    private transient Target target;
    private transient Flusher flusher;
    private transient Thread taskThread;        // interrupted when a flush fails for good; null from close()
    private transient boolean interruptedTask;  // guarded by `this`
    private transient boolean causeAttached;    // the flush's error is the cause of the task's failure
    private transient long partitionId;
    private transient long epochId;

    public PostgresForeachWriter(Map<String, String> options) {
        this.settings = new SinkSettings(options);
        Outcomes.rules();  // a jar without the outcome table fails here, on the driver
    }

    @Override
    public String toString() {
        return settings.toString();
    }

    /** The older option names this writer was given (each logs one deprecation line per JVM). */
    public java.util.List<String> deprecatedOptions() {
        return settings.deprecatedUsed();
    }

    /** Connect (with retries) and read the table's columns. Throws on failure. */
    @Override
    public boolean open(long partitionId, long epochId) {
        if (target != null) {
            target.close(false);
        }
        this.partitionId = partitionId;
        this.epochId = epochId;
        settings.warnDeprecated();
        metrics = new SinkMetrics();
        flusher = null;
        synchronized (this) {
            taskThread = Thread.currentThread();
            interruptedTask = false;
            causeAttached = false;
        }
        TaskContext context = TaskContext.get();
        if (context != null) {
            context.addTaskFailureListener((TaskFailureListener) (ctx, failure) -> attachCause(failure));
        }
        target = new Target(settings, metrics);
        target.open();  // closes its connection itself when it throws (Spark calls no close() then)
        return true;
    }

    /** Buffer one row (deduplicated by key); the flusher writes it. */
    @Override
    public void process(Row row) {
        if (flusher == null) {
            target.prepare(row.schema());  // on the first row: the layout and the statement
            flusher = new Flusher(target.newBuffer(), target::write, settings.maxBatchRows, settings.maxDwellMs,
                metrics, settings.target(), "pg-jvm-sink-flusher-p" + partitionId, this::interruptTask);
        }
        Object[] values = target.values(row);
        metrics.rowsReceived++;
        flusher.add(values);
    }

    /** The flusher's error handler: fail the task now, not at the end of the long batch. */
    private synchronized void interruptTask(RuntimeException failure) {
        Thread task = taskThread;
        if (task != null && task != Thread.currentThread()) {
            interruptedTask = true;
            task.interrupt();
        }
    }

    /** On success write what is left and wait for it; on error cancel the flush in flight and drop the rest. */
    @Override
    public void close(Throwable errorOrNull) {
        if (target == null) {
            return;  // open() never ran
        }
        RuntimeException pending = null;
        boolean wasInterrupted;
        synchronized (this) {
            wasInterrupted = interruptedTask;
            interruptedTask = false;
            taskThread = null;  // from here on a failed flush is thrown by close(), not by an interrupt
        }
        try {
            if (wasInterrupted) {
                pending = reportInterrupt(errorOrNull);
            }
            if (flusher != null) {
                if (errorOrNull == null) {
                    flusher.finish();
                } else {
                    flusher.abort(errorOrNull, target::cancel);
                }
            }
        } catch (RuntimeException e) {
            pending = e;
        } finally {
            target.close(errorOrNull == null && pending == null);  // a healthy connection serves the next task
            LOG.info("postgres JVM sink closed (partition={} epoch={} error={}): {}", partitionId, epochId,
                errorOrNull == null ? null : errorOrNull.getClass().getSimpleName(), metrics);
        }
        if (pending != null) {
            throw pending;
        }
    }

    /**
     * The flusher interrupted the task thread to fail the task at once; the engine then fails it with
     * whatever the interrupt broke (a source's sleep: InterruptedException) and calls close(error).
     * attachCause (a task failure listener) has made the flush's error that exception's cause, so the
     * query's message names the row and column; where it could not, throwing the flush's error here
     * attaches it as a suppressed exception. Clears the flag we set.
     */
    private RuntimeException reportInterrupt(Throwable errorOrNull) {
        Thread.interrupted();  // close() runs on the task thread
        RuntimeException error = flusher == null ? null : flusher.error();
        synchronized (this) {
            if (causeAttached) {
                return null;  // the task's failure already has the flush's error as its cause
            }
        }
        return errorOrNull != null && error != null && errorOrNull != error ? error : null;
    }

    /**
     * Task failure listener (runs before close()): the task fails with whatever our interrupt broke,
     * usually a source waiting for rows (InterruptedException), and Spark keeps that exception first
     * whatever close() throws later (it only becomes a suppressed one). Making the flush's error the
     * root cause of that exception lets the task's failure and the query's message name it
     * ("Caused by: ..."). Only an interrupt's exception is given a cause.
     */
    private void attachCause(Throwable failure) {
        RuntimeException failed;
        synchronized (this) {
            failed = flusher == null ? null : flusher.error();
            if (!interruptedTask || failed == null || failure == null) {
                return;
            }
        }
        Throwable root = failure;
        boolean interrupted = false;
        for (int depth = 0; depth < 50; depth++) {
            if (root == failed) {
                return;  // the failure already is (or is caused by) the flush's error
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
            return;  // something else failed the task: close() adds the flush's error as suppressed
        }
        try {
            root.initCause(failed);
            synchronized (this) {
                causeAttached = true;
            }
        } catch (IllegalStateException | IllegalArgumentException e) {
            // its cause is fixed: close() throws the flush's error, which Spark adds as suppressed
        }
    }

    /** Counters of this task's writer, for logs and tests. */
    public String metrics() {
        return String.valueOf(metrics);
    }
}
