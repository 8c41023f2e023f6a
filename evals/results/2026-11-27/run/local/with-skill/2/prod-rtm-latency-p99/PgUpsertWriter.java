/*
 * A JVM ForeachWriter<Row> that upserts (id bigint, sent_ms bigint, payload text) into Postgres
 * within milliseconds of the row reaching the sink, for a Spark real-time-mode query.
 *
 * Why JVM: under open-source real-time mode a *Python* foreach writer receives rows in pickled
 * batches that are only sent to the Python worker when a 64 KB buffer fills or the long batch
 * ends, i.e. seconds late at ~100 rows/s. A writer that stays in the JVM sees each row as the engine
 * produces it.
 *
 * How it writes: process() puts the row into a buffer (one entry per id; the newer sent_ms wins)
 * and wakes the flusher thread, which immediately takes everything buffered and writes it as ONE
 * statement in ONE transaction (INSERT ... SELECT FROM unnest(arrays) ON CONFLICT (id) DO UPDATE),
 * rows sorted by id. While a flush is in flight new rows accumulate and go in the next one, so the
 * batch size adapts to the rate with no added wait (maxDwellMs = 0) or waits at most maxDwellMs.
 * Replays (at-least-once delivery) are harmless: a row never replaces a stored row with a newer
 * sent_ms, and an identical row is a no-op.
 *
 * Failures: lost connections / restarts / deadlocks are retried with backoff and a reconnect; any
 * other error is kept, logged, and thrown by the next process() or close(), and the task thread is
 * interrupted so the query fails promptly instead of at the end of the long batch. open() never
 * returns false.
 */
package rtmpgsink;

import java.io.Serializable;
import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

public class PgUpsertWriter extends ForeachWriter<Row> implements Serializable {
    private static final long serialVersionUID = 1L;

    private final String url;
    private final String user;
    private final String password;
    private final String quotedTable;
    private final int maxBatchRows;
    private final long maxDwellMs;
    private final int maxRetries;

    private transient Object lock;
    private transient TreeMap<Long, Object[]> buffer;
    private transient long oldestNanos;
    private transient Connection conn;
    private transient Thread flusher;
    private transient Thread taskThread;
    private transient volatile boolean stopping;
    private transient volatile RuntimeException error;
    private transient int idIdx = -1, sentIdx = -1, payloadIdx = -1;
    private transient String sql;

    public PgUpsertWriter(String url, String user, String password, String quotedTable,
                          int maxBatchRows, long maxDwellMs, int maxRetries) {
        if (maxBatchRows < 1 || maxDwellMs < 0 || maxRetries < 0) {
            throw new IllegalArgumentException("maxBatchRows >= 1, maxDwellMs >= 0, maxRetries >= 0");
        }
        this.url = url;
        this.user = user;
        this.password = password;
        this.quotedTable = quotedTable;
        this.maxBatchRows = maxBatchRows;
        this.maxDwellMs = maxDwellMs;
        this.maxRetries = maxRetries;
    }

    /** Factory for py4j: settings as strings. */
    public static PgUpsertWriter create(Map<String, String> o) {
        return new PgUpsertWriter(o.get("url"), o.get("user"), o.get("password"), o.get("table"),
                Integer.parseInt(o.getOrDefault("max_batch_rows", "1000")),
                Long.parseLong(o.getOrDefault("max_dwell_ms", "0")),
                Integer.parseInt(o.getOrDefault("max_retries", "6")));
    }

    @Override
    public String toString() {  // never the password
        return "PgUpsertWriter(" + url + ", table=" + quotedTable + ")";
    }

    /** Connect on the driver once, to fail before the query starts if the target is unreachable. */
    public String check() throws SQLException {
        try (Connection c = connect()) {
            try (java.sql.Statement s = c.createStatement();
                 java.sql.ResultSet r = s.executeQuery("SELECT id, sent_ms, payload FROM " + quotedTable + " LIMIT 0")) {
                return "ok";
            }
        }
    }

