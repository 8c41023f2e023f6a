"""Heading anchors exactly as the site renders them: Python-Markdown's ``toc`` with the site's Markdown settings.

The headings found by markdown-it (their inline source, setext ones written
as ATX) are rendered by Python-Markdown with the ``markdown_extensions`` of
``mkdocs.yml`` (``toc`` options such as ``slugify``, ``separator`` and
``permalink`` included), and the ids come from ``Markdown.toc_tokens``, so
duplicate headings get ``_1``, ``_2`` ... as on the site. Without a
``mkdocs.yml`` (or when its extensions cannot be loaded) plain ``toc``
defaults are used. HTML ``<a id=...>``/``name=`` anchors count too.
"""

from __future__ import annotations

import functools
import html
import importlib
import re
from pathlib import Path
from typing import Any

import markdown
import yaml

from .limits import MAX_HEADINGS
from .markdown import Document
from .readfile import read_pack_text

_HEADING_ID_RE = re.compile(r"<h[1-6][^>]*?\sid=\"([^\"]*)\"")
#: Extension modules a mkdocs.yml may name with !!python/name or !!python/object/apply (nothing else is imported).
_IMPORTABLE = ("markdown.", "pymdownx.")


class _ConfigLoader(yaml.SafeLoader):
    """Reads mkdocs.yml: ``!!python/name:`` and ``!!python/object/apply:`` only for Markdown extension modules."""


def _import_name(dotted: str) -> Any:
    if not dotted.startswith(_IMPORTABLE):
        raise ValueError(f"refusing to import {dotted!r} from mkdocs.yml")
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _python_name(loader: yaml.Loader, suffix: str, node: yaml.Node) -> Any:
    return _import_name(suffix)


def _python_apply(loader: yaml.Loader, suffix: str, node: yaml.Node) -> Any:
    func = _import_name(suffix)
    if isinstance(node, yaml.MappingNode):
        spec = loader.construct_mapping(node, deep=True)
        return func(*spec.get("args", []), **spec.get("kwds", {}))
    return func(*loader.construct_sequence(node, deep=True))


def _ignore(loader: yaml.Loader, suffix: str, node: yaml.Node) -> None:
    return None


_ConfigLoader.add_multi_constructor("tag:yaml.org,2002:python/name:", _python_name)
_ConfigLoader.add_multi_constructor("tag:yaml.org,2002:python/object/apply:", _python_apply)
_ConfigLoader.add_multi_constructor("!", _ignore)  # e.g. !ENV, !relative: not needed for heading ids


def _extensions(config: Any) -> tuple[list[str], dict[str, dict]]:
    names: list[str] = ["toc"]
    configs: dict[str, dict] = {}
    items = config.get("markdown_extensions") if isinstance(config, dict) else None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            name, options = item, {}
        elif isinstance(item, dict) and len(item) == 1:
            name, options = next(iter(item.items()))
            options = options if isinstance(options, dict) else {}
        else:
            continue
        if name not in names:
            names.append(name)
        if options:
            configs[name] = options
    return names, configs


@functools.lru_cache(maxsize=8)
def site_markdown_settings(root: str) -> tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]:
    """(extension names, extension configs) from ``root/mkdocs.yml``; plain ``toc`` when absent or unusable."""
    text, problem = read_pack_text(Path(root), "mkdocs.yml")
    if text is None:
        return ("toc",), ()
    try:
        config = yaml.load(text, Loader=_ConfigLoader)  # the loader above imports only Markdown extensions
        names, configs = _extensions(config)
        markdown.Markdown(extensions=names, extension_configs=configs)  # can the site's extensions load?
    except Exception:  # a site config we cannot use falls back to the defaults
        return ("toc",), ()
    return tuple(names), tuple(configs.items())


def heading_ids(doc: Document, root: Path | None = None) -> list[str]:
    """The ids the site gives ``doc``'s headings, in order (at most MAX_HEADINGS headings)."""
    names, configs = site_markdown_settings(str(root)) if root is not None else (("toc",), ())
    headings = doc.headings[:MAX_HEADINGS]
    if not headings:
        return []
    # One heading per paragraph; the inline source keeps code spans, links and attr_list as the site sees them.
    source = "\n\n".join("#" * h.level + " " + h.text for h in headings) + "\n"
    md = markdown.Markdown(extensions=list(names), extension_configs=dict(configs))
    try:
        rendered = md.convert(source)
    except (RecursionError, MemoryError):
        return []
    # Every heading's id from the HTML itself (toc_tokens would skip headings outside toc_depth).
    return [html.unescape(m.group(1)) for m in _HEADING_ID_RE.finditer(rendered)]


def anchors(doc: Document, root: Path | None = None) -> set[str]:
    """Every anchor a link may target in ``doc``: heading ids as the site renders them, and HTML ids."""
    return set(heading_ids(doc, root)) | set(doc.html_ids)
