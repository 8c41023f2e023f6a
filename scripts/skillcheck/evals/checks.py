"""Static, numeric and rubric checks of one eval answer (no code of the answer is run here).

Every check takes ``(answer: Answer, spec: dict)`` and returns a
:class:`Outcome`; the first failing one is a task's verdict. Code checks use
the same rule engine as ``skills.py check`` (:mod:`rtm_lakebase.check`),
not a second copy of the rules.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtm_lakebase.check.files import check_file
from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.limits import MAX_FILE_BYTES
from rtm_lakebase.check.rules.flow import Flow

MAX_ANSWER_FILES = 20


@dataclass
class Outcome:
    check: str
    passed: bool
    evidence: str = ""
    error: bool = False  # the grader itself failed (no Postgres, no Spark): the answer was not judged

    def as_dict(self) -> dict:
        return {"check": self.check, "passed": self.passed, "evidence": self.evidence, "error": self.error}


@dataclass
class Answer:
    """The files an assistant wrote for one task (``DIR/<task name>/``)."""

    folder: Path
    _text: dict[str, str | None] = field(default_factory=dict)

    def exists(self, name: str) -> bool:
        return (self.folder / name).is_file()

    def text(self, name: str) -> str | None:
        if name not in self._text:
            p = self.folder / name
            try:
                if not p.is_file() or p.stat().st_size > MAX_FILE_BYTES:
                    self._text[name] = None
                else:
                    self._text[name] = p.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                self._text[name] = None
        return self._text[name]

    def tree(self, name: str) -> ast.Module | None:
        src = self.text(name)
        if src is None:
            return None
        try:
            return ast.parse(src)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None

    def json(self, name: str) -> Any:
        src = self.text(name)
        if src is None:
            return None
        try:
            return json.loads(src)
        except (ValueError, RecursionError):
            return None

    def file_names(self) -> list[str]:
        """The answer's files (at most MAX_ANSWER_FILES), sorted by name."""
        return sorted(p.name for p in self.folder.iterdir() if p.is_file())[:MAX_ANSWER_FILES] if self.folder.is_dir() else []

    def all_text(self) -> str:
        return "\n".join(t for t in (self.text(n) for n in self.file_names()) if t)


def _top_names(tree: ast.Module) -> dict[str, ast.AST]:
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node
    return out


def interface(answer: Answer, spec: dict) -> Outcome:
    """Every named file exists; .py files define the named top-level names, .json files hold the named keys."""
    for name, wanted in spec["files"].items():
        if not answer.exists(name):
            return Outcome("interface", False, f"{name} not written")
        if name.endswith(".py"):
            tree = answer.tree(name)
            if tree is None:
                return Outcome("interface", False, f"{name} is not valid Python (or not UTF-8)")
            missing = [n for n in wanted if n not in _top_names(tree)]
            if missing:
                return Outcome("interface", False, f"{name} does not define {', '.join(missing)}")
        elif name.endswith(".json"):
            data = answer.json(name)
            if not isinstance(data, dict):
                return Outcome("interface", False, f"{name} is not a JSON object")
            missing = [n for n in wanted if n not in data]
            if missing:
                return Outcome("interface", False, f"{name} lacks the keys {', '.join(missing)}")
        elif answer.text(name) is None:
            return Outcome("interface", False, f"{name} is not readable UTF-8 text")
    return Outcome("interface", True)


def rules(answer: Answer, spec: dict) -> Outcome:
    """The answer's code files pass ``skills.py check`` (the pack's rule engine).

    Only runnable code (.py, .ipynb) by default: code blocks inside an explanation (answer.md) are sketches and
    are checked only when the task names the .md file in ``files`` (it asks for runnable code there).
    """
    found: list[Finding] = []
    for name in spec.get("files") or sorted(p.name for p in answer.folder.iterdir()
                                            if p.suffix in (".py", ".ipynb")):
        if answer.exists(name):
            found += [f for f in check_file(answer.folder, name, name) if f.code not in spec.get("ignore", ())]
    if found:
        return Outcome("rules", False, f"{len(found)} finding(s); first: {sorted(found)[0].text()}")
    return Outcome("rules", True)


def _function_chains(tree: ast.Module, function: str):
    node = _top_names(tree).get(function)
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    lo, hi = node.lineno, node.end_lineno or node.lineno
    return [c for c in Flow(tree).chains if c.links and lo <= c.links[-1].attr.lineno <= hi]


