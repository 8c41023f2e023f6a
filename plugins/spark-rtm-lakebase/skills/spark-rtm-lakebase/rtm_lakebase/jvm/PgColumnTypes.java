/*
 * The target table's columns as the catalog describes them, and the SQL pieces built from them:
 * the cast each parameter gets and how the no-op check compares each column. The query text is
 * the Python sink's (rtm_lakebase/sink/statements.py COLUMNS_QUERY, '?' for its named parameters);
 * tests/sink/test_type_matrix.py checks that the two stay the same.
 *
 * - Casts never narrow: a parameter is cast to the column's type without its modifier, with
 *   domains resolved to their base type (bpchar, not character(8) nor character, which is
 *   character(1)); the assignment into the column then applies length, precision, domain
 *   constraints and array dimensions as a plain INSERT does, raising where that would.
 * - The no-op check compares a column natively only where "=" means "stored the same"; every
 *   other column (json has no "=", citext folds case, '1 day' = '24 hours') as text.
 * - Names longer than 63 bytes are cut as Postgres cuts them (pgName).
 */
package rtm_lakebase.jvm;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.LinkedHashMap;

final class PgColumnTypes {
    private PgColumnTypes() { }

    /** Postgres cuts identifiers to this many bytes (NAMEDATALEN - 1), at a character boundary. */
    static final int MAX_IDENTIFIER_BYTES = 63;

    // columns-query:start
    static final String COLUMNS_QUERY = ""
        + "SELECT a.attname,\n"
        + "       format_type(w.oid, NULL) AS base_type,\n"
        + "       format_type(a.atttypid, a.atttypmod) AS full_type,\n"
        + "       a.attnotnull,\n"
        + "       w.typcategory = 'A' AS is_array,\n"
        + "       format_type(w.oid, -1) AS cast_type,\n"
        + "       CASE WHEN a.attgenerated <> '' THEN 'generated' WHEN a.attidentity = 'a' THEN 'identity always'\n"
        + "            ELSE '' END AS not_writable,\n"
        + "       w.oid IN (16, 17, 18, 19, 20, 21, 23, 25, 26, 1042, 1043, 1082, 1114, 1184, 2950) AS native_equality\n"
        + "FROM pg_catalog.pg_attribute a\n"
        + "JOIN pg_catalog.pg_class c ON c.oid = a.attrelid\n"
        + "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace\n"
        + "CROSS JOIN LATERAL (\n"
        + "  WITH RECURSIVE d(oid, depth) AS (\n"
        + "    SELECT a.atttypid, 0\n"
        + "    UNION ALL\n"
        + "    SELECT t.typbasetype, d.depth + 1 FROM d JOIN pg_catalog.pg_type t ON t.oid = d.oid WHERE t.typtype = 'd'\n"
        + "  ) SELECT oid FROM d ORDER BY depth DESC LIMIT 1) b\n"
        + "JOIN pg_catalog.pg_type bt ON bt.oid = b.oid\n"
        + "LEFT JOIN LATERAL (\n"
        + "  WITH RECURSIVE d(oid, depth) AS (\n"
        + "    SELECT bt.typelem, 0 WHERE bt.typcategory = 'A'\n"
        + "    UNION ALL\n"
        + "    SELECT t.typbasetype, d.depth + 1 FROM d JOIN pg_catalog.pg_type t ON t.oid = d.oid WHERE t.typtype = 'd'\n"
        + "  ) SELECT et.typarray AS oid FROM d JOIN pg_catalog.pg_type et ON et.oid = d.oid ORDER BY depth DESC LIMIT 1\n"
        + ") e ON true\n"
        + "JOIN pg_catalog.pg_type w ON w.oid = COALESCE(e.oid, b.oid)\n"
        + "WHERE c.relname = ?\n"
        + "  AND n.nspname = COALESCE(CAST(? AS text), current_schema())\n"
        + "  AND c.relkind IN ('r', 'p')\n"
        + "  AND a.attnum > 0 AND NOT a.attisdropped\n"
        + "ORDER BY a.attnum\n";
    // columns-query:end

    /** One column: its types and whether it can be written and compared natively. */
    static final class Column {
        final String name;
        final String baseType;      // format_type(base type, NULL): "timestamp with time zone", "integer[]"
        final String fullType;      // format_type(atttypid, atttypmod): shown in messages, "character(8)"
        final boolean notNull;
        final boolean isArray;
        final String castType;      // format_type(base type, -1): the parameter's cast, "bpchar"
        final String notWritable;   // "generated" / "identity always" / ""
        final boolean nativeEquality;

        Column(String name, String baseType, String fullType, boolean notNull, boolean isArray, String castType,
               String notWritable, boolean nativeEquality) {
            this.name = name;
            this.baseType = baseType;
            this.fullType = fullType;
            this.notNull = notNull;
            this.isArray = isArray;
            this.castType = castType;
            this.notWritable = notWritable;
            this.nativeEquality = nativeEquality;
        }

        /** CAST(? AS type): the type never narrows (see the class comment). */
        String param() {
            return "CAST(? AS " + castType + ")";
        }

        /** "t.col" or "t.col::text" for the no-op check. */
        String compared(String prefix, String quotedName) {
            return prefix + "." + quotedName + (nativeEquality ? "" : "::text");
        }

        boolean isTimestampWithoutZone() {
            return baseType.equals("timestamp without time zone");
        }
    }

    /** Whether lower() folds more than A-Z under the database's collation (the same text as sink/statements.py). */
    static final String FOLDS_UNICODE_QUERY = "SELECT lower('\u00c0\u00c9\u00ce') = '\u00e0\u00e9\u00ee'";

    /** The table's columns in order (empty when there is no such table); names are cut as Postgres cuts them. */
    static LinkedHashMap<String, Column> describe(Connection conn, String table, String schema) throws SQLException {
        LinkedHashMap<String, Column> found = new LinkedHashMap<>();
        try (PreparedStatement ps = conn.prepareStatement(COLUMNS_QUERY)) {
            ps.setString(1, pgName(table));
            ps.setString(2, schema == null ? null : pgName(schema));
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) {
                    String name = rs.getString(1);
                    found.put(name, new Column(name, rs.getString(2), rs.getString(3), rs.getBoolean(4),
                        rs.getBoolean(5), rs.getString(6), rs.getString(7), rs.getBoolean(8)));
                }
            }
        }
        return found;
    }

    /** `name` as Postgres stores it: cut to 63 bytes of UTF-8 on a character boundary. */
    static String pgName(String name) {
        if (name == null) {
            return null;
        }
        byte[] raw = name.getBytes(StandardCharsets.UTF_8);
        if (raw.length <= MAX_IDENTIFIER_BYTES) {
            return name;
        }
        int end = MAX_IDENTIFIER_BYTES;
        while (end > 0 && (raw[end] & 0xC0) == 0x80) {
            end--;  // raw[end] continues a character: cut before that character starts
        }
        return new String(raw, 0, end, StandardCharsets.UTF_8);
    }
}
