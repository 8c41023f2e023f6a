#!/usr/bin/env python3
"""A stand-in assistant for `skills.py eval run` tests: `fake_agent.py PROMPT_FILE ANSWER_DIR`.

With the skill installed in $HOME it writes the task's reference answer; without
it, the first known-wrong answer (or nothing, for tasks listed in FAKE_AGENT_SKIP).
With the skill it writes NOTES.md citing SKILL.md (not for tasks in FAKE_AGENT_NO_NOTES).
It also proves the prompt names the answer folder and that the installed skill
carries no reference answers (exit 3 otherwise). In the search-only condition it proves
``java`` is blocked (exit 4 otherwise). With FAKE_AGENT_TRANSCRIPT it prints that file (a
client's JSON output) to standard output, as a real client would.
"""

import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SKILL = "spark-rtm-lakebase"


def main() -> int:
    prompt_file, answer_dir = Path(sys.argv[1]), Path(sys.argv[2])
    task = prompt_file.stem
    if str(answer_dir) not in prompt_file.read_text(encoding="utf-8"):
        print("prompt does not name the answer folder", file=sys.stderr)
        return 3
    installed = Path(os.environ["HOME"]) / ".claude" / "skills" / SKILL
    if (installed / "evals").exists():
        print("the installed skill holds evals/ (reference answers leak)", file=sys.stderr)
        return 3
    if "no PySpark, no Java, no Postgres" in prompt_file.read_text(encoding="utf-8"):
        import subprocess

        java = shutil.which("java")
        if java and subprocess.run([java, "-version"], capture_output=True).returncode != 127:
            print("search-only condition but java runs", file=sys.stderr)
            return 4
    if os.environ.get("FAKE_AGENT_TRANSCRIPT"):
        sys.stdout.write(Path(os.environ["FAKE_AGENT_TRANSCRIPT"]).read_text(encoding="utf-8"))
    if os.environ.get("FAKE_AGENT_FAIL"):
        print("error: not logged in", file=sys.stderr)
        return 1
    if (installed / "SKILL.md").is_file():
        src = REPO / "evals" / "answers" / "reference" / task
    else:
        if task in os.environ.get("FAKE_AGENT_SKIP", "").split(","):
            return 0
        variants = sorted((REPO / "evals" / "answers" / "wrong" / task).iterdir())
        src = variants[0]
    for f in src.iterdir():
        if f.name != "EXPECTED_FAILURE":
            shutil.copy(f, answer_dir / f.name)
    if (installed / "SKILL.md").is_file() and task not in os.environ.get("FAKE_AGENT_NO_NOTES", "").split(","):
        (answer_dir / "NOTES.md").write_text(f"{installed}/SKILL.md\n{installed}/references/real-time-mode.md\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
