#!/usr/bin/env bash
# Fetches the pinned jars the lab takes from Maven Central, builds Spark's Kafka connector for the
# pinned PySpark and builds the lab's Kafka client.
# Sourced by scripts/setup.sh after the venv exists ($PY set); can also run alone:
# `bash scripts/install_jars.sh`.
#
# - pack_lab/maven_jars.py resolves each set with Maven into .cache/jars/<set>/ and checks every
#   jar against pack_lab/maven_jars.lock.json (sha256): the Kafka broker (kafka-broker) and the
#   Postgres JDBC driver (pgjdbc). Cached sets are not fetched again.
# - pack_lab/kafka_connector.py builds Spark's Kafka connector for the pinned PySpark: Maven
#   Central serves no spark-sql-kafka-0-10 for 4.3.0, so the newest served sources jar (4.2.0,
#   pinned sha256) is compiled with the pyspark wheel's own scala-compiler (-release 17) against
#   the wheel's jars, the token-provider 4.2.0 binary, kafka-clients and commons-pool2, and packed
#   into .cache/jars/spark-kafka-4.3.0/ with a stamp (a warm cache costs about a second; a changed
#   input rebuilds, about two minutes). The 4.1.4/4.2.1 connectors are built the same way by the
#   spark_versions tests, in those versions' venvs.
# - pack_lab/jvm/kafka/KafkaLab.java (create a topic, produce, read a topic back) is compiled
#   against the connector's kafka-clients into pack_lab/jvm/kafka/build/rtm-lab-kafka.jar.
# - Without Maven or javac this says what is missing and goes on (the kafka tests skip saying
#   why); under CI (CI=true) it installs Maven with apt-get when it can, and stops on failure.
if [ -z "${BASH_VERSION:-}" ]; then echo "install_jars.sh: run it with bash" >&2; exit 1; fi
_jars_sourced=1
[ "${BASH_SOURCE[0]}" = "$0" ] && _jars_sourced=0

_jars_install() {
  local root py ci=0 javac_bin src build jar stamp clients tmp
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  py="${PY:-$root/.venv/bin/python}"
  [ "${CI:-}" = "true" ] || [ "${CI:-}" = "1" ] && ci=1
  _jars_say() { printf '[setup] %s\n' "$*" >&2; }

  if ! command -v mvn >/dev/null 2>&1; then
    if [ "$ci" = 1 ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      _jars_say "installing Maven (apt-get install maven) to fetch the pinned Kafka and JDBC jars"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends maven >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends maven >/dev/null 2>&1; } || true
    fi
    if ! command -v mvn >/dev/null 2>&1; then
      _jars_say "Maven (mvn) not found: the Kafka broker, Spark's Kafka connector and pgjdbc 42.7 are not fetched, so the kafka tests skip and the JVM sink falls back to Debian's driver. Install it (Debian/Ubuntu: apt-get install maven; macOS: brew install maven) and re-run"
      [ "$ci" = 1 ] && return 1
      return 0
    fi
  fi
  (cd "$root" && "$py" -m pack_lab.maven_jars fetch kafka-broker pgjdbc) || return 1
  (cd "$root" && "$py" -m pack_lab.kafka_connector build 4.3.0) || return 1

  # --- the lab's Kafka client (pack_lab/jvm/kafka) ------------------------------------
  javac_bin=""
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/javac" ]; then javac_bin="$JAVA_HOME/bin/javac"
  elif command -v javac >/dev/null 2>&1; then javac_bin="$(command -v javac)"; fi
  if [ -z "$javac_bin" ]; then
    _jars_say "javac not found: the lab's Kafka client (pack_lab/jvm/kafka) is not built and the kafka tests skip"
    [ "$ci" = 1 ] && return 1
    return 0
  fi
  src="$root/pack_lab/jvm/kafka"
  build="$src/build"
  jar="$build/rtm-lab-kafka.jar"
  clients="$(cd "$root" && "$py" -c 'from pack_lab.kafka_connector import kafka_clients_jar; print(kafka_clients_jar())')" || return 1
  stamp="$(cat "$src"/*.java | sha256sum | cut -d' ' -f1) $("$javac_bin" -version 2>&1 | head -n 1) $(basename "$clients")"
  if [ -f "$jar" ] && [ "$(cat "$build/.build-stamp" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  _jars_say "compiling the lab's Kafka client (pack_lab/jvm/kafka → ${jar#"$root"/})"
  mkdir -p "$build"
  tmp="$(mktemp -d "$build/.tmp.XXXXXX")"
  if ! "$javac_bin" --release 17 -Xlint:all,-path -encoding UTF-8 -cp "$clients" -d "$tmp/classes" "$src"/*.java >&2; then
    rm -rf "$tmp"; _jars_say "javac failed on pack_lab/jvm/kafka/*.java (messages above)"; return 1
  fi
  (cd "$tmp/classes" && "$py" -c '
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: scripts/install_jars.sh\n\n")
    for folder, _, files in sorted(os.walk(".")):
        for name in sorted(files):
            path = os.path.join(folder, name)
            z.write(path, os.path.relpath(path, "."))
' "$tmp/out.jar") || { rm -rf "$tmp"; return 1; }
  mv -f "$tmp/out.jar" "$jar"
  printf '%s' "$stamp" > "$build/.build-stamp"
  rm -rf "$tmp"
  return 0
}

if [ "$_jars_sourced" = 1 ]; then
  _jars_install || die "the pinned jars (Kafka broker, Spark's Kafka connector, pgjdbc) could not be fetched or built, or the lab's Kafka client could not be built (see the messages above)"
else
  set -euo pipefail
  _jars_install || { echo "install_jars: the pinned jars could not be fetched or built, or the lab's Kafka client could not be built (see the messages above)" >&2; exit 1; }
fi
