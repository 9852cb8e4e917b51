"""`make gpu-check` (benchmarks/gpu_check.py) without a GPU: its parts run with CPU in CUDA's place,
so that the check a GPU machine runs once has run here first."""

import importlib.util
import sys

import pytest
import torch
import yaml
from conftest import REPO, VENV_BIN


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks/gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_check_runs_on_cpu_and_writes_its_summary_into_a_folder_not_there(gpu_check, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "STEPS", {"agreement": (6, 6), "pace": (3, 3)})
    monkeypatch.setattr(gpu_check, "STACK", 2)
    out = tmp_path / "not/there/gpu_check.md"
    assert gpu_check.main(["--quick", "--device", "cpu", "--skip", "tests", "--out", str(out)]) == 0
    text = out.read_text()
    assert "FAILED" not in text
    assert "fp32: agree" in text and text.count("AGREE") == len(gpu_check.AGREEMENT_MODELS)
    assert "a stack of 2:" in text and "stacked ratio" in text
    assert not list(out.parent.glob(".*tmp"))  # written whole, then renamed


def test_a_failing_part_is_reported_and_the_next_one_runs(gpu_check, tmp_path):
    def broken():
        raise ValueError("no such kernel")

    out = tmp_path / "gpu_check.md"
    failed = gpu_check.run_parts([("a", "Part A", broken), ("b", "Part B", lambda: ["fine"])], "# head", out)
    assert failed == ["a"]
    text = out.read_text()
    assert "FAILED: ValueError: no such kernel" in text and "## Part B" in text and "fine" in text


def test_a_disagreement_between_devices_is_called_one(gpu_check, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "STEPS", {"agreement": (2, 2), "pace": (1, 1)})
    monkeypatch.setattr(gpu_check, "AGREEMENT_MODELS", (("sparse_parity", "rope"),))
    monkeypatch.setattr(gpu_check, "logit_gap", lambda *a, **k: 5 * gpu_check.LOGIT_TOLERANCE)
    lines = gpu_check.agreement("cpu", 2, tmp_path)
    assert "DISAGREE (sparse_parity/rope)" in lines[0] and "DISAGREE" in lines[1]


def test_the_logit_tolerance_is_above_fp32_rounding_and_below_bf16(gpu_check):
    from lengthgen.model.transformer import ModelConfig, Transformer

    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=8, n_layer=2, d_model=64, n_head=4, d_ff=256, dropout=0.0,
                                    max_position=256, encoding="rope")).eval()
    tokens = torch.randint(0, 8, (16, 96))
    ids = torch.arange(96).expand_as(tokens)
    fp32 = gpu_check.logits_of(model, tokens, ids, torch.device("cpu"))
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = model(tokens, ids).float()
        reordered = model(tokens[:8], ids[:8])  # another batch shape: other kernels' summation order
    assert gpu_check.relative_gap(reordered, fp32[:8]) <= gpu_check.LOGIT_TOLERANCE / 10
    assert gpu_check.relative_gap(bf16, fp32) > gpu_check.LOGIT_TOLERANCE


def test_scorecards_are_compared_by_their_words_and_intervals(gpu_check, tmp_path):
    head = "claim,experiment,check,value,ci_low,ci_high,p,n,threshold,result,detail\n"
    rows = {"cpu": ["1 sparsity,E1,falls with k,0.2,0.1,0.3,,8,t,SUPPORTED,d",
                    "2 coupling,E2,ppc gap,0.5,0.4,0.6,,8,t,SUPPORTED,d",
                    "2 coupling,E2,fit,0.9,,,,8,t,descriptive,d"],
            "cuda": ["1 sparsity,E1,falls with k,0.25,0.15,0.35,,8,t,SUPPORTED,d",
                     "2 coupling,E2,ppc gap,0.1,0.0,0.2,,8,t,INCONCLUSIVE,d",
                     "2 coupling,E2,fit,0.8,,,,8,t,descriptive,d"]}
    for device, lines in rows.items():
        (tmp_path / f"{device}.csv").write_text(head + "\n".join(lines) + "\n")
    cards = {d: gpu_check.read_claims(tmp_path / f"{d}.csv") for d in rows}
    text = "\n".join(gpu_check.compare_claims(cards["cuda"], cards["cpu"]))
    assert "2 of 3 checks give the same word" in text
    assert "2 coupling / ppc gap: CUDA INCONCLUSIVE, CPU SUPPORTED" in text
    assert "1 of 2 overlap" in text and "CUDA [0, 0.2], CPU [0.4, 0.6]" in text
    assert "falls with k: CUDA" not in text  # the same word and overlapping intervals: not listed


@pytest.mark.slow
def test_the_workflow_parts_plan_the_grid_they_time(gpu_check, tmp_path, monkeypatch):
    """The smoke part's scratch copy and Snakemake call, as a dry run; without the offline corpus
    the grid leaves E4 out rather than fail on a node without network."""
    monkeypatch.setattr(gpu_check, "CORPUS", tmp_path / "absent.tar.gz")
    monkeypatch.setattr(gpu_check.sys, "executable", str(VENV_BIN / "python"))
    work = gpu_check.copy_workflow(tmp_path / "not/there/smoke")
    assert (work / "Snakefile").exists() and not list(work.glob("results*"))
    configs = ["config/smoke.yaml", *gpu_check.without_corpus(work)]
    assert yaml.safe_load((work / configs[-1]).read_text()) == {"language": None}
    seconds, out = gpu_check.finish(gpu_check.start_snakemake(work, 1, configs, "cpu", "results-x", extra=["-n"]))
    assert "rule length_sweep" in out and "train_lm" not in out
