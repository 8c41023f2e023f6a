package rtmsink;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.Properties;

import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

/**
 * JVM foreach writer: version-guarded upsert of (id, version, payload) rows into Postgres.
 *
 * Runs inside the Spark task (no Python worker on the path), so each row is written as soon as
 * the real-time query produces it. Per-row autocommit: nothing waits for close(), which in
 * real-time mode only comes at the end of a long batch.
 *
 *   INSERT INTO t AS t (id, version, payload) VALUES (?, ?, ?)
 *   ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload
 *   WHERE t.version < EXCLUDED.version
 *
 * Replays and late older versions are no-ops; the newest version wins. Connection errors (SQLSTATE
 * class 08, admin shutdown 57P01..57P03, serialization 40001, deadlock 40P01) are retried on a fresh
 * connection with exponential backoff, then raised. Invalid rows raise. open() never returns false.
 */
public class PgUpsertForeachWriter extends ForeachWriter<Row> {
  private static final long serialVersionUID = 1L;

  private final String jdbcUrl;
  private final Properties props;
  private final String upsertSql;
  private final long maxRetryMillis;

  private transient Connection conn;
  private transient PreparedStatement stmt;
  private transient long partitionId;
  private transient long epochId;

  public PgUpsertForeachWriter(String jdbcUrl, Properties props, String table, long maxRetryMillis) {
    this.jdbcUrl = jdbcUrl;
    this.props = props;
    this.maxRetryMillis = maxRetryMillis;
    this.upsertSql =
        "INSERT INTO " + quoteTable(table) + " AS t (id, version, payload) VALUES (?, ?, ?) "
            + "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            + "WHERE t.version < EXCLUDED.version";
  }

  static String quoteTable(String table) {
    if (table == null || table.isEmpty()) throw new IllegalArgumentException("empty table name");
    String[] parts = table.split("\\.");
    if (parts.length > 3) throw new IllegalArgumentException("invalid table name: " + table);
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < parts.length; i++) {
      if (parts[i].isEmpty()) throw new IllegalArgumentException("invalid table name: " + table);
      if (i > 0) sb.append('.');
      sb.append('"').append(parts[i].replace("\"", "\"\"")).append('"');
    }
    return sb.toString();
  }

  private static boolean retryable(SQLException e) {
    String s = e.getSQLState();
    if (s == null) return true; // I/O failure without a server state: treat as connection loss
    return s.startsWith("08") || s.equals("57P01") || s.equals("57P02") || s.equals("57P03")
        || s.equals("40001") || s.equals("40P01");
  }

  private void connect() throws SQLException {
    closeQuietly();
    conn = DriverManager.getConnection(jdbcUrl, props);
    conn.setAutoCommit(true);
    stmt = conn.prepareStatement(upsertSql);
  }

  private void closeQuietly() {
    try { if (stmt != null) stmt.close(); } catch (SQLException ignored) { /* connection already broken */ }
    try { if (conn != null) conn.close(); } catch (SQLException ignored) { /* connection already broken */ }
    stmt = null;
    conn = null;
  }

  private interface Op { void run() throws SQLException; }

  private void withRetry(String what, Op op) {
    long deadline = System.currentTimeMillis() + maxRetryMillis;
    long delay = 200;
    int attempt = 0;
    while (true) {
      attempt++;
      try {
        if (conn == null || conn.isClosed()) connect();
        op.run();
        return;
      } catch (SQLException e) {
        if (!retryable(e)) {
          throw new RuntimeException("PgUpsertForeachWriter: " + what + " failed (partition "
              + partitionId + ", epoch " + epochId + "): " + e.getMessage(), e);
        }
        closeQuietly();
        long remaining = deadline - System.currentTimeMillis();
        if (remaining <= 0) {
          throw new RuntimeException("PgUpsertForeachWriter: " + what + " failed after " + attempt
              + " attempts (partition " + partitionId + ", epoch " + epochId + "): " + e.getMessage(), e);
        }
        try {
          Thread.sleep(Math.min(delay, remaining));
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          throw new RuntimeException("PgUpsertForeachWriter interrupted during retry", ie);
        }
        delay = Math.min(delay * 2, 5000);
      }
    }
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    this.partitionId = partitionId;
    this.epochId = epochId;
    withRetry("connect", this::connect);
    return true; // never false: false would make Spark skip this partition's rows
  }

  @Override
  public void process(Row row) {
    final String id = row.isNullAt(row.fieldIndex("id")) ? null : row.getAs("id").toString();
    if (id == null || id.isEmpty()) throw new IllegalArgumentException("row without id: " + row);
    if (id.indexOf('\u0000') >= 0) throw new IllegalArgumentException("id contains NUL: " + row);
    int vi = row.fieldIndex("version");
    if (row.isNullAt(vi)) throw new IllegalArgumentException("row without version: " + row);
    final long version = ((Number) row.get(vi)).longValue();
    int pi = row.fieldIndex("payload");
    final String payload = row.isNullAt(pi) ? null : row.get(pi).toString();
    if (payload != null && payload.indexOf('\u0000') >= 0) {
      throw new IllegalArgumentException("payload contains NUL: " + row);
    }
    withRetry("upsert id=" + id + " version=" + version, () -> {
      stmt.setString(1, id);
      stmt.setLong(2, version);
      stmt.setString(3, payload);
      stmt.executeUpdate();
    });
  }

  @Override
  public void close(Throwable errorOrNull) {
    // Rows are already committed one by one; Spark re-raises errorOrNull itself.
    closeQuietly();
  }
}
