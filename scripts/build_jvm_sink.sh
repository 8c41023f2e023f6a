#!/usr/bin/env bash
# Builds the pack's Java classes into cached jars and makes sure the Postgres JDBC driver is
# there: the JVM sink (every rtm_lakebase/jvm/*.java → rtm_lakebase/jvm/build/) and the fast
# Python foreach writer (rtm_lakebase/foreach/*.java → rtm_lakebase/foreach/build/), and the lab's
# rate source (pack_lab/jvm/*.java → pack_lab/jvm/build/, see pack_lab/rate_source.py). Sourced by
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

# _jvm_compile SRC_DIR BUILD_DIR NAME LABEL: javac every SRC_DIR/*.java against pyspark's jars into
# BUILD_DIR/NAME.jar (+ NAME.sha256, the sources' hash), unless the content stamp says it is current.
# Uses $root, $javac_bin, $jars_dir and $py from _jvm_sink_build.
_jvm_compile() {
  local src_dir="$1" build="$2" name="$3" label="$4" srcs jar stamp_file sha_file tmp src_sha stamp
  srcs=()
  while IFS= read -r _f; do srcs+=("$_f"); done < <(LC_ALL=C ls -1 "$src_dir"/*.java)
  jar="$build/$name.jar"
  stamp_file="$build/.build-stamp"
  sha_file="$build/$name.sha256"
  src_sha="$(cat "${srcs[@]}" | sha256sum | cut -d' ' -f1)"
  stamp="$src_sha $("$javac_bin" -version 2>&1 | head -n 1) $(ls "$jars_dir" | grep -E '^spark-sql-api_' || true)"
  if [ -f "$jar" ] && [ "$(cat "$stamp_file" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  _jvm_say "compiling $label (${#srcs[@]} Java files → ${jar#"$root"/})"
  mkdir -p "$build"
  tmp="$(mktemp -d "$build/.tmp.XXXXXX")"
  if ! "$javac_bin" --release 17 -Xlint:all,-path -encoding UTF-8 -cp "$jars_dir/*" -d "$tmp/classes" "${srcs[@]}" >"$tmp/javac.log" 2>&1; then
    cat "$tmp/javac.log" >&2
    rm -rf "$tmp"
    _jvm_say "javac failed on ${src_dir#"$root"/}/*.java (messages above)"
    return 1
  fi
  # Compiler warnings about Spark's own annotations are noise; anything about our files is shown.
  grep -F "${src_dir#"$root"/}/" "$tmp/javac.log" >&2 || true
  (cd "$tmp/classes" && "$py" -c '
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: scripts/build_jvm_sink.sh\n\n")
    for folder, _, files in sorted(os.walk(".")):
        for name in sorted(files):
            path = os.path.join(folder, name)
            z.write(path, os.path.relpath(path, "."))
' "$tmp/out.jar") || { rm -rf "$tmp"; _jvm_say "could not write the $label jar"; return 1; }
  mv -f "$tmp/out.jar" "$jar"
  printf '%s\n' "$src_sha" > "$sha_file"
  printf '%s' "$stamp" > "$stamp_file"
  rm -rf "$tmp"
  return 0
}

_jvm_sink_build() {
  local root py jars_dir javac_bin driver
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

  # --- compile when the source, javac or pyspark changed ------------------------------
  jars_dir="$("$py" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))' 2>/dev/null)" \
    || { _jvm_say "pyspark is not importable with $py; cannot build the JVM sink"; return 1; }
  [ -d "$jars_dir" ] || { _jvm_say "pyspark's jars folder $jars_dir is missing; cannot build the JVM sink"; return 1; }
  _jvm_compile "$root/rtm_lakebase/jvm" "$root/rtm_lakebase/jvm/build" rtm-lakebase-jvm-sink "the JVM sink" || return 1
  _jvm_compile "$root/rtm_lakebase/foreach" "$root/rtm_lakebase/foreach/build" rtm-lakebase-foreach \
    "the fast foreach writer" || return 1
  _jvm_compile "$root/pack_lab/jvm" "$root/pack_lab/jvm/build" rtm-lab-rate-source "lab rate source" || return 1
  return 0
}

if [ "$_jvm_sink_sourced" = 1 ]; then
  _jvm_sink_build || die "the JVM sink, the fast foreach writer or the lab rate source could not be built (see the messages above)"
else
  set -euo pipefail
  _jvm_sink_build || { echo "build_jvm_sink: the JVM sink, the fast foreach writer or the lab rate source could not be built (see the messages above)" >&2; exit 1; }
fi