    private Connection connect() throws SQLException {
        Properties p = new Properties();
        if (user != null) p.setProperty("user", user);
        if (password != null) p.setProperty("password", password);
        p.setProperty("ApplicationName", "rtm-jvm-upsert-sink");
        p.setProperty("tcpKeepAlive", "true");
        p.setProperty("connectTimeout", "10");
        p.setProperty("socketTimeout", "60");
        // the driver class is loaded by the same class loader as this class (no DriverManager lookup)
        Connection c = new org.postgresql.Driver().connect(url, p);
        if (c == null) throw new SQLException("the JDBC URL was not accepted: " + url, "08001");
        c.setAutoCommit(false);
        return c;
    }

    private void connectWithRetries() {
        int attempt = 0;
        while (true) {
            try {
                conn = connect();
                return;
            } catch (SQLException e) {
                attempt++;
                String state = e.getSQLState() == null ? "" : e.getSQLState();
                boolean permanent = state.startsWith("28") || state.equals("3D000") || state.equals("42501");
                if (permanent || attempt > maxRetries) {
                    throw new RuntimeException("cannot connect to " + url + " after " + attempt
                            + " attempt(s): " + e.getMessage() + " [SQLSTATE " + state + "]");
                }
                backoff(attempt);
            }
        }
    }

