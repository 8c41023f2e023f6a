/*
 * A low-latency Postgres/Lakebase sink for Spark Structured Streaming (real-time mode or
 * micro-batch): a ForeachWriter<Row> that stays in the JVM, so rows never wait for a Python
 * worker. Built by scripts/build_jvm_sink.sh; driven from Python by rtm_lakebase/jvm/sink.py.
 *
 * - One JDBC connection per task, opened in open() with bounded, jittered retries; open()
 *   throws on failure (returning false would make Spark drop the partition's rows silently).
 * - Modes: "upsert" (INSERT ... ON CONFLICT (key) DO UPDATE, skipping no-op updates, or with a
 *   version column only letting a strictly newer version replace a row), "insert_ignore"
 *   (ON CONFLICT DO NOTHING) and "append" (COPY ... FROM STDIN when every column's Spark type
 *   is the column's own kind, see PgCopy; else plain INSERT; appendcopy=false forces INSERT).
 * - Rows are buffered, deduplicated by key, sorted by key and written as one transaction when
 *   `batchsize` keys are buffered or when the oldest buffered row is `batchinterval` old. One
 *   flusher thread per writer does all writing, so the tail is written even when no further row
 *   arrives (under real-time mode close() only comes at the end of a long batch). A flush that
 *   fails for good interrupts the task thread, so the task fails at once instead of at the end
 *   of the long batch; the error is thrown by the next process() or, when the interrupt broke the
 *   source's wait for rows, becomes the cause of the source's InterruptedException (see attachCause).
 * - Column types and casts come from PgColumnTypes (the Python sink's catalog query); values
 *   are bound by PgBinder (java.time, no dependence on the executor's time zone).
 * - A lost connection is re-opened and the flush retried (bounded, jittered backoff); upserts
 *   and insert-ignore make the retry harmless.
 * - A bad row fails its flush with BadRowException naming its key and column; nothing of that
 *   flush is written.
 * - Identifiers are always double-quoted; the password never appears in toString, logs or
 *   messages.
 *
 * Options (names follow Databricks' native Lakebase sink where they mean the same):
 *   url (jdbc:postgresql://...), user, password, dbtable, schema, mode, upsertkey
 *   (comma-separated; "quoted" names may hold commas), versioncolumn, skipunchanged,
 *   batchsize (1000), batchinterval ("100 milliseconds"), maxretries (6),
 *   backoffinitialms (250), backoffmaxms (5000), appendcopy (true), passwordprovider (the class
 *   name of a PgPasswordProvider, asked for the password at every (re)connect; see that file),
 *   connectionmaxageseconds (1800: a pooled connection older than that is closed, not reused;
 *   0 switches reuse off; see PgConnector).
 */
package rtm_lakebase.jvm;

import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.sql.BatchUpdateException;
import java.sql.Connection;
import java.sql.Driver;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTransientException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.NullType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.util.TaskFailureListener;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

public class PostgresForeachWriter extends ForeachWriter<Row> {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(PostgresForeachWriter.class);

    public static final Set<String> OPTIONS = Collections.unmodifiableSet(new TreeSet<>(Arrays.asList(
        "url", "user", "password", "dbtable", "schema", "mode", "upsertkey", "versioncolumn",
        "skipunchanged", "batchsize", "batchinterval", "maxretries", "backoffinitialms", "backoffmaxms",
        "appendcopy", "passwordprovider", "connectionmaxageseconds")));
    public static final List<String> MODES = List.of("upsert", "insert_ignore", "append");
    static final String DRIVER_CLASS = "org.postgresql.Driver";
    static final String DRIVER_MAVEN = "org.postgresql:postgresql:42.7.13";

    /** The sink could not write; the message says why (secrets removed). */
    public static class PostgresSinkException extends RuntimeException {
        private static final long serialVersionUID = 1L;
        private final String sqlState;

        public PostgresSinkException(String message) { this(message, null); }

        public PostgresSinkException(String message, String sqlState) {
            super(message);
            this.sqlState = sqlState;
        }

        public String getSQLState() { return sqlState; }
    }

    /** A row was rejected: {@link #getKey()} and {@link #getColumn()} name it. Nothing of its flush was written. */
    public static class BadRowException extends PostgresSinkException {
        private static final long serialVersionUID = 1L;
        private final Map<String, Object> key;
        private final String column;

        public BadRowException(String message, Map<String, Object> key, String column, String sqlState) {
            super(message, sqlState);
            this.key = key;
            this.column = column;
        }

        public Map<String, Object> getKey() { return key; }

        public String getColumn() { return column; }
    }

    // -- configuration (travels to executors) -----------------------------------------------
    private final String url;
    private final String user;
    private final String password;
    private final String table;
    private final String schema;
    private final String mode;
    private final ArrayList<String> upsertKey;
    private final String versionColumn;
    private final boolean skipUnchanged;
    private final int batchSize;
    private final long batchIntervalMs;
    private final int maxRetries;
    private final long backoffInitialMs;
    private final long backoffMaxMs;
    private final boolean appendCopy;
    private final long connectionMaxAgeMs;
    private final String passwordProvider;         // a class name; the password it gives is never kept here

    // -- runtime (per task, built in open()) --------------------------------------------------
    private transient ReentrantLock lock;
    private transient Condition changed;
    private transient Connection conn;             // used by the flusher thread only, after open()
    private transient Thread flusher;
    private transient ArrayDeque<List<Object[]>> sealed;
    private transient LinkedHashMap<List<Object>, Object[]> keyed;  // upsert, insert_ignore
    private transient ArrayList<Object[]> appended;                  // append
    private transient long oldestNanos;
    private transient boolean closing;
    private transient RuntimeException error;
    private transient LinkedHashMap<String, PgColumnTypes.Column> tableColumns;
    private transient PgColumnTypes.Column[] columnTypes;  // of `columns`, in order
    private transient java.time.ZoneId sessionZone;
    private transient Thread taskThread;                   // interrupted when a flush fails for good
    private transient boolean interruptedTask;
    private transient boolean causeAttached;  // the flush's error is the cause of the task's failure
    private transient List<String> keyColumns;
    private transient String[] columns;
    private transient int[] fieldIndex;
    private transient int[] keyIndex;
    private transient int[] keyForm;               // per key: how Postgres compares it (KEY_*)
    private transient boolean foldUnicode;         // citext: lower() folds more than A-Z here
    private transient int versionIndex;
    private transient String statement;
    private transient String copyStatement;        // mode=append when every column is COPY-safe, else null
    private transient PgPasswordProvider provider;
    private transient long partitionId;
    private transient long epochId;
    private transient long rowsReceived;
    private transient long rowsWritten;
    private transient long flushes;
    private transient long flushesByTimer;
    private transient long retries;
    private transient long copyFlushes;

