"""The tutorials' code is the examples' code, so the two cannot drift apart.

A fenced block whose info string has ``file=PATH`` (``PATH`` under docs/examples/)
is a piece of that file. The pieces of one file, in the order the page shows them,
must be exact consecutive parts of it with only blank lines between them, and
together the whole file; and every file of an example package must be shown.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
EXAMPLES = DOCS / "examples"
TUTORIALS = {
    "writing-a-transport.md": ("gateway-linechat",),
    "writing-plugins.md": ("gateway-reverse-provider", "gateway-dice-tool"),
}
FENCE = re.compile(r"^```[\w+-]*[ \t]+file=(\S+)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
NOT_SOURCE = {"__pycache__", ".pytest_cache", ".hypothesis", "build", "dist"}


def shown_pieces(doc: str) -> dict[str, list[str]]:
    pieces: dict[str, list[str]] = {}
    for match in FENCE.finditer((DOCS / doc).read_text()):
        pieces.setdefault(match[1], []).append(match[2])
    return pieces


def package_files(package: str) -> list[str]:
    root = EXAMPLES / package
    return sorted(
        path.relative_to(EXAMPLES).as_posix()
        for path in root.rglob("*")
        if path.is_file() and not any(part in NOT_SOURCE or part.endswith(".egg-info") for part in path.relative_to(root).parts)
    )


def _where_it_differs(piece: str, text: str) -> str:
    """The part of the file most like the piece, as a diff, to say what changed."""
    lines = text.splitlines(keepends=True)
    want = piece.splitlines(keepends=True)
    best = max(range(max(1, len(lines) - len(want) + 1)), key=lambda i: difflib.SequenceMatcher(None, want, lines[i : i + len(want)]).ratio())
    return "".join(difflib.unified_diff(want, lines[best : best + len(want)], "tutorial", "example file"))


@pytest.mark.parametrize("doc", sorted(TUTORIALS))
def test_every_marked_block_is_an_exact_piece_of_its_file(doc: str) -> None:
    pieces = shown_pieces(doc)
    assert pieces, f"{doc} shows no file=... blocks"
    for path, parts in pieces.items():
        assert path.split("/")[0] in TUTORIALS[doc], f"{doc} shows {path}, outside its example packages"
        file = EXAMPLES / path
        assert file.is_file(), f"{doc} shows {path}, which does not exist under docs/examples/"
        text, pos = file.read_text(), 0
        for number, piece in enumerate(parts, 1):
            at = text.find(piece, pos)
            assert at >= 0, f"{doc}: block {number} of {path} is not in the file:\n{_where_it_differs(piece, text[pos:])}"
            assert at == 0 or text[at - 1] == "\n", f"{doc}: block {number} of {path} starts mid-line"
            assert not text[pos:at].strip(), f"{doc}: these lines of {path} (before block {number}) are not shown:\n{text[pos:at]}"
            pos = at + len(piece)
        assert not text[pos:].strip(), f"{doc}: the end of {path} is not shown:\n{text[pos:]}"


@pytest.mark.parametrize("doc", sorted(TUTORIALS))
def test_every_file_of_the_examples_is_shown(doc: str) -> None:
    shown = set(shown_pieces(doc))
    for package in TUTORIALS[doc]:
        files = package_files(package)
        assert f"{package}/pyproject.toml" in files
        missing = [f for f in files if f not in shown]
        assert not missing, f"{doc} does not show {missing}"
