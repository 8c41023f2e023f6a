"""Compile the lab's rate source (``pack_lab/jvm/*.java``) with the user's jar build: ``python -m pack_lab.build_rate_source``.

One build definition (:mod:`rtm_lakebase.jvm.build`) for every jar; this only names the lab's
folder and jar. ``scripts/build_jvm_sink.sh`` runs it after ``python -m rtm_lakebase.jvm build``.
"""

from __future__ import annotations

import sys

from pack_lab.rate_source import DEFAULT_JAR, JVM_DIR
from rtm_lakebase.jvm.build import BuildError, compile_jar, find_javac, pyspark_jars


def main() -> int:
    try:
        compile_jar(JVM_DIR, DEFAULT_JAR, label="lab rate source", javac=find_javac(), jars=pyspark_jars(),
                    created_by="pack_lab.build_rate_source")
    except BuildError as exc:
        print(f"pack_lab.build_rate_source: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
