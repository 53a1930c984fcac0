"""Read the blocks of an app's ``.sql`` files and expand their placeholders, once, at load time.

A file is a list of blocks, each from its header line to the next one::

    -- name: item_claim              a statement, run by name
    -- fragment: by_pkey(w, ids)     a piece of SQL that statements and fragments compose

Comment lines are for the reader and dropped. A placeholder is ``{name}`` (a fragment without
arguments) or ``{name:arg, arg}``: the arguments are SQL text split on the commas outside
parentheses, brackets, braces and quotes, and each ``$arg`` of the fragment is replaced by
its argument. Every fragment is expanded after the fragments it uses, so a statement expands
in one pass and text put in place is never scanned again. Multi-line text keeps its own line
breaks, indented to where it is put. Anything wrong (an unknown name, a wrong argument count,
an unknown or unused ``$arg``, a name defined twice, a fragment that uses itself) is a
``SqlTemplateError`` naming the file and line.
"""

from __future__ import annotations

import itertools
import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from workqueue.exceptions import SqlTemplateError

_HEADER = re.compile(r"^-- (name|fragment):(.*)$", re.M)
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_FRAGMENT_HEAD = re.compile(r"([a-z][a-z0-9_]*)\(([a-z0-9_, ]*)\)")
_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)([:}])")
_PARAM = re.compile(r"(?<![\w$])\$([a-z_][a-z0-9_]*)\b(?!\$)")  # not a $$ or $tag$ quote
_OPEN, _CLOSE = "([{", ")]}"
_HANGING = "    "


@dataclass(frozen=True, slots=True)
class Statement:
    """A named statement, expanded; ``source`` is where it is written (``file:line``)."""

    name: str
    text: str
    source: str


@dataclass(frozen=True, slots=True)
class Fragment:
    """A fragment, its own placeholders expanded: ``text`` holds only its ``$params``."""

    name: str
    params: tuple[str, ...]
    text: str
    source: str

    def apply(self, args: list[str]) -> str:
        """The text with each ``$param`` replaced by its argument (indented to its place)."""
        given = dict(zip(self.params, args, strict=True))
        return _PARAM.sub(lambda m: _indented(given[m.group(1)], _indent_of(m.string, m.start())), self.text)


@dataclass(frozen=True, slots=True)
class _Block:
    kind: str
    name: str
    params: tuple[str, ...]
    text: str
    source: str


def parse(text: str, filename: str) -> list[_Block]:
    """The blocks of one file's text, comment lines dropped (not expanded yet)."""
    heads = list(_HEADER.finditer(text))
    preamble = text[: heads[0].start()] if heads else text
    if _code(preamble):
        raise SqlTemplateError(f"{filename}:1: SQL before the first '-- name:' or '-- fragment:' line")
    blocks = []
    for i, head in enumerate(heads):
        source = f"{filename}:{text.count(chr(10), 0, head.start()) + 1}"
        kind, rest = head.group(1), head.group(2).strip()
        if kind == "name":
            if not _NAME.fullmatch(rest):
                raise SqlTemplateError(f"{source}: a statement is named in lower case: '-- name: item_claim'")
            name, params = rest, tuple[str, ...]()
        else:
            found = _FRAGMENT_HEAD.fullmatch(rest)
            if not found:
                raise SqlTemplateError(f"{source}: a fragment header reads '-- fragment: name(arg, ...)'")
            name = found.group(1)
            params = tuple(p.strip() for p in found.group(2).split(",") if p.strip())
            if len(set(params)) != len(params):
                raise SqlTemplateError(f"{source}: fragment {name} names an argument twice")
        body = _code(text[head.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)])
        if kind == "name":
            body = body.rstrip().rstrip(";").rstrip()
        if not body:
            raise SqlTemplateError(f"{source}: {name} has no SQL")
        blocks.append(_Block("statement" if kind == "name" else "fragment", name, params, body, source))
    return blocks


