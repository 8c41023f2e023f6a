/*
 * Spark row values to JDBC parameters, with java.time values so that nothing depends on the
 * executor JVM's time zone or on how a driver version formats java.sql.Timestamp.
 *
 * - TimestampType (an instant): java.sql.Timestamp from Row.get() is turned back into Spark's own
 *   microseconds (DateTimeUtils.fromJavaTimestamp, the inverse of the conversion Spark made, so
 *   pre-1900 zone history and calendar rebasing cancel out) and bound as an OffsetDateTime at UTC.
 *   Into a `timestamp without time zone` column it is bound as the LocalDateTime the Spark
 *   session's time zone shows (what CAST(ts AS TIMESTAMP_NTZ) gives in Spark).
 * - TimestampNTZType: LocalDateTime as it is (a DST gap in the JVM's zone does not move it).
 * - DateType: LocalDate (java.sql.Date is converted back through Spark's day count).
 * - Arrays (ArrayType, any depth): their Postgres text form, cast to the column's array type.
 * pgjdbc 42.2.0 or later binds java.time values as text with their own type (no Calendar).
 */
package rtm_lakebase.jvm;

import java.math.BigDecimal;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Types;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.List;

import org.apache.spark.sql.catalyst.util.DateTimeUtils;

final class PgBinder {
    private PgBinder() { }

    /** A Row value as the sink keeps it: java.time instead of java.sql types, arrays as Object[]. */
    static Object fromSpark(Object v) {
        if (v instanceof java.sql.Timestamp) {
            return DateTimeUtils.microsToInstant(DateTimeUtils.fromJavaTimestamp((java.sql.Timestamp) v));
        }
        if (v instanceof java.sql.Date) {
            return DateTimeUtils.daysToLocalDate(DateTimeUtils.fromJavaDate((java.sql.Date) v));
        }
        if (v instanceof scala.collection.Iterable) {
            scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) v).iterator();
            java.util.ArrayList<Object> out = new java.util.ArrayList<>();
            while (it.hasNext()) {
                out.add(fromSpark(it.next()));
            }
            return out.toArray();
        }
        if (v instanceof List) {
            return ((List<?>) v).stream().map(PgBinder::fromSpark).toArray();
        }
        return v;
    }

    /** The Spark session's time zone (executors get it from the task), for instants into `timestamp`. */
    static ZoneId sessionZone() {
        try {
            return ZoneId.of(org.apache.spark.sql.internal.SQLConf.get().sessionLocalTimeZone());
        } catch (RuntimeException | LinkageError e) {
            return ZoneOffset.UTC;
        }
    }

    /** Bind one row's values to `?` 1..n of `ps`. */
    static void bind(PreparedStatement ps, Object[] values, PgColumnTypes.Column[] columns, ZoneId zone)
            throws SQLException {
        for (int i = 0; i < values.length; i++) {
            bindOne(ps, i + 1, values[i], columns[i], zone);
        }
    }

    static void bindOne(PreparedStatement ps, int index, Object v, PgColumnTypes.Column column, ZoneId zone)
            throws SQLException {
        if (v == null) {
            ps.setNull(index, Types.NULL);
        } else if (column.isArray || v instanceof Object[]) {
            ps.setString(index, arrayLiteral(v, zone));
        } else if (v instanceof Instant) {
            Instant instant = (Instant) v;
            if (column.isTimestampWithoutZone()) {
                ps.setString(index, LocalDateTime.ofInstant(instant, zone).toString());
            } else {
                ps.setString(index, OffsetDateTime.ofInstant(instant, ZoneOffset.UTC).toString());
            }
        } else if (v instanceof LocalDateTime || v instanceof LocalDate || v instanceof java.time.LocalTime
                || v instanceof OffsetDateTime) {
            // ISO text, parsed by the server's cast: pgjdbc 42.5.5 moved a LocalDateTime in the JVM zone's
            // DST gap (02:30 -> 03:30) when bound with setObject; text depends on no driver version.
            ps.setString(index, v.toString());
        } else if (v instanceof byte[]) {
            ps.setBytes(index, (byte[]) v);
        } else {
            ps.setObject(index, v);
        }
    }

    /** Postgres array text ({1,2}, {{"a","b"}}): every element quoted, NULL unquoted. */
    static String arrayLiteral(Object v, ZoneId zone) {
        if (!(v instanceof Object[])) {
            throw new IllegalArgumentException("an array column needs an array value, got "
                + v.getClass().getSimpleName());
        }
        StringBuilder sb = new StringBuilder("{");
        Object[] items = (Object[]) v;
        for (int i = 0; i < items.length; i++) {
            if (i > 0) {
                sb.append(',');
            }
            Object item = items[i];
            if (item == null) {
                sb.append("NULL");
            } else if (item instanceof Object[]) {
                sb.append(arrayLiteral(item, zone));
            } else {
                String text = elementText(item);
                sb.append('"').append(text.replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
            }
        }
        return sb.append('}').toString();
    }

    private static String elementText(Object item) {
        if (item instanceof Instant) {
            return OffsetDateTime.ofInstant((Instant) item, ZoneOffset.UTC).toString();
        }
        if (item instanceof BigDecimal) {
            return ((BigDecimal) item).toPlainString();
        }
        if (item instanceof Boolean) {
            return ((Boolean) item) ? "t" : "f";
        }
        if (item instanceof byte[]) {
            StringBuilder hex = new StringBuilder("\\x");
            for (byte b : (byte[]) item) {
                hex.append(String.format("%02x", b & 0xff));
            }
            return hex.toString();
        }
        if (item instanceof LocalDate || item instanceof LocalDateTime) {
            return item.toString();
        }
        return String.valueOf(item);
    }
}
