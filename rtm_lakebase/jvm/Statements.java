/*
 * The SQL the JVM sink sends (twin of rtm_lakebase/sink/statements.py): the write statement of each
 * mode, the primary-key query, and which Spark types the sink writes. Identifiers are always
 * double-quoted.
 */
package rtm_lakebase.jvm;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

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

final class Statements {
    private Statements() { }

    /** The primary key's columns in key order; parameters: table name, schema name (null: current schema). */
    static final String PRIMARY_KEY_QUERY = "SELECT a.attname FROM pg_catalog.pg_index i "
        + "JOIN pg_catalog.pg_class c ON c.oid = i.indrelid "
        + "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        + "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
        + "WHERE c.relname = ? AND n.nspname = COALESCE(CAST(? AS text), current_schema()) "
        + "AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)";

    /** Whether the sink binds values of this Spark type. */
    static boolean supported(DataType t) {
        if (t instanceof ArrayType) {
            return supported(((ArrayType) t).elementType());
        }
        return t.typeName().equals("time") || t instanceof BooleanType || t instanceof ByteType || t instanceof ShortType
            || t instanceof IntegerType || t instanceof LongType || t instanceof FloatType
            || t instanceof DoubleType || t instanceof DecimalType || t instanceof StringType
            || t instanceof BinaryType || t instanceof DateType || t instanceof TimestampType
            || t instanceof TimestampNTZType || t instanceof NullType;
    }

    static String quotedList(List<String> names) {
        StringBuilder sb = new StringBuilder();
        for (String n : names) {
            sb.append(sb.length() == 0 ? "" : ", ").append(SinkSettings.quote(n));
        }
        return sb.toString();
    }

    /**
     * append: INSERT; insert_ignore: INSERT ... ON CONFLICT (key) DO NOTHING; upsert: ... DO UPDATE
     * of the other columns, only when the version is strictly newer (versionColumn) or, with
     * skipUnchanged, when some value differs as Postgres compares it.
     */
    static String write(String target, String mode, List<String> columns, List<String> keyColumns,
                        Map<String, PgColumnTypes.Column> types, String versionColumn, boolean skipUnchanged) {
        StringBuilder params = new StringBuilder();
        for (int i = 0; i < columns.size(); i++) {
            params.append(i == 0 ? "" : ", ").append(types.get(columns.get(i)).param());
        }
        String names = quotedList(columns);
        if (mode.equals("append")) {
            return "INSERT INTO " + target + " (" + names + ") VALUES (" + params + ")";
        }
        StringBuilder sql = new StringBuilder("INSERT INTO ").append(target).append(" AS t (").append(names)
            .append(") VALUES (").append(params).append(") ON CONFLICT (").append(quotedList(keyColumns))
            .append(") ");
        List<String> updates = new ArrayList<>();
        for (String c : columns) {
            if (!keyColumns.contains(c)) {
                updates.add(c);
            }
        }
        if (mode.equals("insert_ignore") || updates.isEmpty()) {
            return sql.append("DO NOTHING").toString();
        }
        sql.append("DO UPDATE SET ");
        for (int i = 0; i < updates.size(); i++) {
            String c = SinkSettings.quote(updates.get(i));
            sql.append(i == 0 ? "" : ", ").append(c).append(" = EXCLUDED.").append(c);
        }
        if (versionColumn != null) {
            String v = SinkSettings.quote(versionColumn);
            sql.append(" WHERE t.").append(v).append(" IS NULL OR t.").append(v).append(" < EXCLUDED.").append(v);
        } else if (skipUnchanged) {
            StringBuilder oldRow = new StringBuilder();
            StringBuilder newRow = new StringBuilder();
            for (int i = 0; i < updates.size(); i++) {
                String c = SinkSettings.quote(updates.get(i));
                PgColumnTypes.Column type = types.get(updates.get(i));
                oldRow.append(i == 0 ? "" : ", ").append(type.compared("t", c));
                newRow.append(i == 0 ? "" : ", ").append(type.compared("EXCLUDED", c));
            }
            sql.append(" WHERE (").append(oldRow).append(") IS DISTINCT FROM (").append(newRow).append(')');
        }
        return sql.toString();
    }

    /** A one-column INSERT into the diagnosis' constraint-free probe table. */
    static String probeInsert(String column, PgColumnTypes.Column type) {
        return "INSERT INTO pg_temp.rtm_jvm_sink_probe (" + SinkSettings.quote(column) + ") VALUES ("
            + type.param() + ")";
    }

    static String probeTable(String target) {
        return "CREATE TEMP TABLE rtm_jvm_sink_probe ON COMMIT DROP AS SELECT * FROM " + target + " WITH NO DATA";
    }
}