    public PostgresForeachWriter(Map<String, String> options) {
        Map<String, String> o = new LinkedHashMap<>();
        for (Map.Entry<String, String> e : options.entrySet()) {
            o.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
        }
        TreeSet<String> unknown = new TreeSet<>(o.keySet());
        unknown.removeAll(OPTIONS);
        if (!unknown.isEmpty()) {
            throw new IllegalArgumentException("unknown option(s) " + unknown + "; known options: " + OPTIONS);
        }
        this.password = emptyToNull(o.get("password"));
        this.url = required(o, "url");
        if (!url.startsWith("jdbc:postgresql:")) {
            throw new IllegalArgumentException("url must start with jdbc:postgresql:, got " + redact(url));
        }
        this.user = emptyToNull(o.get("user"));
        this.table = required(o, "dbtable");
        this.schema = emptyToNull(o.get("schema"));
        checkIdentifier("dbtable", table);
        if (schema != null) {
            checkIdentifier("schema", schema);
        }
        this.mode = o.getOrDefault("mode", "upsert").toLowerCase(Locale.ROOT);
        if (!MODES.contains(mode)) {
            throw new IllegalArgumentException("mode must be one of " + MODES + ", got " + mode);
        }
        this.upsertKey = parseKeyList(o.get("upsertkey"));
        for (String k : upsertKey) {
            checkIdentifier("upsertkey", k);
        }
        if (!upsertKey.isEmpty() && mode.equals("append")) {
            throw new IllegalArgumentException("upsertkey does not apply to mode=append");
        }
        this.versionColumn = emptyToNull(o.get("versioncolumn"));
        if (versionColumn != null) {
            checkIdentifier("versioncolumn", versionColumn);
            if (!mode.equals("upsert")) {
                throw new IllegalArgumentException("versioncolumn only applies to mode=upsert");
            }
        }
        this.skipUnchanged = parseBoolean(o, "skipunchanged", true);
        this.batchSize = (int) parseLong(o, "batchsize", 1000, 1);
        this.batchIntervalMs = parseInterval(o.getOrDefault("batchinterval", "100 milliseconds"));
        this.maxRetries = (int) parseLong(o, "maxretries", 6, 0);
        this.backoffInitialMs = parseLong(o, "backoffinitialms", 250, 0);
        this.backoffMaxMs = parseLong(o, "backoffmaxms", 5000, 0);
        this.appendCopy = parseBoolean(o, "appendcopy", true);
        this.connectionMaxAgeMs = parseLong(o, "connectionmaxageseconds", 1800, 0) * 1000L;
        this.passwordProvider = emptyToNull(o.get("passwordprovider"));
        if (passwordProvider != null && password != null) {
            throw new IllegalArgumentException("give either password or passwordprovider, not both");
        }
        if (passwordProvider != null) {
            checkClassName(passwordProvider);
        }
    }

    private static void checkClassName(String name) {
        if (!name.matches("[A-Za-z_$][A-Za-z0-9_$]*(\\.[A-Za-z_$][A-Za-z0-9_$]*)*")) {
            throw new IllegalArgumentException("passwordprovider must be a Java class name, e.g. com.example.MyProvider");
        }
    }

    @Override
    public String toString() {
        return "PostgresForeachWriter(url=" + redact(url) + ", user=" + user + ", password="
            + (password != null ? "***" : "null") + ", table=" + target() + ", mode=" + mode
            + ", upsertkey=" + upsertKey + ", versioncolumn=" + versionColumn + ", batchsize=" + batchSize
            + ", batchinterval=" + batchIntervalMs + " ms"
            + (passwordProvider != null ? ", passwordprovider=" + passwordProvider : "") + ")";
    }

    // -- the ForeachWriter contract ---------------------------------------------------------------

    /** Connect (with retries), read the table's columns, start the flusher thread. Throws on failure. */
    @Override
    public boolean open(long partitionId, long epochId) {
        if (conn != null) {
            closeConnection();
        }
        resetRuntime();
        this.partitionId = partitionId;
        this.epochId = epochId;
        this.taskThread = Thread.currentThread();
        TaskContext context = TaskContext.get();
        if (context != null) {
            context.addTaskFailureListener((TaskFailureListener) (ctx, failure) -> attachCause(failure));
        }
        this.sessionZone = PgBinder.sessionZone();
        try {
            withRetries(this::connectAndDescribe, "open");
        } catch (RuntimeException e) {
            closeConnection();  // Spark does not call close() after a failed open()
            throw e;
        }
        Thread t = new Thread(this::flusherLoop, "pg-jvm-sink-flusher-p" + partitionId);
        t.setDaemon(true);
        flusher = t;
        t.start();
        return true;
    }

    /** Buffer one row (deduplicated by key); flush when `batchsize` keys are buffered. */
    @Override
    public void process(Row row) {
        lock.lock();
        try {
            if (error != null) {
                throw error;
            }
            if (columns == null) {
                prepareLayout(row);
            }
            Object[] values = toValues(row);
            rowsReceived++;
            if (keyIndex == null) {
                appended.add(values);
            } else {
                List<Object> key = keyOf(values);
                if (key.contains(null)) {
                    throw nullKey(values);
                }
                Object[] previous = keyed.putIfAbsent(key, values);
                if (previous != null && keepsNew(previous, values)) {
                    keyed.put(key, values);
                }
            }
            if (oldestNanos < 0) {
                oldestNanos = System.nanoTime();
                changed.signalAll();
            }
            if (buffered() >= batchSize) {
                seal(false);
                // Back-pressure: at most one batch waits while another is being written.
                while (sealed.size() > 1 && error == null) {
                    changed.await();
                }
                if (error != null) {
                    throw error;
                }
            }
        } catch (InterruptedException e) {
            if (error != null) {
                throw error;  // the flusher interrupted this thread to report it
            }
            Thread.currentThread().interrupt();
            throw new PostgresSinkException("interrupted while waiting for a flush to " + target());
        } finally {
            lock.unlock();
        }
    }

