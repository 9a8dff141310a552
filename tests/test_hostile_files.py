"""Hostile files (issue 13): nothing read outside the folder, nothing skipped silently, one bad file
never stops the others, and every chunk fits its limits in characters as well as tokens.

Real files in a temporary folder, the real chunkers and tokenizers; the publishing test runs the
real pipeline (Postgres, the model) from tests/conftest.py.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import chunkyard.chunking.documents.files as files
import chunkyard.chunking.documents.walk as walk
import pytest
from chunkyard.chunking import Document, build_chunker
from chunkyard.chunking.documents.folder import load_folder
from chunkyard.chunking.documents.walk import list_files
from chunkyard.retrieval.lexical.analysis import MAX_TERM_BYTES, Analyzer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HEX_LINE = bytes(range(256)).hex() * 40  # 20,480 characters, no whitespace
GOOD = {
    "guide.md": "# Guide\n\nThe walrus handbook explains tide tables for harbour pilots.\n",
    "notes/deploy.txt": "Deploy the lighthouse service with docker compose on port 8000.\n",
}


def _write(root: Path, rel: str, content: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _reasons(failures) -> dict[str, str]:
    return {f.path: f.reason for f in failures}


# -- issue 13 #3: symlinks never lead outside the folder ------------------------------------------


def test_symlink_to_a_file_outside_the_folder_is_refused(tmp_path: Path) -> None:
    outside = _write(tmp_path, "outside/secret.txt", "root:x:0:0:root:/root:/bin/bash\n")
    folder = tmp_path / "docs"
    _write(folder, "inside.md", "inside text")
    (folder / "passwd.txt").symlink_to(outside)
    (folder / "etc.txt").symlink_to("/etc/hostname")
    (folder / "alias.md").symlink_to(folder / "inside.md")  # a link inside the folder is fine

    documents, failures = load_folder(folder)
    assert sorted(d.id for d in documents) == ["alias.md", "inside.md"]
    assert all("root:x" not in d.text for d in documents)
    reasons = _reasons(failures)
    assert set(reasons) == {"passwd.txt", "etc.txt"}
    assert reasons["passwd.txt"].startswith("symlink points outside the documents folder")
    # the sensor's listing applies the same rule: it never hashes (reads) the outside file
    listed = dict(list_files(folder))
    assert sorted(listed) == ["alias.md", "inside.md"]
    assert listed["alias.md"] == (folder / "inside.md").resolve()


def test_watched_folder_that_is_itself_a_symlink_still_loads(tmp_path: Path) -> None:
    real = tmp_path / "real"
    _write(real, "a.md", "alpha")
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    documents, failures = load_folder(link)
    assert [d.id for d in documents] == ["a.md"] and failures == []


# -- issue 13 #14: no silent skips ----------------------------------------------------------------


def test_symlink_loops_dangling_links_and_special_files_are_reported(tmp_path: Path) -> None:
    _write(tmp_path, "good.md", "good")
    (tmp_path / "loop.md").symlink_to(tmp_path / "loop.md")
    (tmp_path / "ping.md").symlink_to(tmp_path / "pong.md")
    (tmp_path / "pong.md").symlink_to(tmp_path / "ping.md")
    (tmp_path / "dangling.md").symlink_to(tmp_path / "missing.md")
    os.mkfifo(tmp_path / "pipe.txt")  # reading it would block forever

    documents, failures = load_folder(tmp_path)
    assert [d.id for d in documents] == ["good.md"]
    reasons = _reasons(failures)
    assert reasons["loop.md"].startswith("symlink loop")
    assert reasons["ping.md"].startswith("symlink loop") and reasons["pong.md"].startswith("symlink loop")
    assert reasons["dangling.md"].startswith("dangling symlink")
    assert reasons["pipe.txt"] == "not a regular file (a named pipe)"
    assert [rel for rel, _ in list_files(tmp_path)] == ["good.md"]


def test_whitespace_and_invisible_only_files_are_reported(tmp_path: Path) -> None:
    _write(tmp_path, "nbsp.txt", "\u00a0\u00a0\n\u00a0")
    _write(tmp_path, "zero-width.md", "\u200b\ufeff\u2060 \u3000")
    _write(tmp_path, "ok.txt", "\u00a0visible\u00a0")
    documents, failures = load_folder(tmp_path)
    assert [d.id for d in documents] == ["ok.txt"]
    reasons = _reasons(failures)
    assert reasons["nbsp.txt"].startswith("no visible text")
    assert reasons["zero-width.md"].startswith("no visible text")


def test_control_characters_are_refused_as_not_text(tmp_path: Path) -> None:
    junk = bytes(b % 32 for b in range(1, 4000) if b % 32 not in (0, 9, 10, 13))
    _write(tmp_path, "junk.txt", junk)
    _write(tmp_path, "page.html", b"<p>" + junk + b"</p>")
    _write(tmp_path, "log.txt", "\x1b[32mgreen\x1b[0m line\n\x0cnext page\n")  # ANSI and form feed are text
    documents, failures = load_folder(tmp_path)
    assert [d.id for d in documents] == ["log.txt"]
    reasons = _reasons(failures)
    assert reasons["junk.txt"].startswith("not text:") and "control characters" in reasons["junk.txt"]
    assert reasons["page.html"].startswith("not text:")


# -- issue 13 #5, #6 and per-file isolation -------------------------------------------------------


def test_deeply_nested_json_and_html_are_reported_and_the_rest_loads(tmp_path: Path) -> None:
    _write(tmp_path, "deep.json", "[" * 100_000)
    _write(tmp_path, "deep.jsonl", "[" * 100_000 + "\n")
    _write(tmp_path, "deep.html", "<div>" * 100_000 + "x")
    _write(tmp_path, "ok.json", '{"a": [1, 2]}')
    documents, failures = load_folder(tmp_path)
    assert "ok.json" in [d.id for d in documents]
    reasons = _reasons(failures)
    assert reasons["deep.json"] == "JSON nested too deeply to parse"
    assert reasons["deep.jsonl"] == "JSON nested too deeply to parse"
    assert "deep.html" in reasons or "deep.html" in [d.id for d in documents]


def test_file_name_that_is_not_utf8_is_reported_under_an_escaped_name(tmp_path: Path) -> None:
    _write(tmp_path, "good.md", "good")
    bad_dir = os.fsencode(tmp_path) + b"/dir\xfe"
    os.mkdir(bad_dir)
    for raw in (os.fsencode(tmp_path) + b"/bad\xff.txt", bad_dir + b"/inner.md"):
        with open(raw, "wb") as handle:
            handle.write(b"content")
    documents, failures = load_folder(tmp_path)
    assert [d.id for d in documents] == ["good.md"]
    reasons = _reasons(failures)
    assert set(reasons) == {"bad\\xff.txt", "dir\\xfe/inner.md"}
    assert all(r.startswith("file name is not valid UTF-8") for r in reasons.values())
    for failure in failures:
        failure.path.encode("utf-8")  # safe to store, log and show
    assert [rel for rel, _ in list_files(tmp_path)] == ["good.md"]


def test_non_utf8_name_never_reaches_the_store(tmp_path: Path, store) -> None:
    _write(tmp_path, "good.md", "good")
    with open(os.fsencode(tmp_path) + b"/bad\xff.txt", "wb") as handle:
        handle.write(b"content")
    documents, failures = load_folder(tmp_path)
    sync = store.documents.sync("hostile-names", documents, failures)  # raised UnicodeEncodeError
    assert sync.added == ["good.md"] and [f.path for f in sync.failed] == ["bad\\xff.txt"]


def test_any_parser_exception_becomes_that_files_failure(tmp_path: Path, monkeypatch) -> None:
    def broken_parser(text: str) -> tuple[str, str]:
        raise ZeroDivisionError("parser bug")

    monkeypatch.setattr(files, "parse_html", broken_parser)
    # in this process: the parsing worker (chunking.documents.parse_bounds) would not see the patched parser
    monkeypatch.setattr(files, "run_bounded", lambda func, *args, **_: func(*args))
    _write(tmp_path, "page.html", "<p>x</p>")
    _write(tmp_path, "ok.md", "fine")
    documents, failures = load_folder(tmp_path)
    assert [d.id for d in documents] == ["ok.md"]
    assert _reasons(failures) == {"page.html": "cannot load: ZeroDivisionError: parser bug"}


def test_file_over_the_size_limit_is_reported(tmp_path: Path, monkeypatch) -> None:
    _write(tmp_path, "big.txt", "word " * 300)
    _write(tmp_path, "small.txt", "word")
    monkeypatch.setenv("CHUNKYARD_MAX_DOCUMENT_BYTES", "1000")
    documents, failures = load_folder(tmp_path)
    assert [d.id for d in documents] == ["small.txt"]
    assert _reasons(failures)["big.txt"].startswith("file too large: 1500 bytes, over the limit of 1000")
    assert "CHUNKYARD_MAX_DOCUMENT_BYTES" in _reasons(failures)["big.txt"]
    monkeypatch.setenv("CHUNKYARD_MAX_DOCUMENT_BYTES", "lots")
    with pytest.raises(ValueError, match="CHUNKYARD_MAX_DOCUMENT_BYTES"):
        load_folder(tmp_path)
    monkeypatch.delenv("CHUNKYARD_MAX_DOCUMENT_BYTES")
    assert files.max_document_bytes() == 20 * 1024 * 1024


# -- issue 13 #4: every chunk fits its limits in characters as well as tokens ---------------------

LONG_WORD_TEXT = (
    "Intro paragraph before the dump.\n\n" + HEX_LINE + "\n\nA closing sentence.\n" + "a" * 60_000
)

SPECS = [
    {"strategy": "token", "size": 256, "tokenizer": "model"},
    {"strategy": "recursive", "size": 256, "tokenizer": "model"},
    {"strategy": "recursive", "size": 64, "overlap": 8, "tokenizer": "model"},
    {"strategy": "sentence", "size": 128, "tokenizer": "model"},
    {"strategy": "markdown", "size": 256, "tokenizer": "model"},
    {"strategy": "code", "size": 128, "tokenizer": "model"},
    {"strategy": "adaptive", "size": 256, "tokenizer": "model"},
    {"strategy": "hierarchical", "size": 64, "parent_size": 512, "tokenizer": "model"},
    {"strategy": "recursive", "size": 256, "tokenizer": "cl100k"},
    {"strategy": "token", "size": 32, "tokenizer": "words"},
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s['strategy']}-{s['size']}-{s['tokenizer']}")
def test_overlong_word_is_cut_by_characters(spec: dict) -> None:
    chunker = build_chunker(spec, config_key="k")
    doc = Document("dump.txt", LONG_WORD_TEXT)
    chunks = chunker.chunk(doc)
    # the model tokenizer maps each long word to one [UNK]: before, one 20 KB (and one 60 KB) chunk
    max_chars = max(512, spec["size"] * (64 if spec["tokenizer"] == "words" else 16))
    for c in chunks:
        assert c.text == LONG_WORD_TEXT[c.start : c.end]
        assert len(c.text) <= max_chars, (len(c.text), max_chars)
        assert chunker.tokenizer.count(c.text) <= spec["size"]
        assert c.token_count <= spec["size"]
        if "parent_start" in c.metadata:
            assert c.metadata["parent_end"] - c.metadata["parent_start"] <= 512 * 16
    covered = bytearray(len(LONG_WORD_TEXT))
    for c in chunks:
        covered[c.start : c.end] = b"\x01" * (c.end - c.start)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(LONG_WORD_TEXT))


def test_bm25_terms_are_capped_in_bytes() -> None:
    terms = Analyzer("english")(f"short {HEX_LINE} {'é' * 300}")
    assert max(len(t.encode("utf-8")) for t in terms) <= MAX_TERM_BYTES
    assert terms[0] == "short" and terms[1] == HEX_LINE[:MAX_TERM_BYTES]
    # a query names the long word the same way, so it still matches
    assert Analyzer("english")(HEX_LINE) == [terms[1]]


def test_collection_with_an_overlong_word_publishes_and_the_rest_is_searchable(
    tmp_path: Path, store, embedder
) -> None:
    from chunkyard.pipeline.graph import build_index
    from chunkyard.retrieval.query import Searcher
    from chunkyard.retrieval.settings.config import IndexConfig, IndexSpec

    for rel, text in GOOD.items():
        _write(tmp_path, rel, text)
    _write(tmp_path, "dump.txt", "Hex dump follows.\n" + HEX_LINE + "\n")
    _write(tmp_path, "aaaa.txt", "a" * 1_000_000)
    _write(tmp_path, "deep.json", "[" * 100_000)
    (tmp_path / "passwd.txt").symlink_to("/etc/passwd")
    documents, failures = load_folder(tmp_path)
    assert sorted(d.id for d in documents) == sorted([*GOOD, "dump.txt", "aaaa.txt"])
    assert sorted(f.path for f in failures) == ["deep.json", "passwd.txt"]

    spec = IndexSpec(
        "hostile-long-words",
        IndexConfig(
            name="recursive-256", chunker={"strategy": "recursive", "size": 256, "tokenizer": "model"}
        ),
    )
    store.documents.sync(spec.collection, documents, failures)
    report = build_index(store, spec, embedder)  # failed: index row requires 20072 bytes
    assert report.published
    with store.connection() as conn:
        longest, longest_term = conn.execute(
            "SELECT (SELECT max(length(text)) FROM chunks WHERE index_name = %s),"
            " (SELECT max(octet_length(term)) FROM bm25_terms WHERE index_name = %s)",
            (spec.name, spec.name),
        ).fetchone()
    assert longest <= 256 * 16 and longest_term <= MAX_TERM_BYTES
    searcher = Searcher(store, embedder)
    assert searcher.search("walrus tide tables", spec.name, k=1, mode="bm25")[0].doc_id == "guide.md"
    assert searcher.search("lighthouse docker compose", spec.name, k=1, mode="hybrid")[0].doc_id == (
        "notes/deploy.txt"
    )
    assert searcher.search(HEX_LINE[:300], spec.name, k=1, mode="bm25")[0].doc_id == "dump.txt"


# -- per-file isolation, fuzzed -------------------------------------------------------------------

EXTENSIONS = [".txt", ".md", ".json", ".jsonl", ".html", ".pdf", ".docx", ".pptx", ".py", ".csv", ""]
HOSTILE = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=2000)),
    st.tuples(st.just("deep"), st.sampled_from(["[", '{"a":', "<div>", "<b><i>", "("])),
    st.tuples(st.just("huge-line"), st.sampled_from([b"a", b"0f", b"\xc3\xa9", b"\x01", b"\xa0"])),
    st.tuples(st.just("symlink"), st.sampled_from(["/etc/passwd", "../outside.txt", "missing", "self"])),
    st.tuples(st.just("text"), st.text(max_size=300)),
)
NAMES = st.one_of(
    # Names that are not UTF-8 come from the byte branch below; a lone surrogate is no file name.
    st.text(
        alphabet=st.characters(blacklist_characters="/\x00.", blacklist_categories=("Cs",)),
        min_size=1,
        max_size=12,
    ),
    st.binary(min_size=1, max_size=8).filter(lambda b: b"/" not in b and b"\x00" not in b and b[:1] != b"."),
)


def _make_hostile(root: Path, index: int, name: str | bytes, kind: str, payload, ext: str) -> str:
    raw_name = name if isinstance(name, bytes) else name.encode("utf-8", "surrogateescape")
    raw_name = b"h%d-" % index + raw_name + ext.encode()
    path = os.fsencode(root) + b"/" + raw_name
    if kind == "symlink":
        target = path if payload == "self" else os.fsencode(payload)
        os.symlink(target, path)
    else:
        if kind == "bytes":
            data = payload
        elif kind == "deep":
            data = payload.encode() * 50_000
        elif kind == "huge-line":
            data = payload * (300_000 // len(payload))
        else:
            data = payload.encode("utf-8", "surrogatepass")
        with open(path, "wb") as handle:
            handle.write(data)
    return walk.display_path(os.fsdecode(raw_name))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(st.tuples(NAMES, HOSTILE, st.sampled_from(EXTENSIONS)), min_size=1, max_size=6))
def test_hostile_folders_never_raise_and_every_good_file_loads(entries) -> None:
    chunker = build_chunker({"strategy": "recursive", "size": 64, "tokenizer": "model"})
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        _write(base, "outside.txt", "outside the folder: must never be read")
        root = base / "docs"
        for rel, text in GOOD.items():
            _write(root, rel, text)
        expected = {
            _make_hostile(root, i, name, kind, payload, ext)
            for i, (name, (kind, payload), ext) in enumerate(entries)
        }
        documents, failures = load_folder(root)
        by_id = {d.id: d for d in documents}
        for rel, text in GOOD.items():
            assert by_id[rel].text == text
        seen = set(by_id) | {f.path for f in failures}
        # every hostile entry is a document or a reported failure, except hidden-name ones never selected
        assert {e for e in expected if not e.startswith(".")} <= seen
        for doc in documents:
            doc.id.encode("utf-8")
            assert "outside the folder" not in doc.text
            for c in chunker.chunk(doc):
                assert c.text == doc.text[c.start : c.end]
                assert len(c.text) <= chunker.max_chars and c.token_count <= 64
        for failure in failures:
            failure.path.encode("utf-8")
            assert failure.reason
        assert {rel for rel, _ in list_files(root)} <= set(by_id) | {f.path for f in failures}


# -- issue 27 #9: every skip reported, a file mid-write retried ----------------------------------


def test_a_symlinked_folder_is_reported_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    _write(root, "guide.md", GOOD["guide.md"])
    _write(root, "real/inside.md", "# Inside\n\nReached through its own path only.\n")
    _write(tmp_path, "elsewhere/secret.md", "# Secret\n\nOutside the folder.\n")
    (root / "inner-link").symlink_to(root / "real", target_is_directory=True)
    (root / "outer-link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    documents, failures = load_folder(root)
    assert sorted(d.id for d in documents) == ["guide.md", "real/inside.md"]
    reasons = _reasons(failures)
    assert reasons["inner-link"].startswith("symlinked folder: not followed")
    assert reasons["outer-link"].startswith("symlink points outside the documents folder")


def test_a_text_file_caught_mid_write_is_read_again_not_called_broken(tmp_path: Path) -> None:
    """The writer has written half of a two-byte character when the scan reads; it finishes 0.3 s later."""
    import threading
    import time

    text = "# Café\n\nThe crème brûlée recipe, appended while the scan reads.\n"
    data = text.encode("utf-8")
    cut = data.index("é".encode()) + 1  # inside the first 'é'
    path = _write(tmp_path, "recipe.md", data[:cut])

    def finish() -> None:
        time.sleep(0.3)
        with open(path, "ab") as handle:
            handle.write(data[cut:])

    writer = threading.Thread(target=finish)
    writer.start()
    documents, failures = load_folder(tmp_path)
    writer.join()
    assert failures == [] and [d.text for d in documents] == [text]

    # a file that stays cut is still reported as bad UTF-8 (nothing is being written)
    _write(tmp_path, "recipe.md", data[:cut])
    _, failures = load_folder(tmp_path)
    assert _reasons(failures)["recipe.md"].startswith("not valid UTF-8")
