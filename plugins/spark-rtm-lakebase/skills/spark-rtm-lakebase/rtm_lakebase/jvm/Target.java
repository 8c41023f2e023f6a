/*
 * The table one task writes to (twin of rtm_lakebase/sink/target.py): its connection (from the
 * executor's pool, PgConnector), its columns and key, the statement for the written columns, and
 * writing one batch as one transaction, retrying what retrying can change (Outcomes, from the shared
 * table) with bounded, jittered backoff.
 *
 * A permanent failure at connect (wrong password, unknown database, TLS refused) fails at once. A
 * lost connection is re-opened and the flush retried; upserts and insert-ignore make the retry
 * harmless. A data error or a statement timeout is explained by Diagnosis (the row and column).
 * cancel() (the task failed) stops a running statement or COPY and any retry at once.
 */
package rtm_lakebase.jvm;

import java.sql.Connection;
import java.sql.Driver;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.ZoneId;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import rtm_lakebase.jvm.Errors.PostgresSinkException;

final class Target {
    private static final Logger LOG = LoggerFactory.getLogger(Target.class);
    static final String DRIVER_CLASS = "org.postgresql.Driver";
    static final String DRIVER_MAVEN = "org.postgresql:postgresql:42.7.13";

    final SinkSettings settings;
    final SinkMetrics metrics;
    final ZoneId sessionZone = PgBinder.sessionZone();
    final Diagnosis diagnosis = new Diagnosis(this);
    private Connection conn;                 // used by one thread at a time: open(), then the flusher
    private PgPasswordProvider provider;
    LinkedHashMap<String, PgColumnTypes.Column> tableColumns;
    final List<String> keyColumns = new ArrayList<>();
    private boolean foldUnicode = true;      // citext: lower() folds more than A-Z here
    // -- the layout of the written rows (prepare) --
    String[] columns;
    PgColumnTypes.Column[] columnTypes;      // of `columns`, in order
    int[] keyIndex;                          // null: append
    int[] keyForm;
    int versionIndex = -1;
    String statement;
    private String copyStatement;            // mode=append when every column is COPY-safe, else null
    // -- cancelling --
    private volatile boolean cancelled;
    private volatile Object running;         // the Statement (or, for COPY, the Connection) now running

    Target(SinkSettings settings, SinkMetrics metrics) {
        this.settings = settings;
        this.metrics = metrics;
        for (String k : settings.keyColumns) {
            keyColumns.add(PgColumnTypes.pgName(k));
        }
    }

    // -- open / close -------------------------------------------------------------------------------

    /** Connect (with retries) and read the table's columns and key. */
    void open() {
        try {
            withRetries(() -> connect(), "open", null);
        } catch (RuntimeException e) {
            close(false);
            throw e;
        }
    }

    /** Close the connection, or with `keep` give it to the executor's pool for the next task. */
    void close(boolean keep) {
        Connection c = conn;
        conn = null;
        if (c == null) {
            return;
        }
        if (keep) {
            PgConnector.giveBack(poolKey(), settings.connectionMaxAgeMs, c);
            return;
        }
        try {
            c.close();
        } catch (SQLException e) {
            LOG.debug("ignoring an error while closing the connection: {}", settings.redact(e.getMessage()));
        }
    }

    /** The task failed: stop the running statement (or COPY) and any retry now; nothing more is written. */
    void cancel() {
        cancelled = true;
        Object r = running;
        try {
            if (r instanceof Statement) {
                ((Statement) r).cancel();
            } else if (r instanceof Connection) {  // COPY: pgjdbc's PGConnection.cancelQuery(), by reflection
                Connection c = (Connection) r;
                Object pg = c.unwrap(Class.forName("org.postgresql.PGConnection", false, c.getClass().getClassLoader()));
                pg.getClass().getMethod("cancelQuery").invoke(pg);
            }
        } catch (SQLException | ReflectiveOperationException | RuntimeException e) {
            LOG.debug("could not cancel the running statement: {}", settings.redact(String.valueOf(e.getMessage())));
        }
    }

