/*
 * Per-executor reuse of the JVM sink's Postgres connections (one pool per JVM, shared by every
 * PostgresForeachWriter task of the executor). Under micro-batch a task runs per batch and under
 * real-time mode per long batch; without reuse each of them would connect, negotiate TLS and
 * authenticate again.
 *
 * - Bounded: at most `maxIdle` idle connections per (url, user, password) are kept (system
 *   property rtm.jvm.sink.maxIdle, default 4); a connection given back beyond that is closed.
 *   Connections in use are bounded by the tasks themselves (one per running task).
 * - Validated before use: an idle connection must answer isValid() within 2 s and is rolled
 *   back to a clean transaction state; a dead one is closed and the next one tried.
 * - Closed when the executor stops: a JVM shutdown hook closes every idle connection.
 * - A connection whose task failed is never given back (the caller closes it instead).
 * The pool key holds the password's hash only; no key or connection text is ever logged.
 */
package rtm_lakebase.jvm;

import java.sql.Connection;
import java.sql.Driver;
import java.sql.SQLException;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.function.Supplier;

public final class PgConnector {
    static final int MAX_IDLE = Math.max(0, Integer.getInteger("rtm.jvm.sink.maxIdle", 4));
    private static final int VALIDATE_SECONDS = 2;
    private static final Map<String, ArrayDeque<Connection>> IDLE = new HashMap<>();
    private static long opened;
    private static long reused;

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(PgConnector::closeAll, "pg-jvm-sink-pool-close"));
    }

    private PgConnector() {
    }

    /** The pool key of a target: url, user and the password's hash (never the password). */
    static String key(String url, String user, String password) {
        return url + '\u0000' + user + '\u0000' + (password == null ? "" : Integer.toHexString(password.hashCode()));
    }

    /** An idle connection that still answers, else a new one from `driver` (`props` asked only then). Auto-commit is off. */
    static Connection borrow(String key, Driver driver, String url, Supplier<Properties> props) throws SQLException {
        while (true) {
            Connection idle;
            synchronized (IDLE) {
                ArrayDeque<Connection> q = IDLE.get(key);
                idle = q == null ? null : q.pollFirst();
            }
            if (idle == null) {
                break;
            }
            if (usable(idle)) {
                synchronized (IDLE) {
                    reused++;
                }
                return idle;
            }
            closeQuietly(idle);
        }
        Connection c = driver.connect(url, props.get());
        if (c == null) {
            return null;
        }
        c.setAutoCommit(false);
        synchronized (IDLE) {
            opened++;
        }
        return c;
    }

    private static boolean usable(Connection c) {
        try {
            if (c.isClosed() || !c.isValid(VALIDATE_SECONDS)) {
                return false;
            }
            c.rollback();
            c.setAutoCommit(false);
            return true;
        } catch (SQLException e) {
            return false;
        }
    }

    /** Keep a healthy connection for the next task of this executor, or close it when the pool is full. */
    static void giveBack(String key, Connection c) {
        if (c == null) {
            return;
        }
        try {
            if (c.isClosed()) {
                return;
            }
            c.rollback();
        } catch (SQLException e) {
            closeQuietly(c);
            return;
        }
        synchronized (IDLE) {
            ArrayDeque<Connection> q = IDLE.computeIfAbsent(key, k -> new ArrayDeque<>());
            if (q.size() < MAX_IDLE) {
                q.addFirst(c);
                return;
            }
        }
        closeQuietly(c);
    }

    static void closeQuietly(Connection c) {
        try {
            c.close();
        } catch (SQLException | RuntimeException ignored) {
            // the connection is being dropped anyway
        }
    }

    /** Close every idle connection (the shutdown hook; tests). */
    public static void closeAll() {
        ArrayDeque<Connection> all = new ArrayDeque<>();
        synchronized (IDLE) {
            for (ArrayDeque<Connection> q : IDLE.values()) {
                all.addAll(q);
            }
            IDLE.clear();
        }
        for (Connection c : all) {
            closeQuietly(c);
        }
    }

    /** Idle connections held now, over every target. */
    public static int idleCount() {
        synchronized (IDLE) {
            int n = 0;
            for (ArrayDeque<Connection> q : IDLE.values()) {
                n += q.size();
            }
            return n;
        }
    }

    /** Connections opened by this JVM's sinks so far. */
    public static long openedCount() {
        synchronized (IDLE) {
            return opened;
        }
    }

    /** Times a task got an idle connection instead of opening one. */
    public static long reusedCount() {
        synchronized (IDLE) {
            return reused;
        }
    }
}
