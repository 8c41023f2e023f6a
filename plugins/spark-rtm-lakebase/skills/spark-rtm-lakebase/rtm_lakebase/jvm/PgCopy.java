/*
 * COPY ... FROM STDIN (text format) for the JVM sink's mode=append: one round trip per flush
 * instead of a batch of INSERTs. pgjdbc's CopyManager is reached by reflection (the pack compiles
 * against Spark only; the driver comes at run time).
 *
 * - Each value is written as the text PgBinder binds (timestamps, dates, arrays: the same
 *   strings), so the stored value is the one a plain INSERT stores.
 * - COPY parses text with the column type's input function, where the INSERT path casts a typed
 *   parameter (CAST(? AS type)); they agree only when the Spark type is the column's own kind.
 *   copySafe() says which pairs those are; a flush with any other pair uses INSERT.
 * - Text format escaping: backslash, tab, newline, carriage return; NULL is \N.
 */
package rtm_lakebase.jvm;

import java.io.StringReader;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.types.ArrayType;
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
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

final class PgCopy {
    private static final Set<String> INTEGRAL_INTO = Set.of("smallint", "integer", "bigint", "numeric", "real",
        "double precision");
    private static final Set<String> FLOAT_INTO = Set.of("real", "double precision");

    private PgCopy() { }

    /** Whether COPY's text input stores what CAST(? AS type) of the bound value stores. */
    static boolean copySafe(DataType t, PgColumnTypes.Column column) {
        String into = column.isArray ? "" : column.castType;
        if (t instanceof StringType || t instanceof NullType || t instanceof ArrayType || t instanceof DateType
                || t instanceof TimestampType || t instanceof TimestampNTZType || t.typeName().equals("time")) {
            return true;  // bound as text (setString) already: the same input function parses it
        }
        if (t instanceof ByteType || t instanceof ShortType || t instanceof IntegerType || t instanceof LongType) {
            return INTEGRAL_INTO.contains(into);
        }
        if (t instanceof FloatType || t instanceof DoubleType) {
            return FLOAT_INTO.contains(into);
        }
        if (t instanceof DecimalType) {
            return into.equals("numeric");
        }
        if (t instanceof BooleanType) {
            return into.equals("boolean");
        }
        if (t instanceof BinaryType) {
            return into.equals("bytea");
        }
        return false;
    }

    static String sql(String target, String quotedNames) {
        return "COPY " + target + " (" + quotedNames + ") FROM STDIN";
    }

    /** The batch as COPY text: one line per row, tab-separated, \N for NULL. */
    static String text(List<Object[]> batch, PgColumnTypes.Column[] columns, ZoneId zone) {
        StringBuilder sb = new StringBuilder(batch.size() * 64);
        for (Object[] values : batch) {
            for (int i = 0; i < values.length; i++) {
                if (i > 0) {
                    sb.append('\t');
                }
                Object v = values[i];
                if (v == null) {
                    sb.append("\\N");
                } else {
                    escape(sb, valueText(v, columns[i], zone));
                }
            }
            sb.append('\n');
        }
        return sb.toString();
    }

    /** The text of one value: what PgBinder binds as a string, else the value's own text form. */
    static String valueText(Object v, PgColumnTypes.Column column, ZoneId zone) {
        if (column.isArray || v instanceof Object[]) {
            return PgBinder.arrayLiteral(v, zone);
        }
        if (v instanceof Instant) {
            Instant instant = (Instant) v;
            return column.isTimestampWithoutZone() ? LocalDateTime.ofInstant(instant, zone).toString()
                : OffsetDateTime.ofInstant(instant, ZoneOffset.UTC).toString();
        }
        if (v instanceof byte[]) {
            StringBuilder hex = new StringBuilder("\\x");
            for (byte b : (byte[]) v) {
                hex.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
            }
            return hex.toString();
        }
        if (v instanceof Float) {
            return Double.toString(((Float) v).doubleValue());  // as pgjdbc's float4 parameter cast to the column
        }
        if (v instanceof BigDecimal) {
            return ((BigDecimal) v).toPlainString();
        }
        if (v instanceof Boolean) {
            return ((Boolean) v) ? "t" : "f";
        }
        return v.toString();
    }

    static void escape(StringBuilder sb, String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '\\': sb.append("\\\\"); break;
                case '\t': sb.append("\\t"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                default: sb.append(c);
            }
        }
    }

    /** Run COPY FROM STDIN on `conn` with `data`; returns the rows copied. */
    static long copyIn(Connection conn, String sql, String data) throws SQLException {
        Object manager;
        Method copyIn;
        try {
            Class<?> pgConnection = Class.forName("org.postgresql.PGConnection", false, conn.getClass().getClassLoader());
            Object pg = conn.unwrap(pgConnection);
            manager = pgConnection.getMethod("getCopyAPI").invoke(pg);
            Class<?> managerClass = Class.forName("org.postgresql.copy.CopyManager", false,
                conn.getClass().getClassLoader());
            copyIn = managerClass.getMethod("copyIn", String.class, java.io.Reader.class);
        } catch (ReflectiveOperationException e) {
            throw new SQLException("the Postgres JDBC driver has no COPY API: " + e, "0A000");
        }
        try {
            return ((Number) copyIn.invoke(manager, sql, new StringReader(data))).longValue();
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof SQLException) {
                throw (SQLException) cause;
            }
            throw new SQLException("COPY failed: " + cause, "08006", cause);
        } catch (IllegalAccessException e) {
            throw new SQLException("the Postgres JDBC driver's COPY API is not accessible: " + e, "0A000");
        }
    }
}
