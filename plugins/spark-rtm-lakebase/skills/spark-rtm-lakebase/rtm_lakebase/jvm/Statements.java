/*
 * The SQL the JVM sink sends and how it reads names (twin of rtm_lakebase/sink/statements.py): the
 * write statement of each mode, the catalog lookups, a table name read as SQL reads it, and which
 * Spark types the sink writes. Identifiers are always double-quoted.
 */
package rtm_lakebase.jvm;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
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
    private static final String PRIMARY_KEY_QUERY = "SELECT a.attname FROM pg_catalog.pg_index i "
        + "JOIN pg_catalog.pg_class c ON c.oid = i.indrelid "
        + "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        + "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
        + "WHERE c.relname = ? AND n.nspname = COALESCE(CAST(? AS text), current_schema()) "
        + "AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)";

    private static boolean nameStart(int c) {
        return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c >= 0x80;
    }

    private static boolean namePart(int c) {
        return nameStart(c) || c == '$' || (c >= '0' && c <= '9');
    }

    /**
     * "table" or "schema.table" → {schema or null, table}, read as SQL reads a table name (as
     * split_table_name in rtm_lakebase/sink/statements.py): an unquoted part is folded to lower case
     * (A-Z), a double-quoted part is exact, dots and all ("" is one quote).
     */
    static String[] splitTableName(String name) {
        if (name == null || name.trim().isEmpty()) {
            throw new IllegalArgumentException("table must be a non-empty name");
        }
        List<String> parts = new ArrayList<>();
        int i = 0;
        int n = name.length();
        while (true) {
            StringBuilder part = new StringBuilder();
            if (i < n && name.charAt(i) == '"') {
                int j = i + 1;
                while (true) {
                    int k = name.indexOf('"', j);
                    if (k < 0) {
                        throw new IllegalArgumentException("table \"" + name + "\": a double quote is not closed");
                    }
                    part.append(name, j, k);
                    if (k + 1 < n && name.charAt(k + 1) == '"') {
                        part.append('"');
                        j = k + 2;
                        continue;
                    }
                    i = k + 1;
                    break;
                }
                if (part.length() == 0) {
                    throw new IllegalArgumentException("table " + name + ": a quoted name is empty");
                }
            } else {
                int start = i;
                if (i < n && nameStart(name.codePointAt(i))) {
                    i += Character.charCount(name.codePointAt(i));
                    while (i < n && namePart(name.codePointAt(i))) {
                        i += Character.charCount(name.codePointAt(i));
                    }
                }
                if (i == start) {
                    throw new IllegalArgumentException("table " + name + ": expected a name at position " + i
                        + "; quote a name that has spaces, dots, quotes or other punctuation as in SQL "
                        + "(\"my table\"), or set schema and an exact table");
                }
                for (char c : name.substring(start, i).toCharArray()) {
                    part.append(c >= 'A' && c <= 'Z' ? (char) (c + 32) : c);
                }
            }
            parts.add(part.toString());
            if (i == n) {
                break;
            }
            if (name.charAt(i) != '.') {
                throw new IllegalArgumentException("table " + name + ": unexpected '" + name.charAt(i)
                    + "' at position " + i + "; quote a name that has it as in SQL (\"my table\"), or set schema "
                    + "and an exact table");
            }
            i++;
        }
        if (parts.size() > 2) {
            throw new IllegalArgumentException("table " + name + ": at most schema.table (a database cannot be "
                + "named here: connect to it)");
        }
        return parts.size() == 2 ? new String[] {parts.get(0), parts.get(1)} : new String[] {null, parts.get(0)};
    }

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

    /** The primary key's columns, in key order (none: no primary key). */
    static List<String> primaryKey(Connection conn, String table, String schema) throws SQLException {
        List<String> names = new ArrayList<>();
        try (PreparedStatement ps = conn.prepareStatement(PRIMARY_KEY_QUERY)) {
            ps.setString(1, PgColumnTypes.pgName(table));
            ps.setString(2, PgColumnTypes.pgName(schema));
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) {
                    names.add(rs.getString(1));
                }
            }
        }
        return names;
    }

    /** Whether lower() folds more than A-Z under the database's collation (citext keys compare folded). */
    static boolean foldsUnicode(Connection conn) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(PgColumnTypes.FOLDS_UNICODE_QUERY);
             ResultSet rs = ps.executeQuery()) {
            return rs.next() && rs.getBoolean(1);
        }
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
