"""Training corpora for the tiny reference checkpoint, obtained at run time.

Three corpora, none of them committed to the repository:

  austen  Jane Austen's six novels, from the Debian package r-cran-janeaustenr (an R lazy-load
          database: zlib blobs of XDR-serialised character vectors).
  web     The World English Bible, from the Debian package sword-text-web (a SWORD zText module:
          zlib blocks of OSIS XML, located through .bzs index triples).
  python  The Python standard library `.py` sources of the running interpreter, chosen by the fixed
          rule in `python_stdlib_files()` (tests, IDLE, demos, codec tables and build-specific files
          excluded).

Each corpus is a list of documents. On disk (`<work>/corpus/<name>.txt`) the documents are joined
by the literal string `<|endoftext|>`, which the tokenizer maps to the EOS/separator token. The sha256
of every such file is pinned in `corpus_checksums.json`; a mismatch stops the run with both digests.
The last ~5% of each corpus (cut at a line boundary) is held out for evaluation.

Usage:
  python research/train/corpus.py [--work-dir DIR] [--update-checksums]
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import re
import struct
import subprocess
import sys
import sysconfig
import zlib
from pathlib import Path

DOC_SEPARATOR = "<|endoftext|>"
HOLDOUT_FRACTION = 0.05
CORPUS_NAMES = ("austen", "web", "python")

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WORK_DIR = REPO_ROOT / "build" / "train_work"
CHECKSUM_FILE = Path(__file__).resolve().parent / "corpus_checksums.json"

DEBIAN_PACKAGES = {
    "austen": "r-cran-janeaustenr=1.0.0-1",
    "web": "sword-text-web=426.0-1",
}
AUSTEN_RDB = "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"
WEB_MODULE_DIR = "usr/share/sword/modules/texts/ztext/engWEB2015eb"


class CorpusError(RuntimeError):
    pass


# ----------------------------------------------------------------------------------------------
# Debian packages


def fetch_debian_package(spec: str, work_dir: Path) -> Path:
    """Downloads `name=version` with apt-get and unpacks it (without installing) under work_dir.

    Returns the root of the unpacked tree. Re-uses an earlier unpack.
    """
    name, version = spec.split("=")
    unpack_root = work_dir / "debs" / f"{name}_{version}"
    done_marker = unpack_root / ".unpacked"
    if done_marker.exists():
        return unpack_root
    download_dir = work_dir / "debs"
    download_dir.mkdir(parents=True, exist_ok=True)
    debs = sorted(download_dir.glob(f"{name}_{version}_*.deb"))
    if not debs:
        result = subprocess.run(["apt-get", "download", spec], cwd=download_dir,
                                capture_output=True, text=True)
        debs = sorted(download_dir.glob(f"{name}_{version}_*.deb"))
        if not debs:
            raise CorpusError(f"apt-get download {spec} failed (rc {result.returncode}):\n"
                              f"{result.stdout}\n{result.stderr}\n"
                              "The Debian archive keeps only current versions; if the version is "
                              "gone, pick the new one and update corpus_checksums.json.")
    unpack_root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(unpack_root)], check=True)
    done_marker.touch()
    return unpack_root


# ----------------------------------------------------------------------------------------------
# Jane Austen: R lazy-load database


def _read_be_u32(buf: bytes, pos: int) -> int:
    return struct.unpack_from(">I", buf, pos)[0]


def _read_r_character_vector(blob: bytes) -> list[str]:
    """Reads one XDR-serialised R object that is a character vector (STRSXP).

    Layout: "X\\n", format version, writer R version, min reader R version, [v3: encoding name],
    then the STRSXP: flags word (low byte 16), element count, and per element a CHARSXP:
    flags word (low byte 9), byte length (-1 = NA), bytes.
    """
    if blob[:2] != b"X\n":
        raise CorpusError("austen: blob is not XDR-serialised R data")
    pos = 2
    format_version = _read_be_u32(blob, pos)
    pos += 12  # format version, writer version, minimal reader version
    if format_version == 3:
        encoding_length = _read_be_u32(blob, pos)
        pos += 4 + encoding_length
    flags = _read_be_u32(blob, pos)
    if flags & 0xFF != 16:
        raise CorpusError(f"austen: expected a character vector, got SEXP type {flags & 0xFF}")
    count = _read_be_u32(blob, pos + 4)
    pos += 8
    lines = []
    for _ in range(count):
        flags = _read_be_u32(blob, pos)
        if flags & 0xFF != 9:
            raise CorpusError(f"austen: expected CHARSXP at byte {pos}, got type {flags & 0xFF}")
        length = struct.unpack_from(">i", blob, pos + 4)[0]
        pos += 8
        if length < 0:  # NA_STRING
            lines.append("")
            continue
        lines.append(blob[pos:pos + length].decode("utf-8"))
        pos += length
    return lines


def read_austen(package_root: Path) -> list[str]:
    """Returns the six novels, one document each, in the order they are stored."""
    data = (package_root / AUSTEN_RDB).read_bytes()
    documents = []
    pos = 0
    while pos < len(data):
        expected_length = _read_be_u32(data, pos)
        inflater = zlib.decompressobj()
        blob = inflater.decompress(data[pos + 4:])
        if len(blob) != expected_length:
            raise CorpusError(f"austen: blob at {pos} inflates to {len(blob)} bytes, "
                              f"header says {expected_length}")
        consumed = len(data) - (pos + 4) - len(inflater.unused_data)
        pos += 4 + consumed
        lines = _read_r_character_vector(blob)
        text = "\n".join(line.rstrip() for line in lines).strip("\n")
        documents.append(re.sub(r"\n{3,}", "\n\n", text) + "\n")
    if len(documents) != 6:
        raise CorpusError(f"austen: expected 6 novels, found {len(documents)}")
    return documents


# ----------------------------------------------------------------------------------------------
# World English Bible: SWORD zText module with OSIS markup

_OSIS_NOTE = re.compile(r"<note\b[^>]*>.*?</note>", re.DOTALL)
# Tags that start a new line: paragraphs (<p>, OSIS "x-p" div milestones), poetry lines (<l>),
# explicit line breaks (<lb/>), titles, and chapter starts.
_OSIS_LINE_BREAK = re.compile(
    r"<(?:p\b|/p>|lb\b|l\b[^>]*sID|div\b[^>]*type=\"x-p\"|/?title\b|chapter\b[^>]*sID)[^>]*>")
_ANY_TAG = re.compile(r"<[^>]*>")


_NOTE_MARK = "\x00"


def osis_to_text(osis: str) -> str:
    # A footnote often stands where a space would be ("God<note>…</note>created"): mark it, and after
    # stripping turn the mark into a space unless whitespace or closing punctuation is already there.
    text = _OSIS_NOTE.sub(_NOTE_MARK, osis)
    text = _OSIS_LINE_BREAK.sub("\n", text)
    text = _ANY_TAG.sub("", text)
    text = html.unescape(text)
    text = re.sub(r"\x00+(?=[\s.,;:!?\u2019\u201d)\]]|$)", "", text)
    text = re.sub(r"(?<=\s)\x00+", "", text)
    text = re.sub(r"\x00+", " ", text)
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    return text


def read_web(package_root: Path) -> list[str]:
    """Returns one document per compressed block (a block is a book or a front/back matter part)."""
    module_dir = package_root / WEB_MODULE_DIR
    documents = []
    for testament in ("ot", "nt"):
        index = (module_dir / f"{testament}.bzs").read_bytes()
        blocks = (module_dir / f"{testament}.bzz").read_bytes()
        if len(index) % 12:
            raise CorpusError(f"web: {testament}.bzs size {len(index)} is not a multiple of 12")
        for entry in range(len(index) // 12):
            offset, compressed, uncompressed = struct.unpack_from("<III", index, entry * 12)
            if compressed == 0:
                continue
            raw = zlib.decompress(blocks[offset:offset + compressed])
            if len(raw) != uncompressed:
                raise CorpusError(f"web: {testament} block {entry} inflates to {len(raw)} bytes, "
                                  f"index says {uncompressed}")
            text = osis_to_text(raw.decode("utf-8"))
            if len(text) > 200:  # skip importer milestones and other empty blocks
                documents.append(text + "\n")
    return documents


# ----------------------------------------------------------------------------------------------
# Python standard library sources

_SKIPPED_DIRS = {"site-packages", "test", "tests", "idlelib", "turtledemo", "__pycache__",
                 "encodings", "lib-dynload", "pydoc_data", "ensurepip", "__phello__"}
_SKIPPED_FILES = {"this.py", "antigravity.py", "__hello__.py"}


def python_stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def python_stdlib_files(root: Path) -> list[str]:
    """The fixed selection rule: every `*.py` under the stdlib root, sorted by relative POSIX path,
    except directories named in _SKIPPED_DIRS or starting with `config-`, files named `test_*.py`,
    `_sysconfigdata*` (build-specific) and the joke modules in _SKIPPED_FILES."""
    selected = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in _SKIPPED_DIRS and not d.startswith("config-")]
        for name in files:
            if (not name.endswith(".py") or name.startswith("test_")
                    or name.startswith("_sysconfigdata") or name in _SKIPPED_FILES):
                continue
            selected.append(Path(directory, name).relative_to(root).as_posix())
    return sorted(selected)


def read_python() -> list[str]:
    root = python_stdlib_root()
    documents = []
    for relative_path in python_stdlib_files(root):
        text = (root / relative_path).read_text(encoding="utf-8", errors="replace")
        text = text.replace("\r\n", "\n").rstrip() + "\n"
        documents.append(f"# {relative_path}\n{text}")
    return documents


# ----------------------------------------------------------------------------------------------
# Assembly, checksums, split


def extract_corpus(name: str, work_dir: Path) -> list[str]:
    if name == "austen":
        return read_austen(fetch_debian_package(DEBIAN_PACKAGES["austen"], work_dir))
    if name == "web":
        return read_web(fetch_debian_package(DEBIAN_PACKAGES["web"], work_dir))
    if name == "python":
        return read_python()
    raise ValueError(name)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_checksums() -> dict:
    if CHECKSUM_FILE.exists():
        return json.loads(CHECKSUM_FILE.read_text())
    return {}


def prepare_corpora(work_dir: Path, update_checksums: bool = False) -> dict[str, Path]:
    """Extracts every corpus to `<work_dir>/corpus/<name>.txt`, checks its sha256 against
    corpus_checksums.json (or records it with update_checksums) and returns the paths."""
    work_dir = Path(work_dir)
    corpus_dir = work_dir / "corpus"
    corpus_dir.mkdir(parents=True, exist_ok=True)
    pinned = load_checksums()
    paths = {}
    for name in CORPUS_NAMES:
        path = corpus_dir / f"{name}.txt"
        if not path.exists() or update_checksums:
            documents = extract_corpus(name, work_dir)
            for document in documents:
                if DOC_SEPARATOR in document:
                    raise CorpusError(f"{name}: a document contains the separator {DOC_SEPARATOR}")
            path.write_bytes(DOC_SEPARATOR.join(documents).encode("utf-8"))
        digest = sha256_hex(path.read_bytes())
        if update_checksums:
            pinned[name] = {"sha256": digest, "bytes": path.stat().st_size,
                            "source": DEBIAN_PACKAGES.get(name, f"python{sys.version.split()[0]} stdlib")}
        else:
            expected = pinned.get(name, {}).get("sha256")
            if expected is None:
                raise CorpusError(f"{name}: no checksum pinned in {CHECKSUM_FILE}; "
                                  "run corpus.py --update-checksums once and commit the file")
            if digest != expected:
                raise CorpusError(f"corpus '{name}' ({path}) has changed: expected sha256 {expected}, "
                                  f"got {digest}. Delete {path} to re-extract; if the source really "
                                  "changed, re-pin with --update-checksums.")
        paths[name] = path
    if update_checksums:
        CHECKSUM_FILE.write_text(json.dumps(pinned, indent=2, sort_keys=True) + "\n")
    return paths


def split_train_holdout(text: str, holdout_fraction: float = HOLDOUT_FRACTION) -> tuple[str, str]:
    """Cuts at the first line break after (1 - holdout_fraction) of the characters."""
    cut = text.find("\n", int(len(text) * (1.0 - holdout_fraction)))
    if cut < 0:
        raise CorpusError("corpus too small to split")
    return text[:cut + 1], text[cut + 1:]


def load_splits(work_dir: Path) -> dict[str, tuple[str, str]]:
    """{name: (train_text, holdout_text)} for every corpus, checksums verified."""
    paths = prepare_corpora(work_dir)
    return {name: split_train_holdout(path.read_text(encoding="utf-8")) for name, path in paths.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    parser.add_argument("--update-checksums", action="store_true",
                        help="re-extract everything and pin the new sha256 values")
    args = parser.parse_args()
    try:
        paths = prepare_corpora(args.work_dir, args.update_checksums)
    except CorpusError as error:
        sys.exit(f"error: {error}")
    for name, path in paths.items():
        text = path.read_text(encoding="utf-8")
        train, holdout = split_train_holdout(text)
        print(f"{name:7s} {path.stat().st_size:>10,d} bytes  {text.count(DOC_SEPARATOR) + 1:4d} documents  "
              f"train {len(train):>10,d} chars  holdout {len(holdout):>8,d} chars")


if __name__ == "__main__":
    main()
