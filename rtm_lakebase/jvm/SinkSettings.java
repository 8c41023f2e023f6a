/*
 * What the JVM sink writes and how: every option, checked when the writer is built (on the driver),
 * so a wrong setting fails before the query starts. Twin of rtm_lakebase/sink/settings.py: the
 * options carry SinkSettings' names, lower-cased as Spark reads options (table, schema, mode,
 * key_columns, version_column, skip_unchanged, max_batch_rows, max_dwell_ms, max_retries,
 * backoff_initial_ms, backoff_max_ms, connection_max_age_s), plus the JVM's own: url, user,
 * password, password_provider, append_copy.
 *
 * - table is read as SQL reads a table name ("events", "sales.events", "\"Sales\".\"Order.Lines\"",
 *   as the native sink reads dbtable); with schema set, table is one exact name in that schema.
 * - The older names (dbtable, upsertkey, versioncolumn, skipunchanged, batchsize, batchinterval,
 *   maxretries, backoffinitialms, backoffmaxms, appendcopy, passwordprovider,
 *   connectionmaxageseconds) keep working; each use logs one deprecation line.
 */
package rtm_lakebase.jvm;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

final class SinkSettings implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(SinkSettings.class);

    static final List<String> NAMES = List.of("url", "user", "password", "table", "schema", "mode", "key_columns",
        "version_column", "skip_unchanged", "max_batch_rows", "max_dwell_ms", "max_retries", "backoff_initial_ms",
        "backoff_max_ms", "append_copy", "password_provider", "connection_max_age_s");
    /** Older name → SinkSettings' name (batchinterval takes "100 milliseconds", max_dwell_ms a number). */
    static final Map<String, String> DEPRECATED = Collections.unmodifiableMap(new LinkedHashMap<>(Map.ofEntries(
        Map.entry("dbtable", "table"), Map.entry("upsertkey", "key_columns"),
        Map.entry("versioncolumn", "version_column"), Map.entry("skipunchanged", "skip_unchanged"),
        Map.entry("batchsize", "max_batch_rows"), Map.entry("batchinterval", "max_dwell_ms"),
        Map.entry("maxretries", "max_retries"), Map.entry("backoffinitialms", "backoff_initial_ms"),
        Map.entry("backoffmaxms", "backoff_max_ms"), Map.entry("appendcopy", "append_copy"),
        Map.entry("passwordprovider", "password_provider"),
        Map.entry("connectionmaxageseconds", "connection_max_age_s"))));
    static final Set<String> OPTIONS;
    static {
        TreeSet<String> all = new TreeSet<>(NAMES);
        all.addAll(DEPRECATED.keySet());
        OPTIONS = Collections.unmodifiableSet(all);
    }
    static final List<String> MODES = List.of("upsert", "insert_ignore", "append");
    private static final Set<String> WARNED = ConcurrentHashMap.newKeySet();  // one line per old name and JVM

    final String url;
    final String user;
    final String password;
    final String table;
    final String schema;
    final String mode;
    final ArrayList<String> keyColumns;  // as given; empty: the table's primary key
    final String versionColumn;
    final boolean skipUnchanged;
    final int maxBatchRows;
    final long maxDwellMs;               // 0: no time-based flushes
    final int maxRetries;
    final long backoffInitialMs;
    final long backoffMaxMs;
    final boolean appendCopy;
    final long connectionMaxAgeMs;
    final String passwordProvider;       // a class name; the password it gives is never kept here
    private final ArrayList<String> deprecatedUsed;

    SinkSettings(Map<String, String> options) {
        Map<String, String> o = new LinkedHashMap<>();
        for (Map.Entry<String, String> e : options.entrySet()) {
            o.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
        }
        TreeSet<String> unknown = new TreeSet<>(o.keySet());
        unknown.removeAll(OPTIONS);
        if (!unknown.isEmpty()) {
            throw new IllegalArgumentException("unknown option(s) " + unknown + "; known options: " + NAMES
                + " (older names still read: " + DEPRECATED.keySet() + ")");
        }
        deprecatedUsed = new ArrayList<>();
        for (Map.Entry<String, String> e : DEPRECATED.entrySet()) {
            if (!o.containsKey(e.getKey())) {
                continue;
            }
            if (o.containsKey(e.getValue())) {
                throw new IllegalArgumentException("give " + e.getValue() + " or its older name " + e.getKey()
                    + ", not both");
            }
            String value = o.remove(e.getKey());
            o.put(e.getValue(), e.getKey().equals("batchinterval") ? Long.toString(parseInterval(value)) : value);
            deprecatedUsed.add(e.getKey());
        }
        this.password = emptyToNull(o.get("password"));
        this.url = required(o, "url");
        if (!url.startsWith("jdbc:postgresql:")) {
            throw new IllegalArgumentException("url must start with jdbc:postgresql:, got " + redact(url));
        }
        this.user = emptyToNull(o.get("user"));
        String givenSchema = emptyToNull(o.get("schema"));
        String givenTable = required(o, "table");
        checkIdentifier("table", givenTable);
        if (givenSchema != null) {
            checkIdentifier("schema", givenSchema);
            this.schema = givenSchema;
            this.table = givenTable;
        } else {
            String[] parts = Statements.splitTableName(givenTable);
            this.schema = parts[0];
            this.table = parts[1];
        }
        this.mode = o.getOrDefault("mode", "upsert").toLowerCase(Locale.ROOT);
        if (!MODES.contains(mode)) {
            throw new IllegalArgumentException("mode must be one of " + MODES + ", got " + mode);
        }
        this.keyColumns = parseKeyList(o.get("key_columns"));
        for (String k : keyColumns) {
            checkIdentifier("key_columns", k);
        }
        if (!keyColumns.isEmpty() && mode.equals("append")) {
            throw new IllegalArgumentException("key_columns does not apply to mode=append");
        }
        this.versionColumn = emptyToNull(o.get("version_column"));
        if (versionColumn != null) {
            checkIdentifier("version_column", versionColumn);
            if (!mode.equals("upsert")) {
                throw new IllegalArgumentException("version_column only applies to mode=upsert");
            }
        }
        this.skipUnchanged = parseBoolean(o, "skip_unchanged", true);
        this.maxBatchRows = (int) parseLong(o, "max_batch_rows", 1000, 1);
        this.maxDwellMs = parseLong(o, "max_dwell_ms", 100, 0);
        this.maxRetries = (int) parseLong(o, "max_retries", 6, 0);
        this.backoffInitialMs = parseLong(o, "backoff_initial_ms", 250, 0);
        this.backoffMaxMs = parseLong(o, "backoff_max_ms", 5000, 0);
        this.appendCopy = parseBoolean(o, "append_copy", true);
        this.connectionMaxAgeMs = parseSeconds(o, "connection_max_age_s", 1800);
        this.passwordProvider = emptyToNull(o.get("password_provider"));
        if (passwordProvider != null && password != null) {
            throw new IllegalArgumentException("give either password or password_provider, not both");
        }
        if (passwordProvider != null && !passwordProvider.matches(
                "[A-Za-z_$][A-Za-z0-9_$]*(\\.[A-Za-z_$][A-Za-z0-9_$]*)*")) {
            throw new IllegalArgumentException("password_provider must be a Java class name, e.g. com.example.MyProvider");
        }
        warnDeprecated();
    }

    /** One log line per older option name and JVM (the driver when built, each executor at open()). */
    void warnDeprecated() {
        for (String old : deprecatedUsed) {
            if (WARNED.add(old)) {
                LOG.warn("postgres JVM sink: option {} is deprecated; use {}{}", old, DEPRECATED.get(old),
                    old.equals("batchinterval") ? " (milliseconds, a number)" : "");
            }
        }
    }

    /** The older option names these settings were given with. */
    List<String> deprecatedUsed() {
        return Collections.unmodifiableList(deprecatedUsed);
    }

    /** "schema"."table", both quoted. */
    String target() {
        return schema == null ? quote(table) : quote(schema) + "." + quote(table);
    }

    @Override
    public String toString() {
        return "PostgresForeachWriter(url=" + redact(url) + ", user=" + user + ", password="
            + (password != null ? "***" : "null") + ", table=" + target() + ", mode=" + mode
            + ", key_columns=" + keyColumns + ", version_column=" + versionColumn + ", max_batch_rows="
            + maxBatchRows + ", max_dwell_ms=" + maxDwellMs
            + (passwordProvider != null ? ", password_provider=" + passwordProvider : "") + ")";
    }

    static String quote(String identifier) {
        return '"' + identifier.replace("\"", "\"\"") + '"';
    }

    private static final Pattern URL_PASSWORD = Pattern.compile("(?i)(password=)[^&\\s]*");

    /** `text` without the password (literal occurrences and password=... URL parameters). */
    String redact(String text) {
        if (text == null) {
            return null;
        }
        String out = text;
        if (password != null && !password.isEmpty()) {
            out = out.replace(password, "***");
        }
        return URL_PASSWORD.matcher(out).replaceAll("$1***");
    }

    // -- parsing ------------------------------------------------------------------------------------

    private static void checkIdentifier(String option, String name) {
        if (name.isEmpty() || name.indexOf('\0') >= 0) {
            throw new IllegalArgumentException(option + " must be a non-empty name without NUL characters");
        }
    }

    private static String emptyToNull(String s) {
        return s == null || s.isEmpty() ? null : s;
    }

    private static String required(Map<String, String> o, String name) {
        String v = emptyToNull(o.get(name));
        if (v == null) {
            throw new IllegalArgumentException("option " + name + " is required");
        }
        return v;
    }

    private static boolean parseBoolean(Map<String, String> o, String name, boolean dflt) {
        String v = o.get(name);
        if (v == null) {
            return dflt;
        }
        if (v.equalsIgnoreCase("true") || v.equalsIgnoreCase("false")) {
            return Boolean.parseBoolean(v);
        }
        throw new IllegalArgumentException("option " + name + " must be true or false, got " + v);
    }

    private static long parseLong(Map<String, String> o, String name, long dflt, long min) {
        String v = o.get(name);
        if (v == null) {
            return dflt;
        }
        long n;
        try {
            n = Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("option " + name + " must be an integer, got " + v);
        }
        if (n < min || n > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("option " + name + " must be between " + min + " and "
                + Integer.MAX_VALUE + ", got " + v);
        }
        return n;
    }

    /** A number of seconds (decimals allowed), at least 0 → milliseconds. */
    private static long parseSeconds(Map<String, String> o, String name, long dfltSeconds) {
        String v = o.get(name);
        if (v == null) {
            return dfltSeconds * 1000L;
        }
        double s;
        try {
            s = Double.parseDouble(v.trim());
        } catch (NumberFormatException e) {
            s = Double.NaN;
        }
        if (!(s >= 0 && s <= Integer.MAX_VALUE)) {
            throw new IllegalArgumentException("option " + name + " must be a number of seconds, at least 0 "
                + "(0: no reuse), got " + v);
        }
        return Math.round(s * 1000);
    }

    private static final Pattern INTERVAL = Pattern.compile(
        "\\s*(\\d{1,9})\\s*(milliseconds?|seconds?|minutes?)\\s*", Pattern.CASE_INSENSITIVE);

    /** "100 milliseconds", "1 second", "2 minutes" (the native sink's batchinterval) → milliseconds (at least 1). */
    static long parseInterval(String text) {
        Matcher m = INTERVAL.matcher(text);
        if (!m.matches()) {
            throw new IllegalArgumentException("batchinterval must look like \"100 milliseconds\", \"1 second\" or "
                + "\"1 minute\", got \"" + text + "\"");
        }
        long n = Long.parseLong(m.group(1));
        String unit = m.group(2).toLowerCase(Locale.ROOT);
        long ms = unit.startsWith("milli") ? n : unit.startsWith("second") ? n * 1000 : n * 60_000;
        if (ms < 1) {
            throw new IllegalArgumentException("batchinterval must be at least 1 millisecond, got \"" + text + "\"");
        }
        return ms;
    }

    /** Comma-separated names; a "double-quoted" name may hold commas and "" for a quote. */
    static ArrayList<String> parseKeyList(String text) {
        ArrayList<String> names = new ArrayList<>();
        if (text == null || text.trim().isEmpty()) {
            return names;
        }
        int i = 0;
        int n = text.length();
        while (true) {
            while (i < n && text.charAt(i) == ' ') {
                i++;
            }
            StringBuilder name = new StringBuilder();
            if (i < n && text.charAt(i) == '"') {
                i++;
                boolean closed = false;
                while (i < n) {
                    char c = text.charAt(i++);
                    if (c == '"') {
                        if (i < n && text.charAt(i) == '"') {
                            name.append('"');
                            i++;
                        } else {
                            closed = true;
                            break;
                        }
                    } else {
                        name.append(c);
                    }
                }
                if (!closed) {
                    throw new IllegalArgumentException("key_columns has an unclosed double quote: " + text);
                }
                while (i < n && text.charAt(i) == ' ') {
                    i++;
                }
            } else {
                int start = i;
                while (i < n && text.charAt(i) != ',') {
                    i++;
                }
                name.append(text.substring(start, i).trim());
            }
            if (name.length() == 0) {
                throw new IllegalArgumentException("key_columns has an empty column name: " + text);
            }
            names.add(name.toString());
            if (i >= n) {
                return names;
            }
            if (text.charAt(i) != ',') {
                throw new IllegalArgumentException("key_columns: expected a comma after a quoted name: " + text);
            }
            i++;
        }
    }
}
