"""Small helpers shared by every stage: canonical JSON, all-or-nothing writes, and reads of
the files the workflow wrote that remove a corrupt one so that a rerun rebuilds it."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import shutil
from pathlib import Path

from lengthgen.support.errors import CorruptIntermediate, UserError, WriteFailed

# The run's results directory, absolute; set by the workflow (workflow/rules/common.smk) for its
# jobs. Only a file under it is one the workflow wrote and can write again, so only such a file
# is removed when it fails to read; run by hand, a stage removes nothing.
RESULTS_ENV = "LENGTHGEN_RESULTS"


def canonical_json(obj) -> str:
    """JSON with sorted keys and no whitespace, so equal configs give equal strings."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary sibling of `path`; rename it onto `path` only on success.

    A killed job therefore never leaves a half-written output behind. A write the operating
    system refuses (a full disk, a read-only or forbidden folder) raises WriteFailed naming
    `path` and the reason, with the temporary file removed.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except OSError as err:
        if not _refused_write(err, path, tmp):
            raise
        raise WriteFailed(_write_failure(path, err)) from None
    finally:
        with contextlib.suppress(OSError):  # on a read-only file system there is none to remove
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_paths(paths):
    """atomic_path for files that go together (the pages of one scorecard): yield their temporary
    siblings, and rename them onto `paths` only once every one is written, so that a failure or
    an interrupt while writing leaves the old set whole, never some new pages beside old ones."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(atomic_path(path)) for path in paths]


# errno values that say the file system would not take the bytes, whichever call met them
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.EIO}


def _refused_write(err: OSError, path: Path, tmp: Path) -> bool:
    """Whether `err`, raised inside atomic_path, is the write's own: an error naming the
    output, its temporary file or a folder above them, or (write() names no file) one of
    _WRITE_ERRNOS. A missing input read inside the block stays the input's error."""
    if err.errno is None:
        return False
    names = [n for n in (err.filename, err.filename2) if n is not None]
    if not names:
        return err.errno in _WRITE_ERRNOS
    ours = {tmp, path, *path.parents}
    return any(Path(os.fsdecode(n)) in ours for n in names)


def _write_failure(path: Path, err: OSError) -> str:
    reason = err.strerror or os.strerror(err.errno)
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{path}: cannot write: {reason} ({_free_bytes(path)} bytes free there); free some space and rerun"
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"{path}: cannot write: {reason}; make its folder writable and rerun"
    return f"{path}: cannot write: {reason}; rerun once that is fixed"


def _free_bytes(path: Path) -> str:
    """Free bytes on the file system of `path` (of its nearest existing folder), as 1,234."""
    for folder in (path, *path.parents):
        with contextlib.suppress(OSError):
            return f"{shutil.disk_usage(folder).free:,}"
    return "unknown"


# Below this, a run's first job logs and checkpoints would not fit: the disk is full.
MIN_FREE_BYTES = 10 * 2**20


def _free(folder) -> int | None:
    """Free bytes on the file system of `folder` (of its nearest existing parent); None if unknown."""
    for existing in (Path(folder), *Path(folder).parents):
        with contextlib.suppress(OSError):
            return shutil.disk_usage(existing).free
    return None


def check_free_space(folder) -> None:
    """UserError when the file system of `folder` (of its nearest existing parent) is full: said
    before the run, since the jobs' own logs, on the same disk, come out empty."""
    free = _free(folder)
    if free is not None and free < MIN_FREE_BYTES:
        raise UserError(f"{folder}: the disk is full ({free:,} bytes free on its file system, under the "
                        f"{MIN_FREE_BYTES:,} a run needs to start); free some space and rerun")


def full_disk(folder) -> str | None:
    """After a failed run, the line that names a disk that filled during it (the failed jobs'
    logs, on that disk, may have come out empty, and Snakemake says only that a job failed);
    None when the disk has room."""
    free = _free(folder)
    if free is None or free >= MIN_FREE_BYTES:
        return None
    return (f"{folder}: the disk filled during the run ({free:,} bytes free on its file system): the jobs that "
            "failed could not write their outputs or logs; free some space and rerun the same command")


def check_writable(folder) -> None:
    """UserError naming the first of `folder`, its entries and those of its tables/ and figures/
    that this user cannot write (a read-only copy, file system or permission): Snakemake would
    refuse it as a protected output, saying neither which folder nor what to do."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    entries = [folder, *sorted(folder.iterdir())]
    for sub in ("tables", "figures"):
        if (folder / sub).is_dir():
            entries += sorted((folder / sub).iterdir())
    locked = next((p for p in entries if not p.is_symlink() and not os.access(p, os.W_OK)), None)
    if locked is not None:
        which = "" if locked == folder else f" ({locked} cannot be written)"
        raise UserError(f"{folder}: read-only{which}; make it writable (chmod -R u+w {folder}) or set results_dir "
                        "to a folder you can write, and rerun")


def remove_stale(paths) -> None:
    """Remove the files made from a table that is about to be rebuilt, before its inputs are
    read: if the rebuild fails, Snakemake removes the table, and what was made from the old one
    must go with it (workflow/rules/common.smk, made_from_tables)."""
    for path in paths:
        Path(path).unlink(missing_ok=True)


def save_png(fig, path, dpi: int, tight: bool = True) -> None:
    """A matplotlib figure as PNG, all or nothing, then closed. Without matplotlib's version in
    the file's metadata: the same figure is the same bytes under another release."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png", metadata={"Software": None}, bbox_inches="tight" if tight else None)
    plt.close(fig)