def chain(answer: Answer, spec: dict) -> Outcome:
    """A query chain in ``function`` (variables and helpers followed) has every step in ``has``, none in ``not``.

    ``has`` items are method names, or ``name=value`` for a first argument / keyword that must equal a constant
    (``format=postgresql``, ``outputMode=update``), or ``name:keyword`` for a keyword that must be present
    (``trigger:realTime``).
    """
    name, function = spec["file"], spec["function"]
    tree = answer.tree(name)
    if tree is None:
        return Outcome("chain", False, f"{name} missing or not valid Python")
    chains = _function_chains(tree, function)
    if chains is None:
        return Outcome("chain", False, f"{name} has no function {function}()")

    def step_ok(c, step: str) -> bool:
        if ":" in step:
            meth, kw = step.split(":", 1)
            return any(l.keyword(kw) is not None for l in c.named(meth))
        if "=" in step:
            meth, value = step.split("=", 1)
            for l in c.named(meth):
                args = l.call.args if l.call is not None else []
                if args and isinstance(args[0], ast.Constant) and str(args[0].value).lower() == value.lower():
                    return True
            return False
        return c.has(step)

    for c in chains:
        if all(step_ok(c, s) for s in spec.get("has", ())) and not any(step_ok(c, s) for s in spec.get("not", ())):
            return Outcome("chain", True)
    want = ", ".join(spec.get("has", ()))
    # The closest chain as evidence: the one with the most wanted steps.
    best = max(chains, key=lambda c: sum(step_ok(c, s) for s in spec.get("has", ())), default=None)
    shown = ".".join(l.name for l in best.links) if best else "no chain"
    bad = [s for s in spec.get("not", ()) if best and step_ok(best, s)]
    extra = f"; it also has {', '.join(bad)}" if bad else ""
    return Outcome("chain", False, f"no chain in {function}() has all of [{want}]{extra}; closest: {shown}")


def _pattern_list(spec_value) -> list[tuple[str, str]]:
    """[(regex, label)] from a list of strings or of [regex, label] pairs."""
    out = []
    for item in spec_value:
        if isinstance(item, str):
            out.append((item, item))
        else:
            out.append((item[0], item[1]))
    return out


def _scope_text(answer: Answer, spec: dict) -> str:
    """The text the patterns are matched against; with ``code`` only what Python runs (see _code_only)."""
    files = spec.get("files")
    names = files if files else answer.file_names()
    texts = [(n, t) for n, t in ((n, answer.text(n)) for n in names) if t]
    if spec.get("except_functions"):  # e.g. a variant the prompt allows, named for another platform
        texts = [(n, _without_functions(t, spec["except_functions"]) if n.endswith(".py") else t) for n, t in texts]
    if spec.get("code"):
        return "\n".join(_code_only(t) if n.endswith(".py") else _strip_comments(t) for n, t in texts)
    return "\n".join(t for _, t in texts)


def _strip_comments(text: str) -> str:
    """Not Python (or not parseable): drop what follows a ``#`` on lines that do not start with a quote."""
    return "\n".join(line.split("#", 1)[0] if not line.lstrip().startswith(("'", '"')) else line
                     for line in text.splitlines())


