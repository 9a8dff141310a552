"""`code`: Python split at function and class boundaries with `ast`; other languages
fall back to recursive splitting with code separators.

Each chunk's `embed_text` is prefixed with the module's imports and, for methods, the
enclosing class signature, so a method chunk still says what it belongs to. Spans
never change: a chunk is always a slice of the source file.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from chunkyard.chunking.base import BaseChunker, ChunkerConfigError
from chunkyard.chunking.chunkers.recursive import RECURSIVE_PRESETS, RecursiveChunker
from chunkyard.chunking.sentences import pack_spans
from chunkyard.chunking.spans import DocText, Piece, extend_overlap, trim_span
from chunkyard.chunking.types import Document

_NEWLINE = re.compile(r"\r\n|\r|\n")

PYTHON_MIME = frozenset({"text/x-python", "text/x-script.python", "application/x-python", "text/python"})
EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".ts": "typescript",
    ".tsx": "typescript",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".rb": "ruby",
    ".sh": "shell",
    ".sql": "sql",
    ".jsx": "javascript",
    ".kt": "kotlin",
    ".cs": "csharp",
    ".php": "php",
    ".swift": "swift",
    ".scala": "scala",
    ".r": "r",
    ".lua": "lua",
    ".bash": "shell",
}


CODE_LANGUAGES = frozenset(EXTENSIONS.values()) | {
    "kotlin",
    "csharp",
    "php",
    "swift",
    "scala",
    "r",
    "lua",
    "c++",
    "shellscript",
    "javascript",
    "typescript",
}


def detect_language(doc: Document) -> str | None:
    """Language of a source file, or None for prose.

    From the loader's `metadata["language"]` (an extension such as `py`), the mime type
    (`text/x-python`, `text/x-go`, `text/javascript`), or the file name (`metadata["path"]`
    or the document id).
    """
    language = doc.metadata.get("language")
    if isinstance(language, str) and language:
        return EXTENSIONS.get("." + language.lower().lstrip("."), language.lower())
    mime = (doc.mime_type or "").lower()
    if mime in PYTHON_MIME:
        return "python"
    if mime in ("text/javascript", "application/javascript"):
        return "javascript"
    if mime.startswith("text/x-") and mime[len("text/x-") :] in CODE_LANGUAGES:
        return mime[len("text/x-") :]
    for key in ("path", "source", "filename"):
        name = str(doc.metadata.get(key, "") or doc.id).lower()
        for ext, lang in EXTENSIONS.items():
            if name.endswith(ext):
                return lang
    return None


class CodeChunker(BaseChunker):
    strategy = "code"

    def __init__(self, *, language: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.language = language
        common = {"tokenizer": self.tokenizer, "size": self.size, "overlap": 0, "config_key": self.config_key}
        self._python_fallback = RecursiveChunker(**RECURSIVE_PRESETS["python"], preset="python", **common)
        self._code_fallback = RecursiveChunker(**RECURSIVE_PRESETS["code"], preset="code", **common)

    def pieces(self, dt: DocText) -> list[Piece]:
        language = self.language or detect_language(dt.doc)
        if language in (None, "python"):
            try:
                tree = ast.parse(dt.text)
            except (SyntaxError, ValueError) as exc:
                if language == "python":
                    spans = self._python_fallback.split_span(dt, 0, len(dt.text), self.base_budget)
                    meta = {"language": "python", "parse_error": str(exc).splitlines()[0][:200]}
                    pieces = [Piece(s, e, dict(meta)) for s, e in spans]
                    return extend_overlap(pieces, dt.units, self.overlap, len(dt.text), dt.text)
                language = "unknown"
            else:
                return extend_overlap(
                    self._python_pieces(dt, tree), dt.units, self.overlap, len(dt.text), dt.text
                )
        spans = self._code_fallback.split_span(dt, 0, len(dt.text), self.base_budget)
        pieces = [Piece(s, e, {"language": language}) for s, e in spans]
        return extend_overlap(pieces, dt.units, self.overlap, len(dt.text), dt.text)

    # -- python --------------------------------------------------------------------------
    def _python_pieces(self, dt: DocText, tree: ast.Module) -> list[Piece]:
        text = dt.text
        line_starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]
        line_starts.append(len(text))

        def line_start(lineno: int) -> int:
            return line_starts[min(lineno - 1, len(line_starts) - 1)]

        def line_end(lineno: int) -> int:
            return line_starts[min(lineno, len(line_starts) - 1)]

        def node_span(node: ast.AST) -> tuple[int, int]:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            return line_start(first), line_end(node.end_lineno or node.lineno)

        imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        prefix = self._imports_prefix(text, [node_span(n) for n in imports])

        pieces: list[Piece] = []
        pending: list[tuple[int, int]] = []  # consecutive module-level statements
        cursor = 0

        def flush_pending() -> None:
            if pending:
                spans = pack_spans(dt.units, pending, self.base_budget, text)
                for s, e in spans:
                    pieces.extend(self._fit(dt, s, e, {"language": "python", "kind": "module"}, prefix))
                pending.clear()

        for node in tree.body:
            s, e = node_span(node)
            start = cursor
            cursor = max(cursor, e)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                flush_pending()
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                if isinstance(node, ast.ClassDef):
                    pieces.extend(self._class_pieces(dt, node, start, cursor, prefix, node_span))
                else:
                    meta = {"language": "python", "kind": kind, "symbol": node.name}
                    pieces.extend(self._fit(dt, start, cursor, meta, prefix))
            else:
                pending.append((start, cursor))
        if cursor < len(text):
            pending.append((cursor, len(text)))
        flush_pending()
        return pieces

    def _imports_prefix(self, text: str, spans: list[tuple[int, int]]) -> str:
        """The module's import lines, capped at a quarter of the size (it is context, not content)."""
        if not spans:
            return ""
        lines: list[str] = []
        cap = max(8, self.size // 4)
        used = 0
        for s, e in spans:
            line = text[s:e].strip()
            n = self.tokenizer.count(line)
            if used + n > cap:
                break
            lines.append(line)
            used += n
        return "\n".join(lines) + "\n\n" if lines else ""

    def _class_pieces(
        self, dt, node: ast.ClassDef, start: int, end: int, prefix: str, node_span
    ) -> list[Piece]:
        meta = {"language": "python", "kind": "class", "symbol": node.name}
        s, e = trim_span(dt.text, start, end)
        if e <= s:
            return []
        if dt.units.estimate_one(s, e) <= self.base_budget:
            return [Piece(s, e, meta, prefix)]
        methods = [
            n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        ]
        header_end = node_span(methods[0])[0] if methods else end
        signature = self._class_signature(dt.text, node, node_span)
        out: list[Piece] = []
        out.extend(self._fit(dt, start, header_end, meta, prefix))
        cursor = header_end
        for k, method in enumerate(methods):
            m_end = node_span(methods[k + 1])[0] if k + 1 < len(methods) else end
            m_meta = {
                "language": "python",
                "kind": "method" if not isinstance(method, ast.ClassDef) else "class",
                "symbol": f"{node.name}.{method.name}",
            }
            out.extend(self._fit(dt, cursor, m_end, m_meta, prefix + signature))
            cursor = m_end
        return out

    @staticmethod
    def _class_signature(text: str, node: ast.ClassDef, node_span) -> str:
        s, _ = node_span(node)
        body_start = node_span(node.body[0])[0] if node.body else None
        header = text[s:body_start] if body_start is not None and body_start > s else text[s : s + 200]
        lines = [ln for ln in header.splitlines() if ln.strip()]
        # decorators + the `class X(...):` line(s)
        return "\n".join(lines[:6]) + "\n    ...\n\n" if lines else ""

    def _fit(self, dt: DocText, start: int, end: int, meta: dict, prefix: str) -> list[Piece]:
        s, e = trim_span(dt.text, start, end)
        if e <= s:
            return []
        if dt.units.estimate_one(s, e) <= self.base_budget:
            return [Piece(s, e, dict(meta), prefix)]
        spans = self._python_fallback.split_span(dt, s, e, self.base_budget)
        return [Piece(a, b, {**meta, "part": k}, prefix) for k, (a, b) in enumerate(spans)]


def build(common: dict, options: dict, chunker: dict, em: Any, llm: Any) -> BaseChunker:
    """Build this strategy's chunker from validated common fields and its own `options`."""

    language = options["language"]
    if language is not None and not isinstance(language, str):
        raise ChunkerConfigError(f"chunker.language: expected a language name, got {language!r}")
    return CodeChunker(language=language, **common)
