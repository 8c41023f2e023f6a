/*
 * What a failed connect or write leads to, read from the table both sinks share
 * (rtm_lakebase/sink/outcomes.json, copied into the jar by `python -m rtm_lakebase.jvm build`; twin of
 * outcome_rule/classify in rtm_lakebase/sink/errors.py). Rules are tried in order and the first
 * that matches decides: its phase ("any", "connect" or "write"), its SQLSTATE (5 characters: that
 * code; 2: that class) or, for a failure without one, the kind of client-side failure, and
 * optionally fragments of the message. No rule: the table's default.
 */
package rtm_lakebase.jvm;

import java.io.IOException;
import java.io.InputStream;
import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTransientConnectionException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

public final class Outcomes {
    static final String RESOURCE = "rtm_lakebase/jvm/outcomes.json";

    /** What the sink does; TIMEOUT is a bad_row rule bounded_by_flush_time. */
    enum Outcome {
        RECONNECT("connection lost"), RETRY("lock conflict"), BAD_ROW("bad row"), TIMEOUT("timeout"),
        PERMANENT("permanent");

        final String description;

        Outcome(String description) {
            this.description = description;
        }

        boolean retried() {
            return this == RECONNECT || this == RETRY;
        }

        /** Not retried: the flush is replayed row by row to name the row. */
        boolean diagnosed() {
            return this == BAD_ROW || this == TIMEOUT;
        }
    }

    /** One rule of the table. */
    static final class Rule {
        final String phase;
        final String sqlstate;          // null: any
        final String client;            // null: any
        final List<String> message;     // null: any
        final Outcome outcome;

        Rule(String phase, String sqlstate, String client, List<String> message, Outcome outcome) {
            this.phase = phase;
            this.sqlstate = sqlstate;
            this.client = client;
            this.message = message;
            this.outcome = outcome;
        }

        boolean matches(String state, String phase, String client, String text) {
            if (!this.phase.equals("any") && !this.phase.equals(phase)) {
                return false;
            }
            if (sqlstate != null && !(state != null && (state.equals(sqlstate)
                    || (sqlstate.length() == 2 && state.startsWith(sqlstate))))) {
                return false;
            }
            if (this.client != null && (state != null || !this.client.equals(client))) {
                return false;
            }
            if (message != null) {
                for (String fragment : message) {
                    if (text.contains(fragment)) {
                        return true;
                    }
                }
                return false;
            }
            return true;
        }
    }

    private static final List<Rule> RULES = new ArrayList<>();
    private static final Outcome DEFAULT;

    static {
        try (InputStream in = Outcomes.class.getClassLoader().getResourceAsStream(RESOURCE)) {
            if (in == null) {
                throw new IllegalStateException("the JVM sink's jar lacks " + RESOURCE
                    + ": rebuild it with scripts/build_jvm_sink.sh");
            }
            JsonNode table = new ObjectMapper().readTree(in);
            for (JsonNode r : table.get("rules")) {
                List<String> message = null;
                if (r.has("message")) {
                    message = new ArrayList<>();
                    for (JsonNode m : r.get("message")) {
                        message.add(m.asText());
                    }
                }
                RULES.add(new Rule(r.get("phase").asText(), text(r, "sqlstate"), text(r, "client"), message,
                    outcome(r.get("outcome").asText(), r.path("bounded_by_flush_time").asBoolean(false))));
            }
            DEFAULT = outcome(table.get("default").asText(), false);
        } catch (IOException e) {
            throw new IllegalStateException("cannot read " + RESOURCE + ": " + e.getMessage(), e);
        }
    }

    private Outcomes() { }

    /** The number of rules; calling it loads the table, so a jar without it fails when the writer is built. */
    static int rules() {
        return RULES.size();
    }

    private static String text(JsonNode r, String field) {
        return r.has(field) ? r.get(field).asText() : null;
    }

    private static Outcome outcome(String name, boolean bounded) {
        switch (name) {
            case "reconnect": return Outcome.RECONNECT;
            case "retry": return Outcome.RETRY;
            case "bad_row": return bounded ? Outcome.TIMEOUT : Outcome.BAD_ROW;
            case "permanent": return Outcome.PERMANENT;
            default: throw new IllegalStateException(RESOURCE + ": unknown outcome " + name);
        }
    }

    /** The outcome of a failure with this SQLSTATE (or none), phase, client kind and message. */
    static Outcome of(String sqlstate, String phase, String client, String message) {
        String text = message == null ? "" : message.toLowerCase(Locale.ROOT);
        String state = sqlstate == null || sqlstate.isEmpty() ? null : sqlstate;
        for (Rule rule : RULES) {
            if (rule.matches(state, phase, client, text)) {
                return rule.outcome;
            }
        }
        return DEFAULT;
    }

    /** The outcome of `e`, raised while connecting (login) or writing. */
    static Outcome classify(Throwable e, boolean connecting) {
        String state = e instanceof SQLException ? Errors.sqlState((SQLException) e) : null;
        String message = e instanceof SQLException ? Errors.root((SQLException) e).getMessage() : e.getMessage();
        return of(state, connecting ? "connect" : "write", state == null ? clientKind(e) : null, message);
    }

    /** What the driver detected, for a failure without a SQLSTATE (the table's "clients"). */
    static String clientKind(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (t instanceof SQLRecoverableException || t instanceof SQLTransientConnectionException
                    || t instanceof IOException) {
                return "connection_lost";
            }
            if (t instanceof ClassCastException || t instanceof IllegalArgumentException
                    || t instanceof ArithmeticException) {
                return "cannot_encode";
            }
        }
        return null;
    }

    /** For the parity suite: the outcome name the table gives (retry, reconnect, bad_row, permanent). */
    public static String outcomeName(String sqlstate, String phase, String client, String message) {
        Outcome o = of(sqlstate, phase, client, message);
        return o == Outcome.TIMEOUT ? "bad_row" : o.name().toLowerCase(Locale.ROOT);
    }
}
