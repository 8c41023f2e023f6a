#!/usr/bin/env bash
# Builds the pack's Java classes into cached jars and makes sure the Postgres JDBC driver is
# there: the JVM sink (every rtm_lakebase/jvm/*.java → rtm_lakebase/jvm/build/) and the fast
# Python foreach writer (rtm_lakebase/foreach/*.java → rtm_lakebase/foreach/build/) with
# `python -m rtm_lakebase.jvm build` (the command a user of the installed package runs), and the lab's
# rate source (pack_lab/jvm/*.java → pack_lab/jvm/build/) with `python -m pack_lab.build_rate_source`,
# the same build. This script adds what a fresh machine needs first (the JDBC driver, a JDK under CI). Sourced by
# scripts/setup.sh after the venv exists ($PY set); can also run alone:
# `bash scripts/build_jvm_sink.sh`.
#
# - Each jar goes to its build/ folder (git-ignored). It is rebuilt only when its sources,
#   javac or pyspark change (a content stamp); a .sha256 file next to it records the sources'
#   hash (the .java files concatenated in name order), which the Python side
#   (rtm_lakebase.jvm.sink, rtm_lakebase.foreach) checks before using the jar.
# - The JDBC driver: $PG_JDBC_JAR, else the pinned pgjdbc in .cache/jars/pgjdbc/ (scripts/install_jars.sh),
#   else Debian's /usr/share/java/postgresql.jar, installed here with apt-get
#   (libpostgresql-jdbc-java) when running as root with apt.
# - Without javac (or the driver) this prints how to get it and goes on: the Python sink
#   works without the JVM one, and the JVM sink's tests skip saying why. Under CI (CI=true)
#   it installs what is missing when it can and stops when the sink still cannot be built.
if [ -z "${BASH_VERSION:-}" ]; then echo "build_jvm_sink.sh: run it with bash" >&2; exit 1; fi
_jvm_sink_sourced=1
[ "${BASH_SOURCE[0]}" = "$0" ] && _jvm_sink_sourced=0

_jvm_sink_build() {
  local root py javac_bin
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  py="${PY:-$root/.venv/bin/python}"
  local ci=0
  [ "${CI:-}" = "true" ] || [ "${CI:-}" = "1" ] && ci=1
  _jvm_say() { printf '[setup] %s\n' "$*" >&2; }
  _jvm_can_apt() { [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; }
  _jvm_apt_install() {  # package...: quiet install; refresh the package lists once if needed
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 && return 0
    apt-get update -q >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1
  }

  # --- the Postgres JDBC driver ----------------------------------------------------
  if [ -n "${PG_JDBC_JAR:-}" ]; then
    if [ ! -f "$PG_JDBC_JAR" ]; then
      _jvm_say "PG_JDBC_JAR=$PG_JDBC_JAR is not a file; point it at postgresql-42.x.jar (the JVM sink needs it)"
      [ "$ci" = 1 ] && return 1
    fi
  elif ls "$root"/.cache/jars/pgjdbc/postgresql-*.jar >/dev/null 2>&1 && [ -f "$root/.cache/jars/pgjdbc/.verified" ]; then
    :  # the pinned pgjdbc that scripts/install_jars.sh fetched from Maven Central (the default)
  elif [ ! -f /usr/share/java/postgresql.jar ]; then
    if _jvm_can_apt; then
      _jvm_say "installing the Postgres JDBC driver (apt-get install libpostgresql-jdbc-java)"
      _jvm_apt_install libpostgresql-jdbc-java || _jvm_say "apt-get could not install libpostgresql-jdbc-java"
    fi
    if [ ! -f /usr/share/java/postgresql.jar ]; then
      _jvm_say "the Postgres JDBC driver is missing, so the JVM sink cannot run: install it (Debian/Ubuntu: sudo apt-get install libpostgresql-jdbc-java) or set PG_JDBC_JAR=/path/to/postgresql-42.x.jar"
      [ "$ci" = 1 ] && return 1
    fi
  fi

  # --- javac -------------------------------------------------------------------------
  javac_bin=""
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/javac" ]; then
    javac_bin="$JAVA_HOME/bin/javac"
  elif command -v javac >/dev/null 2>&1; then
    javac_bin="$(command -v javac)"
  fi
  if [ -z "$javac_bin" ] && [ "$ci" = 1 ] && _jvm_can_apt; then
    _jvm_say "installing a JDK for the JVM sink (apt-get install openjdk-17-jdk-headless)"
    _jvm_apt_install openjdk-17-jdk-headless && javac_bin="$(command -v javac || true)"
  fi
  if [ -z "$javac_bin" ]; then
    _jvm_say "javac not found: the JVM sink (rtm_lakebase/jvm) and the fast foreach writer (rtm_lakebase/foreach) are not built and their tests will skip; the Python sink works. To build it, install a JDK 17+ (Debian/Ubuntu: sudo apt-get install openjdk-17-jdk-headless) and re-run"
    [ "$ci" = 1 ] && return 1
    return 0
  fi

  # --- compile when the source, javac or pyspark changed (one build definition: rtm_lakebase.jvm.build) -------
  # The driver was handled above, so the module is not asked about it (a wrong PG_JDBC_JAR is only a warning here).
  (cd "$root" && export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" && unset PG_JDBC_JAR &&
     "$py" -m rtm_lakebase.jvm build >/dev/null && "$py" -m pack_lab.build_rate_source) || return 1
  return 0
}

if [ "$_jvm_sink_sourced" = 1 ]; then
  _jvm_sink_build || die "the JVM sink, the fast foreach writer or the lab rate source could not be built (see the messages above)"
else
  set -euo pipefail
  _jvm_sink_build || { echo "build_jvm_sink: the JVM sink, the fast foreach writer or the lab rate source could not be built (see the messages above)" >&2; exit 1; }
fi
