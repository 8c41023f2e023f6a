/*
 * The one thread per writer that writes: full batches in order, and the buffer once it is too old
 * (twin of rtm_lakebase/sink/flusher.py).
 *
 * add() (called by process()) buffers a row and hands the buffer over when max_batch_rows keys are
 * in it; at most one batch waits while another is being written, then add() waits (back-pressure).
 * The thread also hands the buffer over itself once its oldest row is max_dwell_ms old, so the tail
 * is written even when no row follows (under real-time mode close() only comes at the end of a long
 * batch). The first error of the thread is kept and thrown by the next add() and by finish(); after
 * it nothing more is written, and onFailure is called once, at once (the writer interrupts the task
 * with it). finish() writes what is left and throws if any row was not written; abort() (the task
 * failed) drops what is not being written and cancels the write in flight at once: no retry sleep,
 * no failure reported for it.
 */
package rtm_lakebase.jvm;

import java.util.ArrayDeque;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;
import java.util.function.ToIntFunction;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import rtm_lakebase.jvm.Errors.PostgresSinkException;

final class Flusher {
    private static final Logger LOG = LoggerFactory.getLogger(Flusher.class);

    private final RowBuffer buffer;
    private final ToIntFunction<List<Object[]>> write;   // rows written; throws on failure
    private final int maxBatchRows;
    private final long dwellNanos;                       // 0: no time-based flushes
    private final SinkMetrics metrics;
    private final Consumer<RuntimeException> onFailure;
    private final String target;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    private final ArrayDeque<List<Object[]>> sealed = new ArrayDeque<>();  // first: being written
    private final ArrayDeque<Boolean> byTimer = new ArrayDeque<>();
    private final Thread thread;
    private boolean stopping;
    private volatile boolean aborted;
    private volatile String abortReason;                 // the task's failure, for the log line
    private RuntimeException error;

    Flusher(RowBuffer buffer, ToIntFunction<List<Object[]>> write, int maxBatchRows, long maxDwellMs,
            SinkMetrics metrics, String target, String name, Consumer<RuntimeException> onFailure) {
        this.buffer = buffer;
        this.write = write;
        this.maxBatchRows = maxBatchRows;
        this.dwellNanos = TimeUnit.MILLISECONDS.toNanos(maxDwellMs);
        this.metrics = metrics;
        this.target = target;
        this.onFailure = onFailure;
        this.thread = new Thread(this::run, name);
        thread.setDaemon(true);
        thread.start();
    }

    /** Buffer one row; hand the buffer over when full, waiting while another batch waits. Throws the thread's error. */
    void add(Object[] values) {
        lock.lock();
        try {
            if (error != null) {
                throw error;
            }
            int size = buffer.add(values);
            if (buffer.oldestNanos < 0) {  // the first row since the last hand-over: start the dwell timer
                buffer.oldestNanos = System.nanoTime();
                changed.signalAll();
            }
            if (size >= maxBatchRows) {
                seal(false);
                while (sealed.size() > 1 && error == null && !stopping) {
                    changed.await();
                }
                if (error != null) {
                    throw error;
                }
            }
        } catch (InterruptedException e) {
            if (error != null) {
                throw error;  // the writer interrupted this thread to report it
            }
            Thread.currentThread().interrupt();
            throw new PostgresSinkException("interrupted while waiting for a flush to " + target);
        } finally {
            lock.unlock();
        }
    }

    /** The thread's error, or null. */
    RuntimeException error() {
        lock.lock();
        try {
            return error;
        } finally {
            lock.unlock();
        }
    }

    /** Write what is left, stop the thread; throw its error (or one saying rows were left). */
    void finish() {
        lock.lock();
        try {
            if (error == null) {
                seal(false);
            }
            stopping = true;
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        join();
        lock.lock();
        try {
            if (error != null) {
                throw error;
            }
            int left = buffer.size();
            for (List<Object[]> batch : sealed) {
                left += batch.size();
            }
            if (left > 0) {
                throw new PostgresSinkException(left + " row(s) were not written to " + target
                    + ": the flusher thread stopped early");
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * The task failed with `taskFailure`: drop what is not yet being written (Spark replays it), cancel
     * the write in flight (`cancel` stops its statement; the interrupt ends a retry's sleep) and stop
     * the thread.
     */
    void abort(Throwable taskFailure, Runnable cancel) {
        abortReason = taskFailure.getClass().getSimpleName() + ": " + Errors.firstLine(String.valueOf(
            taskFailure.getMessage()));
        lock.lock();
        try {
            while (sealed.size() > 1) {
                sealed.pollLast();
                byTimer.pollLast();
            }
            buffer.clear();
            stopping = true;
            aborted = true;
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        cancel.run();
        if (thread != Thread.currentThread()) {
            thread.interrupt();
        }
        join();
        lock.lock();
        try {
            sealed.clear();
            byTimer.clear();
        } finally {
            lock.unlock();
        }
    }

    private void join() {
        if (thread == Thread.currentThread()) {
            return;
        }
        boolean interrupted = false;
        while (thread.isAlive()) {
            try {
                thread.join();
            } catch (InterruptedException e) {
                interrupted = true;  // the writer's own interrupt; the thread ends on its own
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /** Hand the buffer over to the thread (caller holds the lock). */
    private void seal(boolean timer) {
        if (buffer.size() > 0) {
            sealed.addLast(buffer.take());
            byTimer.addLast(timer);
            changed.signalAll();
        } else {
            buffer.oldestNanos = -1;
        }
    }

    private void run() {
        RuntimeException failure = null;
        try {
            loop();
        } catch (RuntimeException e) {
            failure = e;
        } catch (InterruptedException e) {
            if (aborted) {
                return;  // abort() woke the idle thread: nothing was in flight
            }
            failure = new PostgresSinkException("the flusher thread of " + target + " was interrupted");
        } catch (Error e) {
            failure = new PostgresSinkException("flush to " + target + " failed: " + e);
        }
        if (failure == null) {
            return;
        }
        lock.lock();
        try {
            if (error == null) {
                error = failure;
            }
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        if (aborted) {  // not "flush failed": the task had failed first, and this write was stopped for it
            LOG.warn("postgres JVM sink: the task failed ({}); the flush in flight to {} was abandoned unwritten "
                + "(Spark replays its rows)", abortReason, target);
            return;
        }
        LOG.error("postgres JVM sink: flush failed; nothing more is written and the task fails with this error: {}",
            failure.getMessage());
        onFailure.accept(failure);
    }

    private void loop() throws InterruptedException {
        lock.lock();
        try {
            while (!aborted) {
                if (sealed.isEmpty()) {
                    long now = System.nanoTime();
                    long oldest = buffer.oldestNanos;
                    if (oldest >= 0 && dwellNanos > 0 && now - oldest >= dwellNanos) {
                        seal(true);
                        continue;
                    }
                    if (stopping) {
                        return;
                    }
                    if (oldest >= 0 && dwellNanos > 0) {
                        changed.awaitNanos(oldest + dwellNanos - now);
                    } else {
                        changed.await();
                    }
                    continue;
                }
                List<Object[]> batch = sealed.peekFirst();
                boolean timer = byTimer.peekFirst();
                lock.unlock();
                int written;
                try {
                    written = write.applyAsInt(batch);
                } finally {
                    lock.lock();
                }
                if (sealed.peekFirst() == batch) {
                    sealed.pollFirst();
                    byTimer.pollFirst();
                }
                metrics.flushes++;
                metrics.flushesByTimer += timer ? 1 : 0;
                metrics.rowsWritten += written;
                changed.signalAll();
            }
        } finally {
            lock.unlock();
        }
    }
}
