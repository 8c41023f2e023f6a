"""One positive (the code must appear) and one negative (it must not) fixture per finding code.

Each fixture mutates a clean mini pack (see packbuilder.make_pack). The
negative fixture is the corrected form of the positive one wherever that
makes sense, so each pair pins the rule's boundary.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from skillcheck.limits import MAX_FILE_BYTES, MAX_FINDINGS_PER_FILE
from skillcheck.regenerate import regenerate_markdown
from tests.validator.packbuilder import REPO, add_block, add_prose, write_manifest

RT = '.outputMode("update").trigger(realTime="5 seconds").start()'


def _edit(root: Path, rel: str, old: str, new: str, regenerate: bool = True) -> None:
    p = root / rel
    text = p.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {rel}"
    p.write_text(text.replace(old, new, 1), encoding="utf-8")
    if regenerate:
        write_manifest(root)


def _write(root: Path, rel: str, text: str, regenerate: bool = True) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    if regenerate:
        write_manifest(root)


def _nothing(root: Path) -> None:
    pass


def _py(code: str, before: str = ""):
    return lambda root: add_block(root, textwrap.dedent(code), before=before)


def _prose(text: str, before: str = ""):
    return lambda root: add_prose(root, text, before=before)


def _reference(root: Path, rel: str, listed: bool) -> None:
    _write(root, rel, "# Extra\n\nA short summary paragraph.\n", regenerate=False)
    if listed:
        _edit(root, "SKILL.md", "| Writing a real-time query. |",
              f"| Writing a real-time query. |\n| [Extra]({rel}) | Needing the extra page. |", regenerate=False)
    write_manifest(root)


def _module(name: str, body: str):
    return lambda root: _write(root, f"examples/{name}.py", body)


def _generated(name: str = "foreach-latency", body: str | None = None, source: bool = True):
    """A generated block in the guide (the real foreach-latency generator and JSON copied in); body None = current."""
    def build(root: Path) -> None:
        for rel in ("benchmarks/foreach_latency.py", "benchmarks/results/foreach_latency.json"):
            if rel.endswith(".json") and not source:
                continue
            _write(root, rel, (REPO / rel).read_text(encoding="utf-8"), regenerate=False)
        inner = body if body is not None else "placeholder"
        add_prose(root, f"<!-- generated:{name} -->\n\n{inner}\n\n<!-- /generated:{name} -->")
        if body is None:
            regenerate_markdown(root)
        write_manifest(root)
    return build


def _figure(marker: str, number: str):
    """A sentence quoting a figure from a small result file (written into the mini pack)."""
    def build(root: Path) -> None:
        _write(root, "benchmarks/results/bench.json",
               json.dumps({"points": [{"path": "jvm", "rate": 1000, "p50": 22},
                                      {"path": "fast", "rate": 1000, "p50": 1287}]}), regenerate=False)
        add_prose(root, f"Rows were visible after {marker}{number} ms at the median.")
    return build


def _fifo(root: Path) -> None:
    os.mkfifo(root / "references" / "pipe.md")


def _many_links(n: int):
    return _prose("\n\n".join(f"See [page {i}](missing-{i}.md)." for i in range(n)))


BAD_RT = "df.writeStream.foreach(w).outputMode(\"update\").trigger(realTime=True).start()\n"

CASES: dict[str, tuple] = {
    "PACK001": (lambda r: (r / "SKILL.md").unlink(), _nothing),
    "PACK002": (lambda r: (r / "references" / "guide.md").write_bytes(b"# Guide\n\nBad byte \xff here.\n"),
                lambda r: _edit(r, "references/guide.md", "in one paragraph", "in one caf\u00e9 paragraph")),
    "PACK003": (_fifo, lambda r: _write(r, "references/pipe.md", "# Pipe\n\nA regular file.\n", regenerate=False)),
    "PACK004": (lambda r: _write(r, "references/guide.md", "# Guide\n\nBig.\n\n" + "x\n" * (MAX_FILE_BYTES // 2), regenerate=False),
                lambda r: _write(r, "references/guide.md", "# Guide\n\nBig.\n\n" + "x\n" * (MAX_FILE_BYTES // 2 - 20))),
    "PACK005": (_many_links(MAX_FINDINGS_PER_FILE + 1), _many_links(MAX_FINDINGS_PER_FILE)),
    "GEN001": (_generated(body="| stale | table |"), _generated()),
    "GEN002": (_generated(name="no-such-generator"), _generated()),
    "GEN003": (_generated(source=False), _generated()),
    "FIG001": (_figure("<!-- fig: bench.json#/points[path=jvm,rate=1000]/p50 -->", "18"),
               _figure("<!-- fig: bench.json#/points[path=jvm,rate=1000]/p50 -->", "22")),
    "FIG002": (_figure("<!-- fig: bench.json#/points[rate=1000]/p50 -->", "22"),
               _figure("<!-- fig: bench.json#/points[path=fast]/p50 /1000:.1f -->", "1.3")),
    "FM001": (lambda r: _edit(r, "SKILL.md", "license: Apache-2.0", "license: [unclosed", regenerate=False),
              _nothing),
    "FM002": (lambda r: _edit(r, "SKILL.md", "license: Apache-2.0", "license: Apache-2.0\nversion: \"1\""),
              lambda r: _edit(r, "SKILL.md", "  version: \"1.2.3\"", "  version: \"1.2.4\"")),
    "FM003": (lambda r: _edit(r, "SKILL.md", "name: mini-skill", "name: mini--skill"),
              lambda r: _edit(r, "SKILL.md", "name: mini-skill", "name: mini-skill-2") or
              _edit(r, "pyproject.toml", '"mini-skill"', '"mini-skill-2"')),
    "FM004": (lambda r: _edit(r, "SKILL.md", "name: mini-skill", "name: other-skill"), _nothing),
    "FM005": (lambda r: _edit(r, "SKILL.md", "A small pack used", "A <small> pack used"),
              lambda r: _edit(r, "SKILL.md", "A small pack used", "A small pack (tiny) used")),
    "FM006": (lambda r: _edit(r, "SKILL.md", "# Mini skill\n", "# Mini skill\n" + "\nline" * 510),
              lambda r: _edit(r, "SKILL.md", "# Mini skill\n", "# Mini skill\n" + "\nline" * 300)),
    "FM007": (lambda r: _edit(r, "SKILL.md", '  version: "1.2.3"', "  version: 1.2"),
              lambda r: _edit(r, "SKILL.md", '  version: "1.2.3"', '  version: "1.2"')),
    "ROUTE001": (lambda r: _reference(r, "references/extra.md", listed=False),
                 lambda r: _reference(r, "references/extra.md", listed=True)),
    "ROUTE002": (lambda r: _reference(r, "references/deep/extra.md", listed=True),
                 lambda r: _reference(r, "references/extra.md", listed=True)),
    "MAN001": (lambda r: (r / "manifest.json").unlink(), _nothing),
    "MAN002": (lambda r: (r / "manifest.json").write_text("{\"generated\": ", encoding="utf-8"), _nothing),
    "MAN003": (lambda r: (r / "manifest.json").write_text(
        json.dumps(dict(json.loads((r / "manifest.json").read_text()), extra=1)), encoding="utf-8"), _nothing),
    "MAN004": (lambda r: _edit(r, "references/guide.md", "in one paragraph", "in one short paragraph", regenerate=False),
               lambda r: _edit(r, "references/guide.md", "in one paragraph", "in one short paragraph")),
    "MAN005": (lambda r: (r / "schemas" / "manifest.schema.json").write_text(
        '{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": 5}', encoding="utf-8"), _nothing),
    "FENCE001": (lambda r: add_block(r, "plain words", lang=""), lambda r: add_block(r, "plain words", lang="text")),
    "FENCE002": (_prose("```python\nx = 1\n"), _prose("```python\nx = 1\n```\n")),
    "HTML001": (_prose("Before.\n\n<!-- never closed\n\nAfter."), _prose("Before.\n\n<!-- closed\n-->\n\nAfter.")),
    "REF001": (lambda r: _edit(r, "references/guide.md", "# Guide\n\nHow", "# Guide\n\n## Start\n\nHow"),
              lambda r: _edit(r, "references/guide.md", "How to write", "This page shows how to write")),
    "LINK001": (_prose("See [the missing page](missing.md)."), _prose("See [the guide](guide.md).")),
    "LINK002": (_prose("See [the sink](#the-sinks)."), _prose("See [the sink](guide.md#the-sink).")),
    "PY001": (_py("def f(:\n    pass\n"), _py("def f():\n    pass\n")),
    "PY002": (_py("x = " + "-" * 50_000 + "1\n"), _py("x = " + "-" * 50 + "1\n")),
    "EX001": (_module("nodoc", "VALUE = 1\n"), _module("nodoc", '"""Has a docstring."""\nVALUE = 1\n')),
    "OPT001": (_py(BAD_RT, "<!-- skills: allow RTM001 -->"), _py(BAD_RT, "<!-- skills: allow RTM001 -- shows the boolean mistake -->")),
    "OPT002": (_py("x = 1\n", "<!-- skills: allow RTM001 -- nothing to hide -->"),
               _py(BAD_RT, "<!-- skills: allow RTM001 -- shows the boolean mistake -->")),
    "OPT003": (_py(BAD_RT, "<!-- skills: allow RTM001,XYZ999 -- typo in the list -->"),
               _py(BAD_RT, "<!-- skills: allow RTM001 -- shows the boolean mistake -->")),
    "EXC001": (lambda r: add_block(r, "def hello():\n    return 1\n", before="<!-- excerpt: examples/nothere.py#hello -->"),
               lambda r: add_block(r, 'def hello():\n    return "hello"\n', before="<!-- excerpt: examples/snippets.py#hello -->")),
    "EXC002": (lambda r: add_block(r, "def hello():\n    return 1\n", before="<!-- excerpt: examples/snippets.py#other -->"),
               lambda r: add_block(r, 'def hello():\n    return "hello"\n', before="<!-- excerpt: examples/snippets.py#hello -->")),
    "EXC003": (lambda r: add_block(r, 'def hello():\n    return "bye"\n', before="<!-- excerpt: examples/snippets.py#hello -->"),
               lambda r: add_block(r, 'def hello():\n    return "hello"\n', before="<!-- excerpt: examples/snippets.py#hello -->")),
    "EXC004": (_prose("Some text.", before="<!-- excerpt: examples/snippets.py#hello -->"),
               _prose("Some text.", before="<!-- a plain comment -->")),
    "RTM001": (_py(BAD_RT), _py("df.writeStream.foreach(w)" + RT + "\n")),
    "RTM002": (_py('t = "1 second"\nq = df.writeStream.foreach(w).outputMode("update")\nq = q.trigger(realTime=t)\nq.start()\n'),
               _py('t = "10 seconds"\nq = df.writeStream.foreach(w).outputMode("update")\nq = q.trigger(realTime=t)\nq.start()\n')),
    "RTM003": (_py('w = df.writeStream.foreachBatch(f)\nw.outputMode("update").trigger(realTime="5 seconds").start()\n'),
               _py('w = df.writeStream.foreachBatch(f)\nw.outputMode("update").trigger(processingTime="5 seconds").start()\n')),
    "RTM004": (_py('df.writeStream.foreach(w).outputMode("append").trigger(realTime="5 seconds").start()\n'),
               _py('df.writeStream.foreach(w)' + RT + '\n')),
    "RTM005": (_py('(df.dropDuplicatesWithinWatermark(["id"])\n   .writeStream.foreach(w)' + RT + ')\n'),
               _py('(df.dropDuplicates(["id"])\n   .writeStream.foreach(w)' + RT + ')\n')),
    "RTM006": (_py('@udf("string")\ndef up(s):\n    return s.upper()\n\nout = df.select(up("name"))\nout.writeStream.foreach(w)' + RT + '\n'),
               _py('out = df.select(upper("name"))\nout.writeStream.foreach(w)' + RT + '\n')),
    "RTM007": (_py('df.mapInPandas(fn, schema).writeStream.foreach(w)' + RT + '\n'),
               _py('df.mapInPandas(fn, schema).writeStream.foreach(w).trigger(processingTime="1 second").start()\n')),
    "RTM008": (_py('agg = df.groupBy(session_window("ts", "5 minutes")).count()\nagg.writeStream.foreach(w)' + RT + '\n'),
               _py('agg = df.groupBy(window("ts", "5 minutes")).count()\nagg.writeStream.foreach(w)' + RT + '\n')),
    "RTM009": (_py('static = spark.read.table("dim")\nstream.join(static, "id").writeStream.foreach(w)' + RT + '\n'),
               _py('static = spark.read.table("dim")\nstream.join(broadcast(static), "id").writeStream.foreach(w)' + RT + '\n')),
    "LBS001": (_py('opts = {"endpoint": "p.b.e", "dbtable": "s.t", "url": "jdbc:x"}\nw = df.writeStream.format("postgresql").options(**opts)\nw.outputMode("update").trigger(realTime="5 minutes").start()\n'),
               _py('opts = {"endpoint": "p.b.e", "dbtable": "s.t", "upsertkey": "id"}\nw = df.writeStream.format("postgresql").options(**opts)\nw.outputMode("update").trigger(realTime="5 minutes").start()\n')),
    "LBS002": (_py('df.writeStream.format("postgresql").option("database", "d").outputMode("update").trigger(realTime="5 minutes").start()\n'),
               _py('df.writeStream.format("postgresql").outputMode("update").trigger(realTime="5 minutes").toTable("c.s.t")\n')),
    "LBS003": (_py('iv = "100 ms"\ndf.writeStream.format("postgresql").option("endpoint", "p.b.e").option("dbtable", "s.t").option("batchinterval", iv).outputMode("update").trigger(realTime="5 minutes").start()\n'),
               _py('iv = "100 milliseconds"\ndf.writeStream.format("postgresql").option("endpoint", "p.b.e").option("dbtable", "s.t").option("batchinterval", iv).outputMode("update").trigger(realTime="5 minutes").start()\n')),
    "SINK001": (_py('''
        class Writer:
            def open(self, partition_id, epoch_id):
                try:
                    self.conn = connect()
                except Exception:
                    return False
                return True
        '''), _py('''
        class Writer:
            def open(self, partition_id, epoch_id):
                try:
                    self.conn = connect()
                except Exception:
                    log.exception("connect failed")
                    raise
                return True
        ''')),
    "SQL001": (_py('cur.execute(f"INSERT INTO {table} VALUES (%s)", (1,))\n'),
               _py('cur.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(sql.Identifier(table)), (1,))\n')),
    "CONT001": (_py('df = spark.readStream \\  # source\n    .format("kafka")\n'),
                _py('df = (spark.readStream  # source\n      .format("kafka"))\n')),
    "PROSE001": (_prose("Enable Photon on the cluster to run real-time mode."),
                 _prose("Photon must be off for real-time mode on Databricks.")),
    "PROSE002": (_prose("Real-time mode runs on DBR 13.3 and above."),
                 _prose("Real-time mode runs on Databricks Runtime 16.4 LTS and above.")),
    "PROSE003": (_prose("Real-time mode gives end-to-end latency under 800 ms."),
                 _prose("The engine saw rows after about 6 ms at the median.")),
    "PROSE004": (_prose("Set `realTime=True` on the trigger."),
                 _prose('Set `realTime="5 seconds"` on the trigger.')),
    "IMP001": (_module("noisy", '"""Prints."""\nprint("hello from import")\n'),
               _module("noisy", '"""Prints only when run."""\n\nif __name__ == "__main__":\n    print("hello")\n')),
    "IMP002": (_module("threads", '"""Starts a thread."""\nimport threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n'),
               _module("threads", '"""Starts a thread on demand."""\nimport threading, time\n\n\ndef start():\n    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n')),
    "IMP003": (_module("jvm", '"""Launches the JVM gateway at import."""\nfrom pyspark import SparkContext\nSparkContext._ensure_initialized()\n'),
               _module("jvm", '"""Imports pyspark only."""\nfrom pyspark import SparkContext\n')),
    "IMP004": (_module("broken", '"""Raises."""\nimport no_such_module_here\n'),
               _module("broken", '"""Imports fine."""\nimport json\n')),
}

#: Codes whose fixtures need the external tools (run through their checker directly, see test_codes.py).
EXTERNAL = {"EXT001", "EXT002", "EXT003"}

from tests.validator.plugin_cases import PLUGIN_CASES

CASES.update(PLUGIN_CASES)
