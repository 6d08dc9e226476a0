"""The tutorial's promise: the linechat transport (codec + server) is at most 150 lines of
code — comments, docstrings and blank lines not counted — using only exported names."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "gateway-linechat" / "gateway_linechat"
BUDGET = 150


def code_lines(path: Path) -> int:
    source = path.read_text()
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(node, clean=False) is not None:
            first = node.body[0]
            docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    ignored = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in ignored:
            lines.update(n for n in range(token.start[0], token.end[0] + 1) if n not in docstrings)
    return len(lines)


def test_the_linechat_codec_and_server_fit_the_budget() -> None:
    counted = {name: code_lines(EXAMPLE / name) for name in ("codec.py", "server.py")}
    assert sum(counted.values()) <= BUDGET, counted
