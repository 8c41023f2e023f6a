/*
 * The JVM sink's exceptions and how a SQLException is read (twin of rtm_lakebase/sink/errors.py;
 * what retrying can change about a failure is decided by Outcomes, from the shared table).
 */
package rtm_lakebase.jvm;

import java.sql.BatchUpdateException;
import java.sql.SQLException;
import java.util.Map;

public final class Errors {
    private Errors() { }

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

    /** The server's error behind a batch wrapper (BatchUpdateException keeps it as the next exception). */
    static SQLException root(SQLException e) {
        if (e instanceof BatchUpdateException && e.getNextException() != null) {
            return e.getNextException();
        }
        return e;
    }

    static String sqlState(SQLException e) {
        String s = root(e).getSQLState();
        return s != null ? s : e.getSQLState();
    }

    /** The server's message (the batch's real error, not the batch wrapper), without the secret. */
    static String describe(SQLException e, SinkSettings settings) {
        SQLException r = root(e);
        String message = r.getMessage();
        if (message == null) {
            message = r.getClass().getSimpleName();
        }
        return settings.redact(message);
    }

    static String firstLine(String s) {
        int nl = s.indexOf('\n');
        return nl < 0 ? s : s.substring(0, nl);
    }
}
