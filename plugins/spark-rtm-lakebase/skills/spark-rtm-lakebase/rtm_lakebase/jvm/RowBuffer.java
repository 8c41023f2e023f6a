/*
 * The rows waiting for the next flush: one per key, handed over sorted by key (twin of
 * rtm_lakebase/sink/buffer.py).
 *
 * A key seen again replaces the buffered row ("last row wins"), except with a version column, where
 * only a strictly newer version replaces it (on equal versions the first row stays, as the
 * statement's guard does across flushes), and in insert_ignore mode, where the first row stays.
 * Keys are compared as Postgres compares them (char(n) without trailing spaces, citext folded), so
 * one statement never touches a key twice. take() returns the rows sorted by key: concurrent tasks
 * then lock shared keys in one order and wait for each other instead of deadlocking. Append mode
 * has no key: rows are kept as they come. Not thread-safe: the Flusher's lock guards it.
 */
package rtm_lakebase.jvm;

import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.function.Function;

final class RowBuffer {
    static final int KEY_AS_IS = 0;
    static final int KEY_NO_TRAILING_SPACES = 1;  // char(n): trailing spaces do not count
    static final int KEY_FOLD_ASCII = 2;          // citext under the "C" collation
    static final int KEY_FOLD = 3;                // citext where lower() folds more than A-Z

    private final int[] keyIndex;   // null: append, no key
    private final int[] keyForm;
    private final int versionIndex; // -1: none
    private final boolean firstWins;
    private final Function<Object[], RuntimeException> nullKey;
    private final LinkedHashMap<List<Object>, Object[]> keyed = new LinkedHashMap<>();
    private final ArrayList<Object[]> appended = new ArrayList<>();
    /** System.nanoTime() of the oldest buffered row, or -1 (set by the Flusher). */
    long oldestNanos = -1;

    /** `nullKey` builds the error for a row with a null key column (it is thrown by add()). */
    RowBuffer(int[] keyIndex, int[] keyForm, int versionIndex, boolean firstWins,
              Function<Object[], RuntimeException> nullKey) {
        this.keyIndex = keyIndex;
        this.keyForm = keyForm;
        this.versionIndex = versionIndex;
        this.firstWins = firstWins;
        this.nullKey = nullKey;
    }

    /** How Postgres compares a key column of this base type. */
    static int keyForm(String baseType, boolean foldUnicode) {
        if (baseType.equals("character")) {
            return KEY_NO_TRAILING_SPACES;
        }
        if (baseType.equals("citext")) {
            return foldUnicode ? KEY_FOLD : KEY_FOLD_ASCII;
        }
        return KEY_AS_IS;
    }

    int size() {
        return keyIndex == null ? appended.size() : keyed.size();
    }

    /** Buffer one row; returns the number of rows (keys) now buffered. */
    int add(Object[] values) {
        if (keyIndex == null) {
            appended.add(values);
            return appended.size();
        }
        List<Object> key = keyOf(values);
        if (key.contains(null)) {
            throw nullKey.apply(values);
        }
        Object[] previous = keyed.putIfAbsent(key, values);
        if (previous != null && keepsNew(previous, values)) {
            keyed.put(key, values);
        }
        return keyed.size();
    }

    /** The buffered rows (sorted by key when there is one); the buffer is empty afterwards. */
    List<Object[]> take() {
        List<Object[]> batch = keyIndex == null ? new ArrayList<>(appended) : new ArrayList<>(keyed.values());
        clear();
        if (keyIndex != null) {
            batch.sort(this::compareKeys);
        }
        return batch;
    }

    void clear() {
        keyed.clear();
        appended.clear();
        oldestNanos = -1;
    }

    private boolean keepsNew(Object[] previous, Object[] next) {
        if (firstWins) {
            return false;  // insert_ignore: the first row for a key wins, as ON CONFLICT DO NOTHING does
        }
        if (versionIndex < 0) {
            return true;  // last row wins
        }
        // The statement's rule: only a strictly newer version replaces a row; on a tie the first wins.
        Object oldV = previous[versionIndex];
        Object newV = next[versionIndex];
        if (newV == null) {
            return false;
        }
        return oldV == null || compareValues(newV, oldV) > 0;
    }

    /** The key as Postgres compares it: keys one to Postgres are one in the buffer. */
    private List<Object> keyOf(Object[] values) {
        Object[] key = new Object[keyIndex.length];
        for (int i = 0; i < keyIndex.length; i++) {
            Object v = values[keyIndex[i]];
            if (v instanceof String && keyForm[i] != KEY_AS_IS) {
                v = keyText((String) v, keyForm[i]);
            }
            key[i] = v instanceof byte[] ? ByteBuffer.wrap((byte[]) v) : v;
        }
        return Arrays.asList(key);
    }

    static String keyText(String v, int form) {
        if (form == KEY_NO_TRAILING_SPACES) {
            int end = v.length();
            while (end > 0 && v.charAt(end - 1) == ' ') {
                end--;
            }
            return v.substring(0, end);
        }
        if (form == KEY_FOLD) {
            return v.toLowerCase(Locale.ROOT);
        }
        StringBuilder b = new StringBuilder(v.length());
        for (int i = 0; i < v.length(); i++) {
            char c = v.charAt(i);
            b.append(c >= 'A' && c <= 'Z' ? (char) (c + 32) : c);
        }
        return b.toString();
    }

    private int compareKeys(Object[] a, Object[] b) {
        for (int i : keyIndex) {
            int c = compareValues(a[i], b[i]);
            if (c != 0) {
                return c;
            }
        }
        return 0;
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static int compareValues(Object a, Object b) {
        if (a instanceof byte[] && b instanceof byte[]) {
            return Arrays.compare((byte[]) a, (byte[]) b);
        }
        if (a instanceof Comparable && a.getClass() == b.getClass()) {
            return ((Comparable) a).compareTo(b);
        }
        if (a instanceof Number && b instanceof Number) {
            return new BigDecimal(a.toString()).compareTo(new BigDecimal(b.toString()));
        }
        return String.valueOf(a).compareTo(String.valueOf(b));
    }
}