def _without_functions(source: str, name_regex: str) -> str:
    """``source`` with the functions whose name matches ``name_regex`` blanked (unchanged if it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    lines = source.splitlines(keepends=True)
    spans = [((min([node.lineno] + [d.lineno for d in node.decorator_list]), 0), (node.end_lineno, None))
             for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and re.search(name_regex, node.name, re.I)]
    return _blank(lines, spans)


def _blank(lines: list[str], spans: list) -> str:
    """``lines`` joined, each ``((line, col), (end_line, end_col))`` span (1-based lines; end_col None: to the
    end of the line) replaced by spaces, so line and column numbers of the rest stay as they were."""
    for (l0, c0), (l1, c1) in spans:
        for ln in range(l0, l1 + 1):
            line = lines[ln - 1]
            start = c0 if ln == l0 else 0
            end = c1 if ln == l1 and c1 is not None else len(line.rstrip("\n"))
            lines[ln - 1] = line[:start] + " " * (end - start) + line[end:]
    return "".join(lines)


def _code_only(source: str) -> str:
    """Python source with comments and docstrings (any string standing alone as a statement) blanked.

    An answer that explains in a docstring or comment why ``"100ms"`` or ``trigger(realTime=...)`` is
    wrong must not fail a check that forbids it in code; string literals the code passes stay.
    """
    try:
        tree = ast.parse(source)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (SyntaxError, ValueError, RecursionError, MemoryError, tokenize.TokenError):
        return _strip_comments(source)
    lines = source.splitlines(keepends=True)
    spans: list = [((t.start[0], t.start[1]), (t.end[0], t.end[1])) for t in tokens if t.type == tokenize.COMMENT]

    def char_col(ln: int, byte_col: int) -> int:  # ast counts UTF-8 bytes, tokenize characters
        return len(lines[ln - 1].encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    spans += [((n.lineno, char_col(n.lineno, n.col_offset)), (n.end_lineno, char_col(n.end_lineno, n.end_col_offset)))
              for n in ast.walk(tree)
              if isinstance(n, ast.Expr) and isinstance(n.value, (ast.Constant, ast.JoinedStr))
              and (isinstance(n.value, ast.JoinedStr) or isinstance(n.value.value, str))]
    return _blank(lines, spans)


def absent(answer: Answer, spec: dict) -> Outcome:
    """None of the patterns occurs (with ``code``: comments and docstrings ignored)."""
    text = _scope_text(answer, spec)
    for regex, label in _pattern_list(spec["patterns"]):
        m = re.search(regex, text, re.I | re.M)
        if m:
            return Outcome("absent", False, f"{label}: found {m.group(0)!r}")
    return Outcome("absent", True)


def present(answer: Answer, spec: dict) -> Outcome:
    """Every pattern occurs (with ``code``: in code, not in comments or docstrings)."""
    text = _scope_text(answer, spec)
    for regex, label in _pattern_list(spec["patterns"]):
        if not re.search(regex, text, re.I | re.M):
            return Outcome("present", False, f"missing: {label}")
    return Outcome("present", True)


_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


def rubric(answer: Answer, spec: dict) -> Outcome:
    """Explanations: every keyword group (any alternative) occurs; no wrong cause is asserted.

    A wrong cause inside a sentence that denies it ("not the GIL") does not fail the answer.
    """
    text = _scope_text(answer, spec)
    if not text.strip():
        return Outcome("rubric", False, "no answer text")
    if len(text.split()) < spec.get("min_words", 40):
        return Outcome("rubric", False, f"answer has {len(text.split())} words, fewer than {spec.get('min_words', 40)}")
    for group in spec["keywords"]:
        alternatives = group if isinstance(group, list) else [group]
        if not any(re.search(a, text, re.I) for a in alternatives):
            return Outcome("rubric", False, f"does not mention {' / '.join(alternatives)}")
    negation = re.compile(r"\b(?:not|no|none|neither|nor|never|cannot|can't|isn't|aren't|doesn't|don't|won't|"
                          r"wasn't|without|excludes?|excluding|omits?|leaves? out|rather than|instead of|myth|wrong)\b",
                          re.I)
    for sentence in _SENTENCE_RE.split(text):
        for regex, label in _pattern_list(spec.get("wrong", [])):
            m = re.search(regex, sentence, re.I)
            if m and not negation.search(sentence):
                return Outcome("rubric", False, f"wrong cause ({label}): {sentence.strip()[:160]!r}")
    return Outcome("rubric", True)


def numbers(answer: Answer, spec: dict) -> Outcome:
    """answer.json values equal what the pack's own calculators give (``expected`` computed by a named function)."""
    from . import expected as expected_values

    data = answer.json(spec["file"])
    if not isinstance(data, dict):
        return Outcome("numbers", False, f"{spec['file']} missing or not a JSON object")
    wanted = getattr(expected_values, spec["expected"])()
    # a list: each reading the prompt allows (the first is the one shown when none matches)
    outcomes = [_numbers_match(data, want, float(spec.get("tolerance", 0)))
                for want in (wanted if isinstance(wanted, list) else [wanted])]
    return next((o for o in outcomes if o.passed), outcomes[0])


def _numbers_match(data: dict, want: dict, tol: float) -> Outcome:
    for key, value in want.items():
        got = data.get(key)
        if isinstance(value, bool):
            ok = got is value
        elif isinstance(value, str):
            ok = got is not None and not isinstance(got, bool) and str(got).strip().lower() == value.lower()
        elif isinstance(value, list):
            ok = isinstance(got, list) and sorted(str(g).strip().upper() for g in got) == sorted(value)
        else:
            ok = isinstance(got, (int, float)) and not isinstance(got, bool) and abs(got - value) <= tol
        if not ok:
            return Outcome("numbers", False, f"{key}: expected {value!r}, answer says {got!r}")
    return Outcome("numbers", True)


def key(answer: Answer, spec: dict) -> Outcome:
    """A structured answer file compared with an answer key of :mod:`keys` (dated facts, the pack's calculators)."""
    from .keys import KEYS

    data = answer.json(spec["file"])
    if not isinstance(data, dict):
        return Outcome("key", False, f"{spec['file']} missing or not a JSON object")
    mismatch = KEYS[spec["key"]](data)
    return Outcome("key", mismatch is None, mismatch or "")


STATIC: dict[str, Callable[[Answer, dict], Outcome]] = {
    "interface": interface, "rules": rules, "chain": chain, "absent": absent, "present": present,
    "rubric": rubric, "numbers": numbers, "key": key,
}