def write_text(path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_parquet(path, columns: dict, metadata: dict[bytes, bytes] | None = None) -> None:
    """Write equal-length columns (name -> list or array) as one Parquet table, all or nothing;
    `metadata` goes into the schema's key-value metadata, beside the columns.

    pyarrow alone: the training and sweep jobs need no pandas, whose import would be a visible
    share of each of a hundred short jobs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        # from_pandas: NaN is written as null, as pandas' to_parquet did before
        table = pa.table({name: pa.array(values, from_pandas=True) for name, values in columns.items()})
        if metadata:
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
        pq.write_table(table, tmp)


def read_intermediate(path, reader, what: str):
    """`reader(path)` for a file the workflow wrote and can write again (a dataset, a checkpoint,
    a sweep, meta.json). One that fails to read (torn by a full disk, a killed copy, a bad
    sector) raises CorruptIntermediate naming it, and is removed if it lies under the run's
    results directory (RESULTS_ENV): Snakemake then sees a missing input, and rerunning the
    same command rebuilds it instead of failing on it again.

    Not corruption, so passed on: the operating system's errors (a missing file, no permission,
    an I/O error), the reader's own UserErrors (a file of another cell or format), and what
    no parser raises on bad bytes (an ImportError, a TypeError of a bug) lest every input go."""
    try:
        return reader(path)
    except UserError:
        raise
    except OSError as err:
        if err.errno in _SYSTEM_ERRNOS or err.filename is not None:
            raise
        reason = err  # a parser's OSError: pyarrow's on bad pages, torch's EINVAL on a torn archive
    except Exception as err:
        if isinstance(err, MemoryError) or not (isinstance(err, _PARSE_ERRORS)
                                                 or type(err).__module__.startswith("pyarrow")):
            raise
        reason = err
    raise corrupt(path, f"not a readable {what} ({type(reason).__name__}: {_first_sentence(reason)})") from None


# What the parsers raise on bad bytes: json and numpy ValueError (UnicodeDecodeError too), torch
# RuntimeError or UnpicklingError, numpy EOFError; pyarrow its own classes (matched by module)
_PARSE_ERRORS = (ValueError, RuntimeError, EOFError, pickle.UnpicklingError)
# errno values of the file system's state, not of the file's bytes: the file may be whole
_SYSTEM_ERRNOS = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.EIO, errno.ESTALE,
                  errno.EMFILE, errno.ENFILE, errno.ENOMEM}


def corrupt(path, problem: str) -> CorruptIntermediate:
    """The error for the unreadable intermediate `path`, removed first where read_intermediate
    removes one."""
    if _remove_under_results(path):
        return CorruptIntermediate(f"{path}: {problem}; removed it: rerun the workflow to rebuild it")
    return CorruptIntermediate(f"{path}: {problem}; delete it and rerun the workflow to rebuild it")


def _remove_under_results(path, *made_from) -> bool:
    """Remove the file `path`, and the files `made_from` it, if it lies under the run's results
    directory (RESULTS_ENV): whether it did."""
    root = os.environ.get(RESULTS_ENV)
    target = Path(path).resolve()
    if not (root and target.is_relative_to(Path(root).resolve()) and target.is_file()):
        return False
    for made in (target, *made_from):
        Path(made).unlink(missing_ok=True)
    return True


# The pages of a tables folder made from its tables: the scorecard (claims rule) and the report's
# HTML of it and of the summary (report_pages). They go whenever a table they are made from does
# (workflow/rules/common.smk, made_from_tables; corrupt_table).
MADE_FROM_TABLES = ("claims.csv", "claims.md", "claims.html", "summary.html")


def corrupt_table(path, err: UserError) -> UserError:
    """`err`, the error for a table of a tables folder that fails to read. In a job of the
    workflow the table is removed with the pages made from the tables beside it, which would
    otherwise stay up to date beside no table, so that the rerun rebuilds the table and the whole
    scorecard; a table read by hand (the committed ones, another run's) is left alone."""
    folder = Path(path).parent
    if _remove_under_results(path, *(folder / name for name in MADE_FROM_TABLES)):
        return CorruptIntermediate(f"{err}; removed it and the scorecard pages made from it: rerun the workflow "
                                   "to rebuild them")
    return err


def _first_sentence(err: Exception) -> str:
    """The start of a parser's message, which may run to paragraphs of advice."""
    text = (str(err).strip().splitlines() or [""])[0]
    head, sep, _ = text.partition(". ")
    return head.rstrip(".") if sep or len(text) <= 160 else text[:160] + "..."
