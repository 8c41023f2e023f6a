/*
 * Counters of one task's writer, for logs and tests (twin of rtm_lakebase/sink/metrics.py).
 * Written by the task thread (rowsReceived) and the flusher thread (the rest); read for the log line.
 */
package rtm_lakebase.jvm;

final class SinkMetrics {
    volatile long rowsReceived;
    volatile long rowsWritten;
    volatile long flushes;
    volatile long flushesByTimer;
    volatile long retries;
    volatile long copyFlushes;

    @Override
    public String toString() {
        return "rows_received=" + rowsReceived + " rows_written=" + rowsWritten + " flushes=" + flushes
            + " flushes_by_timer=" + flushesByTimer + " retries=" + retries + " copy_flushes=" + copyFlushes;
    }
}
