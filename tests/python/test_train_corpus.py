"""The training corpora's integrity checks (research/train/corpus.py): extracted corpus bytes must
match their pinned sha256, and a mismatch stops with a clear error naming the corpus, the file and
both digests. The corpus files are written by the test, so nothing is downloaded."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus():
    spec = importlib.util.spec_from_file_location("mtpspec_train_corpus", ROOT / "research" / "train" / "corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_corpora(work: Path, names) -> dict[str, bytes]:
    (work / "corpus").mkdir(parents=True)
    texts = {}
    for i, name in enumerate(names):
        text = (f"document {i} of {name}\nsecond line\n" * 40 + "<|endoftext|>tail\n").encode()
        (work / "corpus" / f"{name}.txt").write_bytes(text)
        texts[name] = text
    return texts


def test_matching_checksums_pass_and_split_holds_out_the_end(corpus, tmp_path, monkeypatch):
    texts = write_corpora(tmp_path, corpus.CORPUS_NAMES)
    pinned = {name: {"sha256": hashlib.sha256(t).hexdigest()} for name, t in texts.items()}
    monkeypatch.setattr(corpus, "load_checksums", lambda: pinned)
    paths = corpus.prepare_corpora(tmp_path)
    assert set(paths) == set(corpus.CORPUS_NAMES)
    train, holdout = corpus.split_train_holdout(paths["austen"].read_text())
    assert train + holdout == texts["austen"].decode()
    assert train.endswith("\n") and 0 < len(holdout) < 0.1 * len(train)


def test_changed_corpus_bytes_are_a_clear_error(corpus, tmp_path, monkeypatch):
    texts = write_corpora(tmp_path, corpus.CORPUS_NAMES)
    pinned = {name: {"sha256": hashlib.sha256(t).hexdigest()} for name, t in texts.items()}
    monkeypatch.setattr(corpus, "load_checksums", lambda: pinned)
    changed = tmp_path / "corpus" / "web.txt"
    changed.write_bytes(texts["web"].replace(b"second", b"Second"))  # one byte differs
    with pytest.raises(corpus.CorpusError) as error:
        corpus.prepare_corpora(tmp_path)
    message = str(error.value)
    assert "corpus 'web'" in message and str(changed) in message
    assert pinned["web"]["sha256"] in message
    assert hashlib.sha256(changed.read_bytes()).hexdigest() in message


def test_truncated_corpus_fails_its_checksum(corpus, tmp_path, monkeypatch):
    texts = write_corpora(tmp_path, corpus.CORPUS_NAMES)
    pinned = {name: {"sha256": hashlib.sha256(t).hexdigest()} for name, t in texts.items()}
    monkeypatch.setattr(corpus, "load_checksums", lambda: pinned)
    (tmp_path / "corpus" / "python.txt").write_bytes(texts["python"][:100])
    with pytest.raises(corpus.CorpusError, match="corpus 'python'.*has changed"):
        corpus.prepare_corpora(tmp_path)


def test_missing_pin_is_a_clear_error(corpus, tmp_path, monkeypatch):
    write_corpora(tmp_path, corpus.CORPUS_NAMES)
    monkeypatch.setattr(corpus, "load_checksums", lambda: {})
    with pytest.raises(corpus.CorpusError, match="austen: no checksum pinned"):
        corpus.prepare_corpora(tmp_path)


def test_the_committed_pins_cover_every_corpus(corpus):
    pinned = corpus.load_checksums()
    for name in corpus.CORPUS_NAMES:
        digest = pinned[name]["sha256"]
        assert len(digest) == 64 and int(digest, 16) >= 0
