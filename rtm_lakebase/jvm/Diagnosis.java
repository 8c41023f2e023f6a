/*
 * Why a flush failed, named down to the row and column (twin of rtm_lakebase/sink/diagnosis.py).
 * The batch is replayed row by row in a transaction that is always rolled back; the first row that
 * fails alone is the bad row, and its column is the one the server names, else the one value that
 * fails alone in a constraint-free temporary copy of the table. For a statement timeout the search
 * gets the flush's own time, no more.
 */
package rtm_lakebase.jvm;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import rtm_lakebase.jvm.Errors.BadRowException;
import rtm_lakebase.jvm.Errors.PostgresSinkException;

final class Diagnosis {
    private final Target target;

    Diagnosis(Target target) {
        this.target = target;
    }

    /**
     * The first row of `batch` that fails alone. With `budgetNanos` >= 0 (a timeout) the search gets
     * that much time (each row's statement_timeout is what is left) and a row that alone takes half
     * of it is named; else the search runs to the end.
     */
    PostgresSinkException explain(Connection conn, List<Object[]> batch, SQLException failure, long budgetNanos) {
        SinkSettings s = target.settings;
        String state = Errors.sqlState(failure);
        long deadline = budgetNanos < 0 ? Long.MAX_VALUE : System.nanoTime() + budgetNanos;
        try {
            if (conn == null) {
                throw new PostgresSinkException("the connection is closed");
            }
            try (PreparedStatement ps = conn.prepareStatement(target.statement);
                 PreparedStatement limit = conn.prepareStatement("SELECT set_config('statement_timeout', ?, true)")) {
                for (Object[] values : batch) {
                    if (budgetNanos >= 0) {
                        long leftMs = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
                        if (leftMs <= 0) {
                            break;
                        }
                        limit.setString(1, Long.toString(leftMs));
                        target.run(limit, limit::execute);
                    }
                    Savepoint sp = conn.setSavepoint();
                    long started = System.nanoTime();
                    try {
                        PgBinder.bind(ps, values, target.columnTypes, target.sessionZone);
                        target.run(ps, ps::executeUpdate);
                        conn.releaseSavepoint(sp);
                    } catch (SQLException | RuntimeException rowError) {
                        Outcomes.Outcome outcome = Outcomes.classify(rowError, false);
                        if (outcome == Outcomes.Outcome.TIMEOUT && budgetNanos >= 0) {
                            if (System.nanoTime() - started < budgetNanos / 2) {
                                break;  // the flush's time ran out here, not because of this row
                            }
                            return badRow(values, null, rowError, "this row alone did not finish within the flush's "
                                + "time (" + TimeUnit.NANOSECONDS.toMillis(budgetNanos) + " ms, statement_timeout "
                                + "or a lock held by another session); not retried");
                        }
                        if (outcome != Outcomes.Outcome.BAD_ROW) {
                            throw rowError;
                        }
                        conn.rollback(sp);
                        String column = rowError instanceof SQLException ? serverColumn((SQLException) rowError) : null;
                        if (column == null) {
                            column = findColumn(conn, values);
                        }
                        return badRow(values, column, rowError, null);
                    }
                }
            } finally {
                target.rollbackQuietly();
            }
        } catch (SQLException | RuntimeException diagnosisError) {
            String message = diagnosisError instanceof SQLException
                ? Errors.describe((SQLException) diagnosisError, s) : String.valueOf(diagnosisError.getMessage());
            return new PostgresSinkException("flush to " + s.target() + " failed: " + Errors.describe(failure, s)
                + " (finding the row failed: " + s.redact(message) + "); nothing of this flush was written", state);
        }
        if (budgetNanos >= 0) {
            return new PostgresSinkException("flush to " + s.target() + " of " + batch.size() + " rows ran past the "
                + "statement timeout (" + Errors.describe(failure, s) + ") and no single row does alone; not retried: "
                + "lower max_batch_rows or raise statement_timeout; nothing of this flush was written", state);
        }
        return new PostgresSinkException("flush to " + s.target() + " failed but no single row fails alone: "
            + Errors.describe(failure, s) + (state != null ? " [SQLSTATE " + state + "]" : "")
            + "; nothing of this flush was written", state);
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
    private String findColumn(Connection conn, Object[] values) throws SQLException {
        Savepoint outer = conn.setSavepoint();
        try (Statement st = conn.createStatement()) {
            st.execute(Statements.probeTable(target.settings.target()));
            for (int i = 0; i < target.columns.length; i++) {
                if (values[i] == null) {
                    continue;
                }
                Savepoint sp = conn.setSavepoint();
                try (PreparedStatement ps = conn.prepareStatement(
                        Statements.probeInsert(target.columns[i], target.columnTypes[i]))) {
                    PgBinder.bindOne(ps, 1, values[i], target.columnTypes[i], target.sessionZone);
                    target.run(ps, ps::executeUpdate);
                    conn.releaseSavepoint(sp);
                } catch (SQLException | RuntimeException e) {
                    if (Outcomes.classify(e, false) == Outcomes.Outcome.BAD_ROW) {
                        return target.columns[i];
                    }
                    throw e;
                }
            }
            return null;
        } finally {
            conn.rollback(outer);
        }
    }

    private Map<String, Object> keyOf(Object[] values) {
        Map<String, Object> key = new LinkedHashMap<>();
        if (target.keyIndex != null) {
            for (int i = 0; i < target.keyIndex.length; i++) {
                key.put(target.keyColumns.get(i), values[target.keyIndex[i]]);
            }
        }
        return key;
    }

    private BadRowException badRow(Object[] values, String column, Throwable e, String detail) {
        SinkSettings s = target.settings;
        Map<String, Object> key = keyOf(values);
        String keyText = key.isEmpty() ? "row " + rowText(values) : "row with key " + pairs(key);
        String type = "";
        if (column != null && target.tableColumns.containsKey(column)) {
            type = " (" + target.tableColumns.get(column).fullType + ")";
        }
        String state = e instanceof SQLException ? Errors.sqlState((SQLException) e) : null;
        String reason = detail != null ? detail : e instanceof SQLException
            ? Errors.firstLine(Errors.describe((SQLException) e, s))
            : e.getClass().getSimpleName() + ": " + Errors.firstLine(s.redact(String.valueOf(e.getMessage())));
        return new BadRowException(s.redact(keyText + " rejected at column " + (column == null ? "?" : column) + type
            + ": " + reason + (state != null ? " [SQLSTATE " + state + "]" : "")
            + "; nothing of this flush was written to " + s.target()), key, column, state);
    }

    /** A row whose key has a null column (refused before it is buffered). */
    BadRowException nullKey(Object[] values) {
        Map<String, Object> key = keyOf(values);
        String column = null;
        for (Map.Entry<String, Object> e : key.entrySet()) {
            if (e.getValue() == null) {
                column = e.getKey();
                break;
            }
        }
        return new BadRowException(target.settings.redact("row with key " + pairs(key) + " rejected at column "
            + column + ": a key column is null (row " + rowText(values) + "); nothing of this batch was written to "
            + target.settings.target()), key, column, null);
    }

    private String rowText(Object[] values) {
        Map<String, Object> row = new LinkedHashMap<>();
        for (int i = 0; i < values.length; i++) {
            row.put(target.columns[i], values[i]);
        }
        String text = "{" + pairs(row) + "}";
        return text.length() <= 300 ? text : text.substring(0, 297) + "...";
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
}