def _code(body: str) -> str:
    """The block's SQL lines: comment-only lines dropped, dedented, outer blank lines trimmed."""
    lines = [line.rstrip() for line in body.splitlines() if not line.lstrip().startswith("--")]
    return textwrap.dedent("\n".join(lines)).strip("\n")


def _indent_of(text: str, pos: int, *, hanging: bool = False) -> str:
    """The indentation for the continuation lines of text put at ``pos``: that of its line,
    plus a hanging indent (``hanging``) when something precedes it on the line."""
    line = text[text.rfind("\n", 0, pos) + 1 : pos]
    lead = line[: len(line) - len(line.lstrip())]
    return lead + _HANGING if hanging and line.strip() else lead


def _indented(text: str, indent: str) -> str:
    first, *rest = text.split("\n")
    return "\n".join([first, *(indent + line if line else line for line in rest)])


def _relative(arg: str, indent: str) -> str:
    """An argument's text with its continuation lines made relative to its call's line."""
    first, *rest = arg.split("\n")
    return "\n".join([first, *(line[min(len(indent), len(line) - len(line.lstrip())) :] for line in rest)])


def _scan(text: str, start: int, source: str) -> tuple[int, list[int]]:
    """From ``start`` (just after ``{name:``): the index of the closing ``}`` and of each
    argument-separating comma (outside parentheses, brackets, braces and quotes)."""
    depth, quoted = 0, False
    commas: list[int] = []
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            if depth == 0:
                if ch == "}":
                    return i, commas
                raise SqlTemplateError(f"{source}: an unbalanced {ch!r} in the arguments of a placeholder")
            depth -= 1
        elif ch == "," and depth == 0:
            commas.append(i)
    raise SqlTemplateError(f"{source}: a placeholder is not closed: {text[start - 20 : start + 40]!r}")


def split_args(text: str) -> list[str]:
    """Split a placeholder's argument text on the commas outside parentheses, brackets, braces
    and quotes (the one rule for every fragment)."""
    _end, commas = _scan(text + "}", 0, "arguments")
    bounds = [-1, *commas, len(text)]
    return [text[a + 1 : b].strip() for a, b in itertools.pairwise(bounds)]


def expand(text: str, lookup: Callable[[str], Fragment | None], source: str) -> str:
    """Fill every placeholder of ``text`` from ``lookup`` (whose fragments are expanded)."""
    out, pos = [], 0
    while found := _PLACEHOLDER.search(text, pos):
        fragment = lookup(found.group(1))
        if fragment is None:
            raise SqlTemplateError(f"{source}: unknown placeholder {{{found.group(1)}}}: no fragment of that name")
        if found.group(2) == "}":
            if fragment.params:
                raise SqlTemplateError(f"{source}: {{{fragment.name}}} takes ({', '.join(fragment.params)})")
            value, pos_after = fragment.text, found.end()
        else:
            close, _commas = _scan(text, found.end(), source)
            raw = text[found.end() : close]
            line_indent = _indent_of(text, found.start())
            args = [expand(_relative(a, line_indent), lookup, source) for a in split_args(raw)]
            if not fragment.params:
                raise SqlTemplateError(f"{source}: {fragment.name} takes no arguments: write {{{fragment.name}}}")
            if len(args) != len(fragment.params) or not all(args):
                raise SqlTemplateError(
                    f"{source}: {fragment.name} takes ({', '.join(fragment.params)}), got {raw.strip()!r}"
                )
            value, pos_after = fragment.apply(args), close + 1
        out += [text[pos : found.start()], _indented(value, _indent_of(text, found.start(), hanging=True))]
        pos = pos_after
    out.append(text[pos:])
    return "".join(out)