    private Driver driver() {
        ClassLoader[] loaders = {Thread.currentThread().getContextClassLoader(), Target.class.getClassLoader()};
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

    /** The open connection (a new or pooled one when there is none) with the table described. */
    private Connection connect() throws SQLException {
        if (conn == null || conn.isClosed()) {
            Connection c;
            try {
                c = PgConnector.borrow(poolKey(), settings.connectionMaxAgeMs, driver(), settings.url, () -> {
                    Properties props = new Properties();  // built only when a new connection is opened
                    if (settings.user != null) {
                        props.setProperty("user", settings.user);
                    }
                    String secret = settings.password != null ? settings.password : providedPassword();
                    if (secret != null) {
                        props.setProperty("password", secret);
                    }
                    return props;
                });
            } catch (SQLException e) {
                throw new ConnectFailure(e);
            }
            if (c == null) {
                throw new PostgresSinkException("the JDBC driver does not accept the url " + settings.redact(settings.url));
            }
            conn = c;
        }
        if (tableColumns == null) {
            describe();
        }
        return conn;
    }

    /** A failure of the login itself (not of a statement on an open connection). */
    private static final class ConnectFailure extends SQLException {
        private static final long serialVersionUID = 1L;

        ConnectFailure(SQLException e) {
            super(e.getMessage(), e.getSQLState(), e.getErrorCode(), e);
        }
    }

    private void describe() throws SQLException {
        String target = settings.target();
        LinkedHashMap<String, PgColumnTypes.Column> found = PgColumnTypes.describe(conn, settings.table, settings.schema);
        if (found.isEmpty()) {
            conn.rollback();
            throw new PostgresSinkException("table " + target + (settings.schema == null ? " (in the current schema)" : "")
                + " not found; create it first (table is read as SQL reads it: schema.table, \"Quoted.Name\")");
        }
        if (!settings.mode.equals("append") && keyColumns.isEmpty()) {
            keyColumns.addAll(Statements.primaryKey(conn, settings.table, settings.schema));
            if (keyColumns.isEmpty()) {
                conn.rollback();
                throw new PostgresSinkException("table " + target + " has no primary key: set key_columns (mode="
                    + settings.mode + " needs a unique key for ON CONFLICT)");
            }
        }
        for (String k : keyColumns) {
            PgColumnTypes.Column c = found.get(k);
            if (c != null && c.baseType.equals("citext")) {
                foldUnicode = Statements.foldsUnicode(conn);
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
        if (settings.versionColumn != null && !found.containsKey(PgColumnTypes.pgName(settings.versionColumn))) {
            missing.add(settings.versionColumn);
        }
        if (!missing.isEmpty()) {
            throw new PostgresSinkException("column(s) " + missing + " not in table " + target
                + "; table columns: " + found.keySet());
        }
        tableColumns = found;
    }

    /** url, user and the password (keyed-hashed by the pool); with a provider its class name. */
    private String poolKey() {
        return PgConnector.key(settings.url, settings.user,
            settings.passwordProvider != null ? "provider:" + settings.passwordProvider : settings.password);
    }

    /** The provider's password for this (re)connect; a failure is one line naming the class, never a secret. */
    private String providedPassword() {
        if (settings.passwordProvider == null) {
            return null;
        }
        if (provider == null) {
            provider = PgPasswordProvider.load(settings.passwordProvider);
        }
        String secret;
        try {
            secret = provider.password();
        } catch (RuntimeException e) {
            throw new PostgresSinkException("password_provider " + settings.passwordProvider + " failed: "
                + e.getClass().getName() + " (its message is not shown: it may hold a secret)");
        }
        if (secret == null || secret.isEmpty()) {
            throw new PostgresSinkException("password_provider " + settings.passwordProvider + " returned no password");
        }
        return secret;
    }

    // -- the layout, on the first row -----------------------------------------------------------------

    /** Check the row's fields against the table and build the statement for them. */
    void prepare(StructType rowSchema) {
        String target = settings.target();
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
            if (!Statements.supported(fields[i].dataType())) {
                throw new PostgresSinkException("column " + cols[i] + " has Spark type "
                    + fields[i].dataType().simpleString() + ", which the JVM sink does not write; cast it "
                    + "(e.g. to_json(col) into a jsonb/text column)");
            }
            if (!tableColumns.containsKey(cols[i])) {
                unknown.add(cols[i]);
            }
        }
        if (!unknown.isEmpty()) {
            throw new PostgresSinkException("column(s) " + unknown + " not in table " + target
                + "; table columns: " + tableColumns.keySet());
        }
        PgColumnTypes.Column[] types = new PgColumnTypes.Column[cols.length];
        List<String> fixed = new ArrayList<>();
        for (int i = 0; i < cols.length; i++) {
            types[i] = tableColumns.get(cols[i]);
            if (!types[i].notWritable.isEmpty()) {
                fixed.add(cols[i] + " (" + types[i].notWritable + ")");
            }
        }
        if (!fixed.isEmpty()) {
            throw new PostgresSinkException("column(s) " + fixed + " of " + target + " cannot be written (a plain "
                + "INSERT refuses them too): leave them out of the rows; Postgres fills them");
        }
        List<String> colList = Arrays.asList(cols);
        if (!settings.mode.equals("append")) {
            List<String> missing = new ArrayList<>();
            for (String k : keyColumns) {
                if (!colList.contains(k)) {
                    missing.add(k);
                }
            }
            if (!missing.isEmpty()) {
                throw new PostgresSinkException("key column(s) " + missing + " are not among the written columns "
                    + colList);
            }
            keyIndex = new int[keyColumns.size()];
            keyForm = new int[keyIndex.length];
            for (int i = 0; i < keyIndex.length; i++) {
                keyIndex[i] = colList.indexOf(keyColumns.get(i));
                keyForm[i] = RowBuffer.keyForm(tableColumns.get(keyColumns.get(i)).baseType, foldUnicode);
            }
        }
        if (settings.versionColumn != null) {
            versionIndex = colList.indexOf(PgColumnTypes.pgName(settings.versionColumn));
            if (versionIndex < 0) {
                throw new PostgresSinkException("version_column " + settings.versionColumn
                    + " is not among the written columns " + colList);
            }
        }
        columnTypes = types;
        columns = cols;
        statement = Statements.write(target, settings.mode, colList, keyColumns, tableColumns,
            settings.versionColumn, settings.skipUnchanged);
        copyStatement = null;
        if (settings.mode.equals("append") && settings.appendCopy) {
            boolean safe = true;
            for (int i = 0; i < cols.length; i++) {
                safe &= PgCopy.copySafe(fields[i].dataType(), types[i]);
            }
            copyStatement = safe ? PgCopy.sql(target, Statements.quotedList(colList)) : null;
        }
    }

    /** A buffer for rows of the prepared layout. */
    RowBuffer newBuffer() {
        return new RowBuffer(keyIndex, keyForm, versionIndex, settings.mode.equals("insert_ignore"),
            diagnosis::nullKey);
    }

    Object[] values(Row row) {
        Object[] values = new Object[columns.length];
        for (int i = 0; i < values.length; i++) {
            values[i] = PgBinder.fromSpark(row.get(i));
        }
        return values;
    }

    // -- writing -------------------------------------------------------------------------------------

    /** Write one batch as one transaction (retrying what can be retried); returns the rows written. */
    int write(List<Object[]> batch) {
        return withRetries(() -> writeOnce(batch), "flush", batch);
    }

    private int writeOnce(List<Object[]> batch) throws SQLException {
        Connection c = connect();
        try {
            if (copyStatement != null) {
                long copied = run(c, () -> PgCopy.copyIn(c, copyStatement, PgCopy.text(batch, columnTypes, sessionZone)));
                c.commit();
                metrics.copyFlushes++;
                return (int) copied;
            }
            try (PreparedStatement ps = c.prepareStatement(statement)) {
                for (Object[] values : batch) {
                    try {
                        PgBinder.bind(ps, values, columnTypes, sessionZone);
                    } catch (ClassCastException | IllegalArgumentException | ArithmeticException e) {
                        throw new EncodeFailure(e);
                    }
                    ps.addBatch();
                }
                int[] counts = run(ps, ps::executeBatch);
                c.commit();
                int written = 0;
                for (int n : counts) {
                    written += n == Statement.SUCCESS_NO_INFO ? 1 : Math.max(n, 0);
                }
                return written;
            }
        } catch (SQLException e) {
            rollbackQuietly();
            throw e;
        }
    }

    /** A value the driver could not send (no SQLSTATE; the table's client kind cannot_encode). */
    private static final class EncodeFailure extends SQLException {
        private static final long serialVersionUID = 1L;

        EncodeFailure(RuntimeException e) {
            super(e.getClass().getSimpleName() + ": " + e.getMessage(), (String) null, e);
        }
    }

    interface SqlAction<T> {
        T run() throws SQLException;
    }

    /** Run `action` on `what` (a Statement, or the Connection for COPY) so that cancel() can stop it. */
    <T> T run(Object what, SqlAction<T> action) throws SQLException {
        running = what;
        try {
            if (cancelled) {
                throw new Cancelled();
            }
            return action.run();
        } finally {
            running = null;
        }
    }

    private static final class Cancelled extends RuntimeException {
        private static final long serialVersionUID = 1L;
    }

    void rollbackQuietly() {
        try {
            if (conn != null && !conn.isClosed()) {
                conn.rollback();
            }
        } catch (SQLException e) {
            LOG.debug("ignoring a failed rollback: {}", settings.redact(e.getMessage()));
        }
    }

    private PostgresSinkException cancelledError(String what) {
        return new PostgresSinkException(what + " on " + settings.target() + " cancelled: the task failed "
            + "(its rows are written again when Spark replays them)");
    }

    /** Run `action`; retry what retrying can change (Outcomes), explain the rest. */
    private <T> T withRetries(SqlAction<T> action, String what, List<Object[]> batch) {
        int attempt = 0;
        long started = System.nanoTime();
        while (true) {
            if (cancelled) {
                throw cancelledError(what);
            }
            long began = System.nanoTime();
            try {
                return action.run();
            } catch (Cancelled e) {
                throw cancelledError(what);
            } catch (SQLException e) {
                if (cancelled) {
                    throw cancelledError(what);
                }
                boolean connecting = e instanceof ConnectFailure;
                SQLException cause = connecting ? (SQLException) e.getCause() : e;
                Outcomes.Outcome outcome = Outcomes.classify(cause, connecting);
                String state = Errors.sqlState(cause);
                if (outcome.retried() && attempt < settings.maxRetries) {
                    attempt++;
                    long cap = Math.min(settings.backoffMaxMs, settings.backoffInitialMs << Math.min(attempt - 1, 30));
                    long delay = cap / 2 + (cap > 1 ? ThreadLocalRandom.current().nextLong(cap / 2 + 1) : 0);
                    LOG.warn("postgres JVM sink {}: {} (attempt {} of {}), retrying in {} ms: {}", what,
                        outcome.description, attempt, settings.maxRetries, delay, Errors.describe(cause, settings));
                    rollbackQuietly();
                    if (outcome == Outcomes.Outcome.RECONNECT) {
                        close(false);
                    }
                    metrics.retries++;
                    try {
                        Thread.sleep(delay);
                    } catch (InterruptedException ie) {
                        if (cancelled) {
                            throw cancelledError(what);
                        }
                        Thread.currentThread().interrupt();
                        throw new PostgresSinkException(what + " interrupted while retrying: "
                            + Errors.describe(cause, settings), state);
                    }
                    continue;
                }
                if (outcome == Outcomes.Outcome.RECONNECT) {
                    close(false);
                    throw new PostgresSinkException(what + " failed after " + (attempt + 1) + " attempts in "
                        + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started) + " ms ("
                        + settings.redact(settings.url) + "): " + Errors.describe(cause, settings), state);
                }
                if (connecting) {  // wrong password, unknown database, TLS refused: retrying cannot help
                    close(false);
                    throw new PostgresSinkException("cannot connect to Postgres (" + settings.redact(settings.url)
                        + ", user=" + settings.user + "): " + Errors.describe(cause, settings), state);
                }
                if (outcome == Outcomes.Outcome.RETRY) {
                    throw new PostgresSinkException(what + " to " + settings.target() + " still hit a "
                        + outcome.description + " after " + (attempt + 1) + " attempts: "
                        + Errors.describe(cause, settings), state);
                }
                if (batch != null && outcome.diagnosed()) {
                    long budget = outcome == Outcomes.Outcome.TIMEOUT ? System.nanoTime() - began : -1;
                    throw diagnosis.explain(conn, batch, cause, budget);
                }
                String prefix = what.equals("open") ? "cannot read table " + settings.target()
                    : "flush to " + settings.target() + " failed (not retried)";
                throw new PostgresSinkException(prefix + " (" + settings.redact(settings.url) + ", user="
                    + settings.user + "): " + Errors.describe(cause, settings), state);
            }
        }
    }
}