    /** On success write what is left and wait for it; on error discard what is not yet written. */
    @Override
    public void close(Throwable errorOrNull) {
        if (lock == null) {
            return;  // open() never ran
        }
        RuntimeException pending = null;
        try {
            lock.lock();
            try {
                if (interruptedTask) {
                    interruptedTask = false;
                    pending = reportInterrupt(errorOrNull);
                }
                if (errorOrNull == null && error == null && buffered() > 0) {
                    seal(false);
                }
                if (errorOrNull != null) {
                    while (sealed.size() > 1) {
                        sealed.pollLast();  // keep only the batch being written, if any
                    }
                    clearBuffer();
                }
                closing = true;
                taskThread = null;  // from here on a failed flush is thrown by close(), not by an interrupt
                changed.signalAll();
            } finally {
                lock.unlock();
            }
            Thread t = flusher;
            flusher = null;
            if (t != null && t != Thread.currentThread()) {
                try {
                    t.join();
                } catch (InterruptedException e) {
                    t.interrupt();
                    Thread.currentThread().interrupt();
                }
            }
            if (errorOrNull == null) {
                lock.lock();
                try {
                    pending = error;
                } finally {
                    lock.unlock();
                }
            }
        } finally {
            lock.lock();
            try {
                clearBuffer();
                sealed.clear();
            } finally {
                lock.unlock();
            }
            if (errorOrNull == null && pending == null) {
                releaseConnection();  // kept for the executor's next task (PgConnector)
            } else {
                closeConnection();
            }
            LOG.info("postgres JVM sink closed (partition={} epoch={} error={}): {}", partitionId, epochId,
                errorOrNull == null ? null : errorOrNull.getClass().getSimpleName(), metrics());
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
        if (Thread.currentThread() == taskThread) {
            Thread.interrupted();
        }
        if (causeAttached) {
            return null;  // the task's failure already has the flush's error as its cause
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
        lock.lock();
        try {
            if (!interruptedTask || error == null || failure == null) {
                return;
            }
            failed = error;
        } finally {
            lock.unlock();
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
            causeAttached = true;
        } catch (IllegalStateException | IllegalArgumentException e) {
            // its cause is fixed: close() throws the flush's error, which Spark adds as suppressed
        }
    }

    /** Counters of this task's writer, for logs and tests. */
    public String metrics() {
        return "rows_received=" + rowsReceived + " rows_written=" + rowsWritten + " flushes=" + flushes
            + " flushes_by_timer=" + flushesByTimer + " retries=" + retries + " copy_flushes=" + copyFlushes;
    }

    // -- buffering ----------------------------------------------------------------------------------

    private void resetRuntime() {
        lock = new ReentrantLock();
        changed = lock.newCondition();
        conn = null;
        flusher = null;
        sealed = new ArrayDeque<>();
        keyed = new LinkedHashMap<>();
        appended = new ArrayList<>();
        oldestNanos = -1;
        closing = false;
        causeAttached = false;
        error = null;
        tableColumns = null;
        columnTypes = null;
        keyColumns = new ArrayList<>();
        for (String k : upsertKey) {
            keyColumns.add(PgColumnTypes.pgName(k));
        }
        columns = null;
        fieldIndex = null;
        keyIndex = null;
        keyForm = null;
        versionIndex = -1;
        statement = null;
        rowsReceived = rowsWritten = flushes = flushesByTimer = retries = copyFlushes = 0;
    }

    private int buffered() {
        return keyIndex == null ? appended.size() : keyed.size();
    }

    private void clearBuffer() {
        keyed.clear();
        appended.clear();
        oldestNanos = -1;
    }

    /** Move the buffer to the flusher's queue (caller holds the lock). */
    private void seal(boolean byTimer) {
        List<Object[]> batch = keyIndex == null ? new ArrayList<>(appended) : new ArrayList<>(keyed.values());
        clearBuffer();
        if (!batch.isEmpty()) {
            if (keyIndex != null) {
                // One lock order for every writer: concurrent tasks cannot deadlock on each other's rows.
                batch.sort(this::compareKeys);
            }
            if (byTimer) {
                flushesByTimer++;
            }
            sealed.addLast(batch);
            changed.signalAll();
        }
    }

    private boolean keepsNew(Object[] previous, Object[] next) {
        if (mode.equals("insert_ignore")) {
            return false;  // the first row for a key wins, as ON CONFLICT DO NOTHING does
        }
        if (versionIndex < 0) {
            return true;  // last row wins
        }
        // The statement's rule: only a strictly newer version replaces a row; on a tie the first wins.
        Object oldV = previous[versionIndex];
        Object newV = next[versionIndex];
        if (newV == null) {
            return false;
        }
        return oldV == null || compareValues(newV, oldV) > 0;
    }

    private static final int KEY_AS_IS = 0;
    private static final int KEY_NO_TRAILING_SPACES = 1;  // char(n): trailing spaces do not count
    private static final int KEY_FOLD_ASCII = 2;          // citext under the "C" collation
    private static final int KEY_FOLD = 3;                // citext where lower() folds more than A-Z

    private int keyForm(String baseType) {
        if (baseType.equals("character")) {
            return KEY_NO_TRAILING_SPACES;
        }
        if (baseType.equals("citext")) {
            return foldUnicode ? KEY_FOLD : KEY_FOLD_ASCII;
        }
        return KEY_AS_IS;
    }

    /** The key as Postgres compares it: keys one to Postgres are one in the buffer (the last wins). */
    private List<Object> keyOf(Object[] values) {
        Object[] key = new Object[keyIndex.length];
        for (int i = 0; i < keyIndex.length; i++) {
            Object v = values[keyIndex[i]];
            if (v instanceof String && keyForm[i] != KEY_AS_IS) {
                v = keyText((String) v, keyForm[i]);
            }
            key[i] = v instanceof byte[] ? ByteBuffer.wrap((byte[]) v) : v;
        }
        return Arrays.asList(key);
    }

    private static String keyText(String v, int form) {
        if (form == KEY_NO_TRAILING_SPACES) {
            int end = v.length();
            while (end > 0 && v.charAt(end - 1) == ' ') {
                end--;
            }
            return v.substring(0, end);
        }
        if (form == KEY_FOLD) {
            return v.toLowerCase(java.util.Locale.ROOT);
        }
        StringBuilder b = new StringBuilder(v.length());
        for (int i = 0; i < v.length(); i++) {
            char c = v.charAt(i);
            b.append(c >= 'A' && c <= 'Z' ? (char) (c + 32) : c);
        }
        return b.toString();
    }

    private int compareKeys(Object[] a, Object[] b) {
        for (int i : keyIndex) {
            int c = compareValues(a[i], b[i]);
            if (c != 0) {
                return c;
            }
        }
        return 0;
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    private static int compareValues(Object a, Object b) {
        if (a instanceof byte[] && b instanceof byte[]) {
            return Arrays.compare((byte[]) a, (byte[]) b);
        }
        if (a instanceof Comparable && a.getClass() == b.getClass()) {
            return ((Comparable) a).compareTo(b);
        }
        if (a instanceof Number && b instanceof Number) {
            return new BigDecimal(a.toString()).compareTo(new BigDecimal(b.toString()));
        }
        return String.valueOf(a).compareTo(String.valueOf(b));
    }

    /** On the first row: check the row's fields against the table and build the statement. */
    private void prepareLayout(Row row) {
        StructType rowSchema = row.schema();
        if (rowSchema == null) {
            throw new PostgresSinkException("rows carry no schema; the JVM sink writes Dataset<Row> rows");
        }
        StructField[] fields = rowSchema.fields();
        String[] cols = new String[fields.length];
        List<String> unknown = new ArrayList<>();
        for (int i = 0; i < fields.length; i++) {
            cols[i] = PgColumnTypes.pgName(fields[i].name());  // as Postgres reads a longer name
            if (Arrays.asList(cols).subList(0, i).contains(cols[i])) {
                throw new PostgresSinkException("columns " + fields[i].name() + " and another field are one column "
                    + cols[i] + " in Postgres, which cuts names to 63 bytes");
            }
            if (!supported(fields[i].dataType())) {
                throw new PostgresSinkException("column " + cols[i] + " has Spark type "
                    + fields[i].dataType().simpleString() + ", which the JVM sink does not write; cast it "
                    + "(e.g. to_json(col) into a jsonb/text column)");
            }
            if (!tableColumns.containsKey(cols[i])) {
                unknown.add(cols[i]);
            }
        }
        if (unknown.isEmpty() == false) {
            throw new PostgresSinkException("column(s) " + unknown + " not in table " + target()
                + "; table columns: " + tableColumns.keySet());
        }
        columnTypes = new PgColumnTypes.Column[cols.length];
        List<String> fixed = new ArrayList<>();
        for (int i = 0; i < cols.length; i++) {
            columnTypes[i] = tableColumns.get(cols[i]);
            if (!columnTypes[i].notWritable.isEmpty()) {
                fixed.add(cols[i] + " (" + columnTypes[i].notWritable + ")");
            }
        }
        if (!fixed.isEmpty()) {
            throw new PostgresSinkException("column(s) " + fixed + " of " + target() + " cannot be written (a plain "
                + "INSERT refuses them too): leave them out of the rows; Postgres fills them");
        }
        List<String> colList = Arrays.asList(cols);
        if (!mode.equals("append")) {
            List<String> missing = new ArrayList<>();
            for (String k : keyColumns) {
                if (!colList.contains(k)) {
                    missing.add(k);
                }
            }
            if (!missing.isEmpty()) {
                throw new PostgresSinkException("key column(s) " + missing
                    + " are not among the written columns " + colList);
            }
            keyIndex = new int[keyColumns.size()];
            keyForm = new int[keyIndex.length];
            for (int i = 0; i < keyIndex.length; i++) {
                keyIndex[i] = colList.indexOf(keyColumns.get(i));
                keyForm[i] = keyForm(tableColumns.get(keyColumns.get(i)).baseType);
            }
        }
        if (versionColumn != null) {
            versionIndex = colList.indexOf(PgColumnTypes.pgName(versionColumn));
            if (versionIndex < 0) {
                throw new PostgresSinkException("versioncolumn " + versionColumn
                    + " is not among the written columns " + colList);
            }
        }
        fieldIndex = new int[cols.length];
        for (int i = 0; i < cols.length; i++) {
            fieldIndex[i] = i;
        }
        columns = cols;
        statement = buildStatement(cols);
        copyStatement = null;
        if (mode.equals("append") && appendCopy) {
            boolean safe = true;
            StringBuilder names = new StringBuilder();
            for (int i = 0; i < cols.length; i++) {
                safe &= PgCopy.copySafe(fields[i].dataType(), columnTypes[i]);
                names.append(i == 0 ? "" : ", ").append(quote(cols[i]));
            }
            copyStatement = safe ? PgCopy.sql(target(), names.toString()) : null;
        }
    }

    private static boolean supported(DataType t) {
        if (t instanceof org.apache.spark.sql.types.ArrayType) {
            return supported(((org.apache.spark.sql.types.ArrayType) t).elementType());
        }
        return t.typeName().equals("time") || t instanceof BooleanType || t instanceof ByteType || t instanceof ShortType
            || t instanceof IntegerType || t instanceof LongType || t instanceof FloatType
            || t instanceof DoubleType || t instanceof DecimalType || t instanceof StringType
            || t instanceof BinaryType || t instanceof DateType || t instanceof TimestampType
            || t instanceof TimestampNTZType || t instanceof NullType;
    }

    private Object[] toValues(Row row) {
        Object[] values = new Object[columns.length];
        for (int i = 0; i < values.length; i++) {
            values[i] = PgBinder.fromSpark(row.get(fieldIndex[i]));
        }
        return values;
    }

    private String buildStatement(String[] cols) {
        StringBuilder names = new StringBuilder();
        StringBuilder params = new StringBuilder();
        for (int i = 0; i < cols.length; i++) {
            String sep = i == 0 ? "" : ", ";
            names.append(sep).append(quote(cols[i]));
            params.append(sep).append(tableColumns.get(cols[i]).param());
        }
        if (mode.equals("append")) {
            return "INSERT INTO " + target() + " (" + names + ") VALUES (" + params + ")";
        }
        StringBuilder keys = new StringBuilder();
        for (int i = 0; i < keyColumns.size(); i++) {
            keys.append(i == 0 ? "" : ", ").append(quote(keyColumns.get(i)));
        }
        StringBuilder sql = new StringBuilder("INSERT INTO ").append(target()).append(" AS t (").append(names)
            .append(") VALUES (").append(params).append(") ON CONFLICT (").append(keys).append(") ");
        List<String> updates = new ArrayList<>();
        for (String c : cols) {
            if (!keyColumns.contains(c)) {
                updates.add(c);
            }
        }
        if (mode.equals("insert_ignore") || updates.isEmpty()) {
            return sql.append("DO NOTHING").toString();
        }
        sql.append("DO UPDATE SET ");
        for (int i = 0; i < updates.size(); i++) {
            String c = quote(updates.get(i));
            sql.append(i == 0 ? "" : ", ").append(c).append(" = EXCLUDED.").append(c);
        }
        if (versionColumn != null) {
            String v = quote(versionColumn);
            sql.append(" WHERE t.").append(v).append(" IS NULL OR t.").append(v).append(" < EXCLUDED.").append(v);
        } else if (skipUnchanged) {
            StringBuilder oldRow = new StringBuilder();
            StringBuilder newRow = new StringBuilder();
            for (int i = 0; i < updates.size(); i++) {
                String c = quote(updates.get(i));
                PgColumnTypes.Column type = tableColumns.get(updates.get(i));
                oldRow.append(i == 0 ? "" : ", ").append(type.compared("t", c));
                newRow.append(i == 0 ? "" : ", ").append(type.compared("EXCLUDED", c));
            }
            sql.append(" WHERE (").append(oldRow).append(") IS DISTINCT FROM (").append(newRow).append(')');
        }
        return sql.toString();
    }

    // -- connection ---------------------------------------------------------------------------------

    private interface SqlAction<T> {
        T run() throws SQLException;
    }

    private Driver driver() {
        ClassLoader[] loaders = {Thread.currentThread().getContextClassLoader(),
            PostgresForeachWriter.class.getClassLoader()};
        for (ClassLoader loader : loaders) {
            if (loader == null) {
                continue;
            }
            try {
                return (Driver) Class.forName(DRIVER_CLASS, true, loader).getDeclaredConstructor().newInstance();
            } catch (ClassNotFoundException e) {
                // try the next loader
            } catch (ReflectiveOperationException e) {
                throw new PostgresSinkException("cannot load the Postgres JDBC driver: " + e);
            }
        }
        throw new PostgresSinkException("the Postgres JDBC driver (" + DRIVER_CLASS + ") is not on the classpath: "
            + "add postgresql-42.x.jar to spark.jars, or spark.jars.packages=" + DRIVER_MAVEN);
    }

    private Void connectAndDescribe() throws SQLException {
        if (conn == null || conn.isClosed()) {
            Connection c = PgConnector.borrow(poolKey(), connectionMaxAgeMs, driver(), url, () -> {
                Properties props = new Properties();  // built only when a new connection is opened
                if (user != null) {
                    props.setProperty("user", user);
                }
                String secret = password != null ? password : providedPassword();
                if (secret != null) {
                    props.setProperty("password", secret);
                }
                return props;
            });
            if (c == null) {
                throw new PostgresSinkException("the JDBC driver does not accept the url " + redact(url));
            }
            conn = c;
        }
        if (tableColumns == null) {
            describeTable();
        }
        return null;
    }

    private void describeTable() throws SQLException {
        LinkedHashMap<String, PgColumnTypes.Column> found = PgColumnTypes.describe(conn, table, schema);
        if (found.isEmpty()) {
            conn.rollback();
            throw new PostgresSinkException("table " + target() + (schema == null ? " (in the current schema)" : "")
                + " not found; create it first (a dot in dbtable is part of the name: use the schema option)");
        }
        if (!mode.equals("append") && keyColumns.isEmpty()) {
            try (PreparedStatement ps = conn.prepareStatement(
                "SELECT a.attname FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indrelid "
                    + "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                    + "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
                    + "WHERE c.relname = ? AND n.nspname = COALESCE(CAST(? AS text), current_schema()) "
                    + "AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)")) {
                ps.setString(1, PgColumnTypes.pgName(table));
                ps.setString(2, PgColumnTypes.pgName(schema));
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) {
                        keyColumns.add(rs.getString(1));
                    }
                }
            }
            if (keyColumns.isEmpty()) {
                conn.rollback();
                throw new PostgresSinkException("table " + target() + " has no primary key: set upsertkey (mode="
                    + mode + " needs a unique key for ON CONFLICT)");
            }
        }
        foldUnicode = true;
        for (String k : keyColumns) {
            PgColumnTypes.Column c = found.get(k);
            if (c != null && c.baseType.equals("citext")) {
                try (PreparedStatement ps = conn.prepareStatement(PgColumnTypes.FOLDS_UNICODE_QUERY);
                     ResultSet rs = ps.executeQuery()) {
                    foldUnicode = rs.next() && rs.getBoolean(1);
                }
                break;
            }
        }
        conn.rollback();  // end the catalog transaction
        List<String> missing = new ArrayList<>();
        for (String k : keyColumns) {
            if (!found.containsKey(k)) {
                missing.add(k);
            }
        }
        if (versionColumn != null && !found.containsKey(PgColumnTypes.pgName(versionColumn))) {
            missing.add(versionColumn);
        }
        if (!missing.isEmpty()) {
            throw new PostgresSinkException("column(s) " + missing + " not in table " + target()
                + "; table columns: " + found.keySet());
        }
        tableColumns = found;
    }

    /** url, user and the password's hash; with a provider its class name (its tokens change, the connections stay good). */
    private String poolKey() {
        return PgConnector.key(url, user, passwordProvider != null ? "provider:" + passwordProvider : password);
    }

    /** The provider's password for this (re)connect; a failure is one line naming the class, never a secret. */
    private String providedPassword() {
        if (passwordProvider == null) {
            return null;
        }
        if (provider == null) {
            provider = PgPasswordProvider.load(passwordProvider);
        }
        String secret;
        try {
            secret = provider.password();
        } catch (RuntimeException e) {
            throw new PostgresSinkException("passwordprovider " + passwordProvider + " failed: "
                + e.getClass().getName() + " (its message is not shown: it may hold a secret)");
        }
        if (secret == null || secret.isEmpty()) {
            throw new PostgresSinkException("passwordprovider " + passwordProvider + " returned no password");
        }
        return secret;
    }

    /** Give a healthy connection back to the executor's pool (a task that ended well). */
    private void releaseConnection() {
        Connection c = conn;
        conn = null;
        PgConnector.giveBack(poolKey(), connectionMaxAgeMs, c);
    }

    private void closeConnection() {
        Connection c = conn;
        conn = null;
        if (c != null) {
            try {
                c.close();
            } catch (SQLException e) {
                LOG.debug("ignoring an error while closing the connection: {}", redact(e.getMessage()));
            }
        }
    }

    /** Run `action`; on a transient error drop the connection, back off (jittered) and try again. */
    private <T> T withRetries(SqlAction<T> action, String what) {
        int attempt = 0;
        long started = System.nanoTime();
        while (true) {
            try {
                return action.run();
            } catch (SQLException e) {
                if (!isTransient(e)) {
                    if (isRowError(e)) {
                        throw new RowErrorSignal(e);
                    }
                    String prefix = what.equals("open") ? "cannot connect to Postgres or read table " + target()
                        : "flush to " + target() + " failed";
                    throw new PostgresSinkException(prefix + " (" + redact(url) + ", user=" + user + "): "
                        + describe(e), sqlState(e));
                }
                attempt++;
                rollbackQuietly();
                closeConnection();
                if (attempt > maxRetries) {
                    throw new PostgresSinkException(what + " failed after " + attempt + " attempts in "
                        + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started) + " ms (" + redact(url)
                        + "): " + describe(e), sqlState(e));
                }
                retries++;
                long cap = Math.min(backoffMaxMs, backoffInitialMs << Math.min(attempt - 1, 30));
                long delay = cap / 2 + (cap > 1 ? ThreadLocalRandom.current().nextLong(cap / 2 + 1) : 0);
                LOG.warn("postgres JVM sink {}: transient error (attempt {} of {}), retrying in {} ms: {}", what,
                    attempt, maxRetries, delay, describe(e));
                try {
                    Thread.sleep(delay);
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    throw new PostgresSinkException(what + " interrupted while retrying: " + describe(e), sqlState(e));
                }
            }
        }
    }