class _Expander:
    """Expands fragment blocks on first use, each once, refusing a cycle and unused or unknown
    arguments; ``fragments`` gains each as it is expanded."""

    def __init__(self, blocks: Mapping[str, _Block], fragments: dict[str, Fragment]):
        self.blocks = blocks
        self.fragments = fragments
        self.expanding: list[str] = []

    def lookup(self, name: str) -> Fragment | None:
        if name in self.fragments:
            return self.fragments[name]
        block = self.blocks.get(name)
        if block is None or block.kind != "fragment":
            return None
        if name in self.expanding:
            raise SqlTemplateError(f"{block.source}: fragments use each other: {' -> '.join([*self.expanding, name])}")
        self.expanding.append(name)
        text = expand(block.text, self.lookup, block.source)
        self.expanding.pop()
        used, params = set(_PARAM.findall(text)), set(block.params)
        if used - params:
            raise SqlTemplateError(f"{block.source}: ${min(used - params)} is not an argument of {name}")
        if params - used:
            raise SqlTemplateError(f"{block.source}: {name} never uses its argument ${min(params - used)}")
        self.fragments[name] = Fragment(name, block.params, text, block.source)
        return self.fragments[name]


class Catalog:
    """One app's statements and fragments, expanded; ``catalog[name]`` is a statement's SQL.

    Load it with ``Catalog.load``: every ``.sql`` file of the app, the fragments generated
    from Python constants (``generated``: name -> text), and the fragments of the ``base``
    catalog it builds on (operations composes workqueue's work-item fragments).
    """

    def __init__(
        self,
        app: str,
        statements: Mapping[str, Statement],
        fragments: Mapping[str, Fragment],
        base: Catalog | None = None,
    ):
        self.app = app
        self.base = base
        self.statements = dict(statements)
        #: Every fragment its statements may use: its own and its base's.
        self.fragments = dict(fragments)
        self._text = {name: s.text for name, s in self.statements.items()}

    @classmethod
    def load(
        cls,
        app: str,
        paths: Iterable[Path],
        *,
        generated: Mapping[str, str] | None = None,
        base: Catalog | None = None,
    ) -> Catalog:
        """Parse the files, check every name is defined once, and expand everything."""
        sources = {name: f.source for name, f in base.fragments.items()} if base else {}
        fragments: dict[str, Fragment] = dict(base.fragments) if base else {}
        for name, text in (generated or {}).items():
            _claim(sources, name, f"generated ({app})")
            fragments[name] = Fragment(name, (), text, f"generated ({app})")
        blocks: dict[str, _Block] = {}
        for path in sorted(paths):
            for block in parse(path.read_text(), f"{path.parent.parent.name}/{path.parent.name}/{path.name}"):
                _claim(sources, block.name, block.source)
                blocks[block.name] = block
        expander = _Expander(blocks, fragments)
        statements = {}
        for block in blocks.values():  # fragments first, in dependency order: each once
            if block.kind == "fragment":
                expander.lookup(block.name)
        for block in blocks.values():
            if block.kind == "statement":
                text = expand(block.text, expander.lookup, block.source)
                if param := _PARAM.search(text):
                    raise SqlTemplateError(f"{block.source}: ${param.group(1)} outside a fragment")
                statements[block.name] = Statement(block.name, text, block.source)
        return cls(app, dict(sorted(statements.items())), fragments, base)

    def __getitem__(self, name: str) -> str:
        try:
            return self._text[name]
        except KeyError:
            raise KeyError(f"no statement {name!r} in the {self.app} app's .sql files") from None

    def __contains__(self, name: object) -> bool:
        return name in self._text

    def names(self) -> list[str]:
        """The statement names, sorted."""
        return sorted(self._text)

    def own_fragments(self) -> dict[str, Fragment]:
        """The fragments this app defines (its files and generated), not its base's."""
        return {n: f for n, f in sorted(self.fragments.items()) if not self.base or n not in self.base.fragments}


def _claim(sources: dict[str, str], name: str, source: str) -> None:
    if name in sources:
        raise SqlTemplateError(f"{source}: {name!r} is defined twice (first at {sources[name]})")
    sources[name] = source
