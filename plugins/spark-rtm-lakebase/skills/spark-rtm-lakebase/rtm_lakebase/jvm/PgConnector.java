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
 * - Aged out: a connection older than its age limit is closed instead of being reused, so a login
 *   with a fresh password or OAuth token happens at least that often; a sweep every 30 s closes idle
 *   ones past that age even when no task comes to take them. The limit is the sink's
 *   connection_max_age_s option (default 1800 s; 0 switches reuse off) shortened by a random 0-10 %
 *   drawn when the connection opens (as the Python pool does; psycopg_pool shortens max_lifetime by
 *   up to 5 %), so the connections of a query do not all log in again at the same moment.
 * - Closed when the executor stops: a JVM shutdown hook closes every idle connection.
 * - A connection whose task failed is never given back (the caller closes it instead).
 * The pool key is a keyed hash (HMAC-SHA256, a random key per JVM) of url, user and password: it
 * holds no secret and cannot be tested against guessed passwords; no key or connection text is logged.
 */
package rtm_lakebase.jvm;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.SecureRandom;
import java.sql.Connection;
import java.sql.Driver;
import java.sql.SQLException;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.Properties;
import java.util.HexFormat;
import java.util.WeakHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.Supplier;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

public final class PgConnector {
    static final int MAX_IDLE = Math.max(0, Integer.getInteger("rtm.jvm.sink.maxIdle", 4));
    private static final int VALIDATE_SECONDS = 2;
    static final long SWEEP_MS = 30_000;
    private static final Map<String, ArrayDeque<Idle>> IDLE = new HashMap<>();
    /** Age limits are shortened by up to this fraction, drawn per connection. */
    static final double AGE_JITTER = 0.10;
    private static final byte[] KEY_SECRET = new byte[32];
    /** Each connection this pool opened: when (System.nanoTime) and its age-limit factor; weak, so a closed one is forgotten. */
    private static final Map<Connection, Birth> BORN = new WeakHashMap<>();
    private static long opened;
    private static long reused;
    private static Thread sweeper;

    private record Birth(long nanos, double ageFactor) { }

    /** An idle connection, with the birth time and its age limit (the sink's, jittered). */
    private record Idle(Connection connection, long bornNanos, long maxAgeNanos) {
        boolean tooOld(long now) {
            return now - bornNanos >= maxAgeNanos;
        }
    }

    static {
        new SecureRandom().nextBytes(KEY_SECRET);
        Runtime.getRuntime().addShutdownHook(new Thread(PgConnector::closeAll, "pg-jvm-sink-pool-close"));
    }

    private PgConnector() {
    }

    /** The pool key of a target: HMAC-SHA256 of url, user and password under this JVM's random key. */
    public static String key(String url, String user, String password) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(KEY_SECRET, "HmacSHA256"));
            for (String part : new String[] {url, user, password}) {
                mac.update((part == null ? "\u0001" : part + "\u0000").getBytes(StandardCharsets.UTF_8));
            }
            return HexFormat.of().formatHex(mac.doFinal());
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is not available in this JVM", e);
        }
    }

    /**
     * An idle connection younger than `maxAgeMs` that still answers, else a new one from `driver`
     * (`props` asked only then). Auto-commit is off.
     */
    static Connection borrow(String key, long maxAgeMs, Driver driver, String url, Supplier<Properties> props)
            throws SQLException {
        while (true) {
            Idle idle;
            synchronized (IDLE) {
                ArrayDeque<Idle> q = IDLE.get(key);
                idle = q == null ? null : q.pollFirst();
            }
            if (idle == null) {
                break;
            }
            long now = System.nanoTime();
            if (!idle.tooOld(now) && now - idle.bornNanos() < ageLimit(idle.connection(), maxAgeMs)
                    && usable(idle.connection())) {
                synchronized (IDLE) {
                    reused++;
                }
                return idle.connection();
            }
            closeQuietly(idle.connection());
        }
        Connection c = driver.connect(url, props.get());
        if (c == null) {
            return null;
        }
        c.setAutoCommit(false);
        synchronized (IDLE) {
            opened++;
            BORN.put(c, new Birth(System.nanoTime(), 1 - ThreadLocalRandom.current().nextDouble(0, AGE_JITTER)));
        }
        return c;
    }

    /** The age limit of `c`: the sink's `maxAgeMs` times the factor drawn when it was opened. */
    private static long ageLimit(Connection c, long maxAgeMs) {
        synchronized (IDLE) {
            Birth born = BORN.get(c);
            return (long) (Math.max(0, maxAgeMs) * 1_000_000L * (born == null ? 1.0 : born.ageFactor()));
        }
    }

    /** The age limits of the idle connections now held, in milliseconds (tests). */
    public static long[] idleAgeLimitsMs() {
        synchronized (IDLE) {
            return IDLE.values().stream().flatMap(ArrayDeque::stream).mapToLong(i -> i.maxAgeNanos() / 1_000_000L)
                .toArray();
        }
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

    /**
     * Keep a healthy connection for the next task of this executor, or close it when the pool is
     * full or it was opened `maxAgeMs` or more ago.
     */
    static void giveBack(String key, long maxAgeMs, Connection c) {
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
        long now = System.nanoTime();
        synchronized (IDLE) {
            Birth born = BORN.get(c);
            Idle idle = new Idle(c, born == null ? now : born.nanos(), ageLimit(c, maxAgeMs));
            ArrayDeque<Idle> q = IDLE.computeIfAbsent(key, k -> new ArrayDeque<>());
            if (!idle.tooOld(now) && q.size() < MAX_IDLE) {
                q.addFirst(idle);
                startSweeper();
                return;
            }
        }
        closeQuietly(c);
    }

    /** Close idle connections past their age limit (the sweeper every SWEEP_MS; tests). */
    public static int sweep() {
        ArrayDeque<Connection> old = new ArrayDeque<>();
        long now = System.nanoTime();
        synchronized (IDLE) {
            for (ArrayDeque<Idle> q : IDLE.values()) {
                for (Iterator<Idle> it = q.iterator(); it.hasNext(); ) {
                    Idle idle = it.next();
                    if (idle.tooOld(now)) {
                        it.remove();
                        old.add(idle.connection());
                    }
                }
            }
            IDLE.values().removeIf(ArrayDeque::isEmpty);
        }
        for (Connection c : old) {
            closeQuietly(c);
        }
        return old.size();
    }

    private static void startSweeper() {  // called holding IDLE
        if (sweeper != null) {
            return;
        }
        sweeper = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(SWEEP_MS);
                } catch (InterruptedException e) {
                    return;
                }
                sweep();
            }
        }, "pg-jvm-sink-pool-sweep");
        sweeper.setDaemon(true);
        sweeper.start();
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
            for (ArrayDeque<Idle> q : IDLE.values()) {
                for (Idle idle : q) {
                    all.add(idle.connection());
                }
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
            for (ArrayDeque<Idle> q : IDLE.values()) {
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