    /** Carries a data error out of withRetries to the flush, which diagnoses the batch. */
    private static final class RowErrorSignal extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final transient SQLException cause;

        RowErrorSignal(SQLException cause) {
            super(null, null, false, false);
            this.cause = cause;
        }
    }

    private static SQLException root(SQLException e) {
        if (e instanceof BatchUpdateException && e.getNextException() != null) {
            return e.getNextException();
        }
        return e;
    }

    private static String sqlState(SQLException e) {
        String s = root(e).getSQLState();
        return s != null ? s : e.getSQLState();
    }

    static boolean isTransient(SQLException e) {
        String s = sqlState(e);
        if (s == null) {
            return e instanceof SQLTransientException || e instanceof SQLRecoverableException;
        }
        return s.startsWith("08") || s.equals("57P01") || s.equals("57P02") || s.equals("57P03")
            || s.equals("40001") || s.equals("40P01") || s.equals("53300");
    }

    static boolean isRowError(SQLException e) {
        String s = sqlState(e);
        return s != null && (s.startsWith("22") || s.startsWith("23") || s.equals("21000")
            || s.equals("42804") || s.equals("42846"));
    }

    // -- flushing -----------------------------------------------------------------------------------

    /** The one thread that writes: queued batches in order, and the buffer once it is too old. */
    private void flusherLoop() {
        long intervalNanos = TimeUnit.MILLISECONDS.toNanos(batchIntervalMs);
        lock.lock();
        try {
            while (error == null) {
                if (sealed.isEmpty()) {
                    long now = System.nanoTime();
                    boolean waiting = buffered() > 0;
                    if (waiting && now - oldestNanos >= intervalNanos) {
                        seal(true);
                        continue;
                    }
                    if (closing) {
                        return;
                    }
                    if (waiting) {
                        changed.awaitNanos(oldestNanos + intervalNanos - now);
                    } else {
                        changed.await();
                    }
                    continue;
                }
                List<Object[]> batch = sealed.peekFirst();
                RuntimeException failure = null;
                int written = 0;
                lock.unlock();
                try {
                    written = flushBatch(batch);
                } catch (RuntimeException e) {
                    failure = e;
                } catch (Error e) {
                    failure = new PostgresSinkException("flush to " + target() + " failed: " + e);
                } finally {
                    lock.lock();
                }
                if (sealed.peekFirst() == batch) {
                    sealed.pollFirst();
                }
                if (failure != null) {
                    error = failure;
                    LOG.error("postgres JVM sink: flush failed; failing the task now: {}", failure.getMessage());
                    Thread task = taskThread;
                    if (task != null && task != Thread.currentThread()) {
                        interruptedTask = true;
                        task.interrupt();  // the task learns of it at once, not at the end of the long batch
                    }
                } else {
                    flushes++;
                    rowsWritten += written;
                }
                changed.signalAll();
            }
        } catch (InterruptedException e) {
            if (error == null) {
                error = new PostgresSinkException("the flusher thread of " + target() + " was interrupted");
            }
        } finally {
            changed.signalAll();
            lock.unlock();
        }
    }

    /** Write one batch (retrying transient failures); a data error names the row and column. */
    private int flushBatch(List<Object[]> batch) {
        try {
            return withRetries(() -> write(batch), "flush");
        } catch (RowErrorSignal signal) {
            throw diagnose(batch, signal.cause);
        }
    }

    private int write(List<Object[]> batch) throws SQLException {
        if (conn == null || conn.isClosed()) {
            connectAndDescribe();
        }
        if (copyStatement != null) {
            try {
                long copied = PgCopy.copyIn(conn, copyStatement, PgCopy.text(batch, columnTypes, sessionZone));
                conn.commit();
                copyFlushes++;
                return (int) copied;
            } catch (SQLException e) {
                rollbackQuietly();
                throw e;
            }
        }
        try (PreparedStatement ps = conn.prepareStatement(statement)) {
            for (Object[] values : batch) {
                PgBinder.bind(ps, values, columnTypes, sessionZone);
                ps.addBatch();
            }
            int[] counts = ps.executeBatch();
            conn.commit();
            int written = 0;
            for (int n : counts) {
                written += n == Statement.SUCCESS_NO_INFO ? 1 : Math.max(n, 0);
            }
            return written;
        } catch (SQLException e) {
            rollbackQuietly();
            throw e;
        }
    }

    private void rollbackQuietly() {
        try {
            if (conn != null && !conn.isClosed()) {
                conn.rollback();
            }
        } catch (SQLException e) {
            LOG.debug("ignoring a failed rollback: {}", redact(e.getMessage()));
        }
    }

    // -- diagnostics --------------------------------------------------------------------------------

    /** Find the first row (and column) the flush failed on, in a transaction that is always rolled back. */
    private PostgresSinkException diagnose(List<Object[]> batch, SQLException failure) {
        try {
            if (conn == null || conn.isClosed()) {
                connectAndDescribe();
            }
            try (PreparedStatement ps = conn.prepareStatement(statement)) {
                for (Object[] values : batch) {
                    Savepoint sp = conn.setSavepoint();
                    try {
                        PgBinder.bind(ps, values, columnTypes, sessionZone);
                        ps.executeUpdate();
                        conn.releaseSavepoint(sp);
                    } catch (SQLException rowError) {
                        if (!isRowError(rowError)) {
                            throw rowError;
                        }
                        conn.rollback(sp);
                        String column = serverColumn(rowError);
                        if (column == null) {
                            column = findColumn(values);
                        }
                        return badRow(values, column, rowError);
                    }
                }
            } finally {
                rollbackQuietly();
            }
        } catch (SQLException | RuntimeException diagnosisError) {
            String message = diagnosisError instanceof SQLException
                ? describe((SQLException) diagnosisError) : diagnosisError.getMessage();
            return new PostgresSinkException("flush to " + target() + " failed: " + describe(failure)
                + " (diagnosis failed: " + redact(message) + "); nothing of this flush was written", sqlState(failure));
        }
        return new PostgresSinkException("flush to " + target() + " failed but no single row fails alone: "
            + describe(failure) + "; nothing of this flush was written", sqlState(failure));
    }

    /** The column the server names in its error (not-null violations do), read without compiling against pgjdbc. */
    private static String serverColumn(SQLException e) {
        try {
            Object msg = e.getClass().getMethod("getServerErrorMessage").invoke(e);
            if (msg == null) {
                return null;
            }
            Object column = msg.getClass().getMethod("getColumn").invoke(msg);
            return column == null ? null : column.toString();
        } catch (ReflectiveOperationException | RuntimeException ignored) {
            return null;
        }
    }

    /** Insert each value alone into a constraint-free temporary copy of the table; the one that fails is it. */
    private String findColumn(Object[] values) throws SQLException {
        Savepoint outer = conn.setSavepoint();
        try (Statement st = conn.createStatement()) {
            st.execute("CREATE TEMP TABLE rtm_jvm_sink_probe ON COMMIT DROP AS SELECT * FROM " + target()
                + " WITH NO DATA");
            for (int i = 0; i < columns.length; i++) {
                if (values[i] == null) {
                    continue;
                }
                Savepoint sp = conn.setSavepoint();
                try (PreparedStatement ps = conn.prepareStatement("INSERT INTO pg_temp.rtm_jvm_sink_probe ("
                    + quote(columns[i]) + ") VALUES (" + columnTypes[i].param() + ")")) {
                    PgBinder.bindOne(ps, 1, values[i], columnTypes[i], sessionZone);
                    ps.executeUpdate();
                    conn.releaseSavepoint(sp);
                } catch (SQLException e) {
                    if (isRowError(e)) {
                        return columns[i];
                    }
                    throw e;
                }
            }
            return null;
        } finally {
            conn.rollback(outer);
        }
    }

    private BadRowException badRow(Object[] values, String column, SQLException e) {
        Map<String, Object> key = new LinkedHashMap<>();
        if (keyIndex != null) {
            for (int i = 0; i < keyIndex.length; i++) {
                key.put(keyColumns.get(i), values[keyIndex[i]]);
            }
        }
        String keyText = key.isEmpty() ? "row " + rowText(values) : "row with key " + pairs(key);
        String type = "";
        if (column != null && tableColumns.containsKey(column)) {
            type = " (" + tableColumns.get(column).fullType + ")";
        }
        String state = sqlState(e);
        String reason = firstLine(describe(e));
        return new BadRowException(redact(keyText + " rejected at column " + (column == null ? "?" : column) + type
            + ": " + reason + (state != null ? " [SQLSTATE " + state + "]" : "")
            + "; nothing of this flush was written to " + target()), key, column, state);
    }

    private BadRowException nullKey(Object[] values) {
        Map<String, Object> key = new LinkedHashMap<>();
        String column = null;
        for (int i = 0; i < keyIndex.length; i++) {
            Object v = values[keyIndex[i]];
            key.put(keyColumns.get(i), v);
            if (v == null && column == null) {
                column = keyColumns.get(i);
            }
        }
        return new BadRowException(redact("row with key " + pairs(key) + " rejected at column " + column
            + ": a key column is null (row " + rowText(values) + "); nothing of this batch was written to "
            + target()), key, column, null);
    }

    private String rowText(Object[] values) {
        Map<String, Object> row = new LinkedHashMap<>();
        for (int i = 0; i < values.length; i++) {
            row.put(columns[i], values[i]);
        }
        String text = mapText(row);
        return text.length() <= 300 ? text : text.substring(0, 297) + "...";
    }

    private static String mapText(Map<String, Object> m) {
        return "{" + pairs(m) + "}";
    }

    /** name=value, ...: strings in single quotes, binary values by length. */
    private static String pairs(Map<String, Object> m) {
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<String, Object> e : m.entrySet()) {
            if (sb.length() > 0) {
                sb.append(", ");
            }
            Object v = e.getValue();
            String text = v instanceof String ? "'" + v + "'" : v instanceof byte[] ? "<" + ((byte[]) v).length
                + " bytes>" : String.valueOf(v);
            sb.append(e.getKey()).append('=').append(text);
        }
        return sb.toString();
    }

    private static String firstLine(String s) {
        int nl = s.indexOf('\n');
        return nl < 0 ? s : s.substring(0, nl);
    }

    /** The server's message (the batch's real error, not the batch wrapper), without the secret. */
    private String describe(SQLException e) {
        SQLException r = root(e);
        String message = r.getMessage();
        if (message == null) {
            message = r.getClass().getSimpleName();
        }
        return redact(message);
    }

    // -- identifiers, options, secrets --------------------------------------------------------------

    static String quote(String identifier) {
        return '"' + identifier.replace("\"", "\"\"") + '"';
    }

    private String target() {
        return schema == null ? quote(table) : quote(schema) + "." + quote(table);
    }

    private static final Pattern URL_PASSWORD = Pattern.compile("(?i)(password=)[^&\\s]*");

    /** `text` without the password (literal occurrences and password=... URL parameters). */
    String redact(String text) {
        if (text == null) {
            return null;
        }
        String out = text;
        if (password != null && !password.isEmpty()) {
            out = out.replace(password, "***");
        }
        return URL_PASSWORD.matcher(out).replaceAll("$1***");
    }

    private static void checkIdentifier(String option, String name) {
        if (name.isEmpty() || name.indexOf('\0') >= 0) {
            throw new IllegalArgumentException(option + " must be a non-empty name without NUL characters");
        }
    }

    private static String emptyToNull(String s) {
        return s == null || s.isEmpty() ? null : s;
    }

    private static String required(Map<String, String> o, String name) {
        String v = emptyToNull(o.get(name));
        if (v == null) {
            throw new IllegalArgumentException("option " + name + " is required");
        }
        return v;
    }

    private static boolean parseBoolean(Map<String, String> o, String name, boolean dflt) {
        String v = o.get(name);
        if (v == null) {
            return dflt;
        }
        if (v.equalsIgnoreCase("true") || v.equalsIgnoreCase("false")) {
            return Boolean.parseBoolean(v);
        }
        throw new IllegalArgumentException("option " + name + " must be true or false, got " + v);
    }

    private static long parseLong(Map<String, String> o, String name, long dflt, long min) {
        String v = o.get(name);
        if (v == null) {
            return dflt;
        }
        long n;
        try {
            n = Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("option " + name + " must be an integer, got " + v);
        }
        if (n < min || n > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("option " + name + " must be between " + min + " and "
                + Integer.MAX_VALUE + ", got " + v);
        }
        return n;
    }

    private static final Pattern INTERVAL = Pattern.compile(
        "\\s*(\\d{1,9})\\s*(milliseconds?|seconds?|minutes?)\\s*", Pattern.CASE_INSENSITIVE);

    /** "100 milliseconds", "1 second", "2 minutes" (the native sink's format) → milliseconds (at least 1). */
    static long parseInterval(String text) {
        Matcher m = INTERVAL.matcher(text);
        if (!m.matches()) {
            throw new IllegalArgumentException("batchinterval must look like \"100 milliseconds\", \"1 second\" or "
                + "\"1 minute\", got \"" + text + "\"");
        }
        long n = Long.parseLong(m.group(1));
        String unit = m.group(2).toLowerCase(Locale.ROOT);
        long ms = unit.startsWith("milli") ? n : unit.startsWith("second") ? n * 1000 : n * 60_000;
        if (ms < 1) {
            throw new IllegalArgumentException("batchinterval must be at least 1 millisecond, got \"" + text + "\"");
        }
        return ms;
    }

    /** Comma-separated names; a "double-quoted" name may hold commas and "" for a quote. */
    static ArrayList<String> parseKeyList(String text) {
        ArrayList<String> names = new ArrayList<>();
        if (text == null || text.trim().isEmpty()) {
            return names;
        }
        int i = 0;
        int n = text.length();
        while (true) {
            while (i < n && text.charAt(i) == ' ') {
                i++;
            }
            StringBuilder name = new StringBuilder();
            if (i < n && text.charAt(i) == '"') {
                i++;
                boolean closed = false;
                while (i < n) {
                    char c = text.charAt(i++);
                    if (c == '"') {
                        if (i < n && text.charAt(i) == '"') {
                            name.append('"');
                            i++;
                        } else {
                            closed = true;
                            break;
                        }
                    } else {
                        name.append(c);
                    }
                }
                if (!closed) {
                    throw new IllegalArgumentException("upsertkey has an unclosed double quote: " + text);
                }
                while (i < n && text.charAt(i) == ' ') {
                    i++;
                }
            } else {
                int start = i;
                while (i < n && text.charAt(i) != ',') {
                    i++;
                }
                name.append(text.substring(start, i).trim());
            }
            if (name.length() == 0) {
                throw new IllegalArgumentException("upsertkey has an empty column name: " + text);
            }
            names.add(name.toString());
            if (i >= n) {
                return names;
            }
            if (text.charAt(i) != ',') {
                throw new IllegalArgumentException("upsertkey: expected a comma after a quoted name: " + text);
            }
            i++;
        }
    }
}