    private void backoff(int attempt) {
        long ms = Math.min(5000L, 250L << Math.min(attempt - 1, 10));
        ms = ms / 2 + ThreadLocalRandom.current().nextLong(ms / 2 + 1);
        try {
            Thread.sleep(ms);
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public boolean open(long partitionId, long epochId) {
        lock = new Object();
        buffer = new TreeMap<>();
        oldestNanos = -1;
        stopping = false;
        error = null;
        taskThread = Thread.currentThread();
        idIdx = -1;   // transient fields are 0 after deserialization, not their declared value
        sentIdx = -1;
        payloadIdx = -1;
        sql = "INSERT INTO " + quotedTable + " AS t (id, sent_ms, payload) "
                + "SELECT u.id, u.sent_ms, u.payload FROM unnest(?::bigint[], ?::bigint[], ?::text[]) "
                + "AS u(id, sent_ms, payload) "
                + "ON CONFLICT (id) DO UPDATE SET sent_ms = EXCLUDED.sent_ms, payload = EXCLUDED.payload "
                + "WHERE (t.sent_ms IS NULL OR t.sent_ms <= EXCLUDED.sent_ms) "
                + "AND (t.sent_ms, t.payload) IS DISTINCT FROM (EXCLUDED.sent_ms, EXCLUDED.payload)";
        connectWithRetries();   // throws on failure: never return false (Spark would drop the rows)
        flusher = new Thread(this::runFlusher, "pg-upsert-flusher-" + partitionId);
        flusher.setDaemon(true);
        flusher.start();
        return true;
    }

    @Override
    public void process(Row row) {
        if (idIdx < 0) {
            idIdx = row.fieldIndex("id");
            sentIdx = row.fieldIndex("sent_ms");
            payloadIdx = row.fieldIndex("payload");
        }
        if (row.isNullAt(idIdx)) {
            throw new IllegalArgumentException("row with a null id (sent_ms="
                    + (row.isNullAt(sentIdx) ? "null" : row.getLong(sentIdx)) + ")");
        }
        long id = row.getLong(idIdx);
        Long sent = row.isNullAt(sentIdx) ? null : row.getLong(sentIdx);
        String payload = row.isNullAt(payloadIdx) ? null : row.getString(payloadIdx);
        synchronized (lock) {
            if (error != null) throw error;
            Object[] old = buffer.get(id);
            // newest sent_ms wins inside a flush too (a null sent_ms never displaces a row)
            if (old == null || (sent != null && (old[1] == null || (Long) old[1] <= sent))) {
                buffer.put(id, new Object[] {id, sent, payload});
            }
            if (oldestNanos < 0) oldestNanos = System.nanoTime();
            lock.notifyAll();
            while (buffer.size() >= 4 * maxBatchRows && error == null) {   // back-pressure
                try {
                    lock.wait(50);
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    throw new RuntimeException("interrupted while waiting for the sink", ie);
                }
            }
            if (error != null) throw error;
        }
    }

    private void runFlusher() {
        while (true) {
            List<Object[]> batch;
            synchronized (lock) {
                while (!stopping && error == null && !due()) {
                    try {
                        if (buffer.isEmpty() || maxDwellMs == 0) {
                            lock.wait(buffer.isEmpty() ? 1000 : 1);
                        } else {
                            long waitNs = oldestNanos + TimeUnit.MILLISECONDS.toNanos(maxDwellMs) - System.nanoTime();
                            TimeUnit.NANOSECONDS.timedWait(lock, Math.max(waitNs, 1000));
                        }
                    } catch (InterruptedException ie) {
                        return;
                    }
                }
                if (error != null || (stopping && buffer.isEmpty())) return;
                if (stopping && !due() && buffer.isEmpty()) return;
                batch = take();
                lock.notifyAll();
            }
            if (batch.isEmpty()) {
                if (stopping) return;
                continue;
            }
            try {
                write(batch);
            } catch (RuntimeException e) {
                synchronized (lock) {
                    error = e;
                    lock.notifyAll();
                }
                System.err.println("ERROR rtm pg upsert sink: flush failed, the task fails: " + e.getMessage());
                Thread t = taskThread;
                if (t != null && !stopping) t.interrupt();   // fail the task now, not at the batch end
                return;
            }
        }
    }

    /** Something to write now? (caller holds the lock) */
    private boolean due() {
        if (buffer.isEmpty()) return false;
        if (stopping || maxDwellMs == 0 || buffer.size() >= maxBatchRows) return true;
        return System.nanoTime() - oldestNanos >= TimeUnit.MILLISECONDS.toNanos(maxDwellMs);
    }

    /** Take up to maxBatchRows buffered rows in id order (caller holds the lock). */
    private List<Object[]> take() {
        List<Object[]> out = new ArrayList<>(Math.min(buffer.size(), maxBatchRows));
        while (!buffer.isEmpty() && out.size() < maxBatchRows) {
            out.add(buffer.pollFirstEntry().getValue());
        }
        oldestNanos = buffer.isEmpty() ? -1 : System.nanoTime();
        return out;
    }

    private void write(List<Object[]> rows) {
        Long[] ids = new Long[rows.size()];
        Long[] sents = new Long[rows.size()];
        String[] payloads = new String[rows.size()];
        for (int i = 0; i < rows.size(); i++) {
            Object[] r = rows.get(i);
            ids[i] = (Long) r[0];
            sents[i] = (Long) r[1];
            payloads[i] = (String) r[2];
        }
        int attempt = 0;
        while (true) {
            try {
                if (conn == null || conn.isClosed()) connectWithRetries();
                Array a1 = conn.createArrayOf("bigint", ids);
                Array a2 = conn.createArrayOf("bigint", sents);
                Array a3 = conn.createArrayOf("text", payloads);
                try (PreparedStatement ps = conn.prepareStatement(sql)) {
                    ps.setArray(1, a1);
                    ps.setArray(2, a2);
                    ps.setArray(3, a3);
                    ps.executeUpdate();
                }
                conn.commit();
                return;
            } catch (SQLException e) {
                String state = e.getSQLState() == null ? "" : e.getSQLState();
                try {
                    if (conn != null && !conn.isClosed()) conn.rollback();
                } catch (SQLException ignored) {
                    closeQuietly();
                }
                boolean sameConn = state.equals("40001") || state.equals("40P01");
                boolean reconnect = state.startsWith("08") || state.startsWith("57P") || state.equals("25006")
                        || state.equals("40003") || state.isEmpty();
                if ((sameConn || reconnect) && attempt < maxRetries && !stopping) {
                    attempt++;
                    if (reconnect) closeQuietly();
                    backoff(attempt);
                    continue;
                }
                throw new RuntimeException("flush of " + rows.size() + " rows to " + quotedTable + " failed: "
                        + e.getMessage() + " [SQLSTATE " + state + "]");
            }
        }
    }

    private void closeQuietly() {
        if (conn != null) {
            try {
                conn.close();
            } catch (SQLException ignored) {
                // already broken
            }
            conn = null;
        }
    }

    @Override
    public void close(Throwable errorOrNull) {
        if (lock == null) return;   // open() failed before anything was set up
        try {
            synchronized (lock) {
                if (errorOrNull != null) buffer.clear();   // Spark replays the epoch
                stopping = true;
                lock.notifyAll();
            }
            if (flusher != null) {
                try {
                    flusher.join();
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                }
            }
            Thread.interrupted();   // clear an interrupt the flusher may have sent
            if (errorOrNull == null && error != null) throw error;
        } finally {
            closeQuietly();
            taskThread = null;
        }
    }
}
