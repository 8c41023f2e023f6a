/*
 * The JVM sink's token-provider hook: the option passwordprovider=com.example.MyProvider names a
 * class implementing this interface with a public no-argument constructor. The sink creates one
 * instance per writer on the executor (by reflection, through the task's class loader) and asks it
 * for the password every time it opens a new Postgres connection, so a short-lived OAuth token
 * (Lakebase: one hour) is fresh at each connect. Put the class in a jar on spark.jars.
 *
 * The password is never logged or put in a message; a provider that cannot be loaded or that
 * throws fails the connect with one line naming the class and the exception's class only.
 */
package rtm_lakebase.jvm;

public interface PgPasswordProvider {
    /** The password (or OAuth token) for the next connection; not null, not empty. */
    String password();

    /** An instance of `className` (a PgPasswordProvider with a public no-arg constructor). */
    static PgPasswordProvider load(String className) {
        ClassLoader[] loaders = {Thread.currentThread().getContextClassLoader(), PgPasswordProvider.class.getClassLoader()};
        Class<?> found = null;
        for (ClassLoader loader : loaders) {
            if (loader == null) {
                continue;
            }
            try {
                found = Class.forName(className, true, loader);
                break;
            } catch (ClassNotFoundException e) {
                // try the next loader
            } catch (LinkageError e) {
                throw new Errors.PostgresSinkException("password_provider " + className
                    + " could not be loaded: " + e.getClass().getName());
            }
        }
        if (found == null) {
            throw new Errors.PostgresSinkException("password_provider class " + className
                + " is not on the classpath: add its jar to spark.jars");
        }
        if (!PgPasswordProvider.class.isAssignableFrom(found)) {
            throw new Errors.PostgresSinkException("password_provider " + className
                + " does not implement " + PgPasswordProvider.class.getName());
        }
        try {
            return (PgPasswordProvider) found.getDeclaredConstructor().newInstance();
        } catch (NoSuchMethodException e) {
            throw new Errors.PostgresSinkException("password_provider " + className
                + " has no public no-argument constructor");
        } catch (ReflectiveOperationException | RuntimeException e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            throw new Errors.PostgresSinkException("password_provider " + className
                + " could not be created: " + cause.getClass().getName() + " (its message is not shown: it may hold a secret)");
        }
    }
}
