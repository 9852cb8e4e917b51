"""Configuration: JSON-Schema validation with defaults, cross-key checks, and the
per-stage slices that rules pass as params (so a change reruns only what it touches)."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from lengthgen import tasks
from lengthgen.support import identity
from lengthgen.support.errors import UserError
from lengthgen.support.schema import check as _check
from lengthgen.support.schema import fill_defaults


def validate(config: dict, schema: dict) -> dict:
    """Return a validated copy of `config` with defaults filled; UserError names the key."""
    # Keys starting with "_" only hold YAML anchors (see config.yaml).
    config = copy.deepcopy({k: v for k, v in config.items() if not str(k).startswith("_")})
    if isinstance(config.get("language"), dict) and "seed" in config["language"]:
        raise UserError("config.language.seed: now language.seeds, a list of model seeds (one pair of language "
                        "models each)")
    fill_defaults(config, schema, schema)
    _check(config, schema, schema)
    if config["test_sets"] == "shared" and config["train_sets"] == "per_seed":
        raise UserError("config.test_sets: shared needs train_sets: shared (the shared test draw is kept disjoint "
                        "from one training set)")
    defs = schema["$defs"]
    names = set()
    for i, task in enumerate(config["tasks"]):
        where = f"config.tasks[{i}]"
        if task["name"] in names:
            raise UserError(f"{where}.name: duplicate task name {task['name']!r}")
        names.add(task["name"])
        task["seeds"] = [s + config["seed_offset"] for s in task.get("seeds", config["seeds"])]
        module = tasks.get(task["kind"], where=f"{where}.kind")
        params_schema = defs[f"{task['kind']}_params"]
        fill_defaults(task["params"], params_schema, schema)
        _check(task["params"], params_schema, schema, prefix=("tasks", i, "params"))
        for key, base in (("model", "model"), ("train", "train")):
            merged = _deep_merge(config[base], task[key])
            _check(merged, defs[base], schema, prefix=("tasks", i, key))
            task[key] = merged
        _check_model_shape(task["model"], f"{where}.model")
        task["scheme_options"] = _task_schemes(config, task, module, where, schema)
        module.check(task["params"], task["eval"], where)
        _check_max_position(task, module, where)
    if config["language"] is not None:
        _check_language(config)
        config["language"]["seeds"] = [s + config["seed_offset"] for s in config["language"]["seeds"]]
    return config


def _check_max_position(task: dict, module, where: str) -> None:
    """Training IDs stay below `max_position` (gaps spread them up to it), so every training
    sequence must fit. Test sequences may run past it, which is how a test reaches IDs no
    training example had, except for a scheme that looks IDs up in a table of that size."""
    opts = task["scheme_options"]
    tabled = [s for s, o in opts.items() if o["encoding"] == "ape" or o["position_head"] == "classifier"]
    n = max(*task["eval"]["lengths"], task["params"]["n_max"]) if tabled else task["params"]["n_max"]
    longest = module.seq_len(task["params"], n)
    if longest > task["model"]["max_position"]:
        needs = f", which {', '.join(map(repr, tabled))} looks up in a table of that size" if tabled else ""
        raise UserError(
            f"{where}.model.max_position: {task['model']['max_position']} is below the longest "
            f"sequence (n = {n}: {longest} tokens){needs}"
        )


def _check_language(config: dict) -> None:
    """Cross-key checks of E4 that the schema cannot express."""
    lang = config["language"]
    if lang["T_short"] >= lang["T_long"]:
        raise UserError(f"config.language.T_short: {lang['T_short']} must be below T_long ({lang['T_long']})")
    distant = lang["T_long"] - lang["T_short"]
    if max(lang["influence"]["k"]) > distant:
        raise UserError(f"config.language.influence.k: {max(lang['influence']['k'])} exceeds the distant window "
                        f"T_long - T_short = {distant} tokens")
    if "long" not in lang["models"]:
        raise UserError("config.language.models: must include long (every score needs it)")
    if "greedy" not in lang["influence"]["methods"]:
        raise UserError("config.language.influence.methods: must include greedy (the claim-3 checks and the "
                        "short models read its tokens)")
    if config["claims"]["language"]["greedy_k"] not in lang["influence"]["k"]:
        raise UserError(f"config.claims.language.greedy_k: {config['claims']['language']['greedy_k']} is not "
                        f"in language.influence.k {lang['influence']['k']}")
    if lang["corpus"]["source"] == "files" and not lang["corpus"]["path"]:
        raise UserError("config.language.corpus.path: source files needs a glob of the corpus files")
    if lang["model"]["max_position"] < lang["T_long"]:
        raise UserError(f"config.language.model.max_position: {lang['model']['max_position']} is below T_long")
    _check_model_shape(lang["model"], "config.language.model")


def _task_schemes(config: dict, task: dict, module, where: str, schema: dict) -> dict:
    """The options of each scheme the task runs: the named scheme with the task's overrides."""
    known = ", ".join(sorted(config["schemes"]))
    for key, names in (("schemes", task["schemes"]), ("scheme_options", task["scheme_options"])):
        for s in names:
            if s not in config["schemes"]:
                raise UserError(f"{where}.{key}: unknown scheme {s!r}; expected one of: {known}")
    for s in task["scheme_options"]:
        if s not in task["schemes"]:  # options that would apply to nothing: a typo or a stale entry
            raise UserError(f"{where}.scheme_options.{s}: the task does not run {s!r} (its schemes: "
                            f"{', '.join(task['schemes'])})")
    out = {}
    for s in task["schemes"]:
        opts = _deep_merge(config["schemes"][s], task["scheme_options"].get(s, {}))
        fill_defaults(opts, schema["$defs"]["scheme"], schema)
        prefix = (*where.removeprefix("config.").split("."), "scheme_options", s)
        _check(opts, schema["$defs"]["scheme"], schema, prefix=prefix)
        _check_scheme(opts, task["kind"], module, f"config.schemes.{s}", where)
        out[s] = opts
    return out


def _check_scheme(opts: dict, kind: str, module, where: str, task_where: str) -> None:
    """A scheme that reads or predicts coupled IDs only runs on a task that has them."""
    if opts["position_head"] == "classifier" and opts["positions"] != "coupled":
        raise UserError(f"{where}.position_head: a classifier over IDs needs positions: coupled")
    # a position head learns from the coupled IDs (its targets), even on index positions
    if (opts["positions"] == "coupled" or opts["position_head"] != "none") and not module.COUPLED:
        raise UserError(f"{task_where}.schemes: scheme {where.rsplit('.', 1)[1]!r} needs coupled position IDs, "
                        f"which task kind {kind!r} does not have")
    if opts["copy"] and opts["position_head"] != "pointer":
        raise UserError(f"{where}.copy: copying needs position_head: pointer")


def _check_model_shape(model: dict, where: str) -> None:
    if model["d_model"] % model["n_head"]:
        raise UserError(f"{where}.n_head: d_model {model['d_model']} is not divisible by n_head {model['n_head']}")
    if (model["d_model"] // model["n_head"]) % 2:
        raise UserError(f"{where}.n_head: head size d_model/n_head must be even (rotary pairs channels)")


def _deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# libyaml's loader (C) when PyYAML was built with it, not the pure-Python one: the schema is
# loaded on every Snakemake start (dry runs and no-ops included).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path) -> dict:
    """A YAML mapping; UserError names the file, and for bad bytes or a syntax error its line (and
    column). A file with no keys (empty, or only comments) is refused: Snakemake refuses it too,
    naming no file."""
    try:
        loaded = yaml.load(_text(path), Loader=_LOADER)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{path}{where}: not valid YAML ({problem})") from None
    if loaded is None:
        raise UserError(f"{path}: empty, expected a mapping of config keys")
    if not isinstance(loaded, dict):
        raise UserError(f"{path}: expected a mapping of config keys, found a YAML {type(loaded).__name__}")
    return loaded


def _text(path) -> str:
    """The file at `path` as UTF-8 text (what YAML files are); UserError naming the file, and the line
    of a byte that is not UTF-8."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: a directory, not a YAML file") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte {raw[err.start]:#04x}); save the file as UTF-8") from None


def load_run_config(basedir, given: dict, configfiles, schema: dict, overrides=()) -> dict:
    """The validated configuration of a run: `config.yaml` beside the Snakefile (so
    `-s path/to/Snakefile` from anywhere reads it), under what Snakemake already merged from
    --configfile and --config (`given`; `overrides` holds the --config keys). An invalid value
    names the file, or the option, that set it."""
    files = [Path(basedir) / "config.yaml", *map(Path, configfiles)]
    loaded = [load_yaml(path) for path in files]  # each named if it is not a mapping of keys
    try:
        return validate(_deep_merge(loaded[0], given), schema)
    except UserError as err:
        key = str(err).removeprefix("config.").split(":")[0].split(".")[0].split("[")[0]
        setters = [f"in {path}" for path, keys in zip(files, loaded, strict=True) if key in keys]
        setters += ["by --config"] if key in overrides else []
        raise UserError(f"{err} (set {setters[-1]})" if setters else str(err)) from None


# Settings that change no output: a file that sets only these may share the default's results.
NO_OUTPUT_KEYS = ("warm_start", "gpu_jobs")


def variant_results_dir(basedir, config: dict, configfiles, schema: dict, overrides=()) -> tuple[dict, str | None]:
    """The run's config, and a line for the user when it moved. A --configfile that changes what
    the default configuration computes but sets no results_dir (nor does --config) would write
    the default's results/, whose tables are committed: it writes results-<its file's stem>/
    instead (the last file's, as for its other keys). Any other run keeps its config."""
    files = [Path(f) for f in configfiles]
    if not files or "results_dir" in overrides or any("results_dir" in load_yaml(f) for f in files):
        return config, None
    default = validate(load_yaml(Path(basedir) / "config.yaml"), schema)
    if {k: v for k, v in config.items() if k not in NO_OUTPUT_KEYS} == {
            k: v for k, v in default.items() if k not in NO_OUTPUT_KEYS}:
        return config, None
    own = f"results-{files[-1].stem}"
    shown = [f.relative_to(Path.cwd()) if f.is_relative_to(Path.cwd()) else f for f in files]
    return {**config, "results_dir": own}, (
        f"lengthgen: note: {', '.join(map(str, shown))} sets no results_dir: this run writes {own}/, not the "
        f"default configuration's {config['results_dir']}/ (set results_dir to choose another)")


def check_files(paths: list[str]) -> None:
    """`make run CONFIG=...` checks its file before Snakemake parses it: Snakemake's own message
    for a broken --configfile names neither the file nor the line."""
    for path in paths:
        load_yaml(path)


# Rules whose jobs run torch on config["device"]; with `stack` > 1 training is train_seeds_<block>.
DEVICE_RULES = ("train", "length_sweep", "attention", "train_lm", "score_influence", "language_attention")


def check_machine(config: dict, rules) -> None:
    """Settings that need this machine, for a run whose jobs of `rules` (names) run here. Called
    when the run starts (the workflow's onstart: after the DAG is built, before any job runs or
    any output is deleted), not by `validate`: a dry run may plan for another machine
    (config/paper.yaml's `device: cuda` on a login node without GPUs)."""
    stacked = ("train_seeds_", "length_sweep_seeds_", "attention_seeds_")  # one rule per block of seeds
    uses_device = any(r in DEVICE_RULES or r.startswith(stacked) for r in rules)
    if config["device"] == "cuda" and uses_device:
        # torch itself, not a look for the driver's files: those differ by platform (WSL has none)
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"config.device: cuda, but torch {torch.__version__} sees no CUDA device on this "
                            "machine; use device: auto or cpu here, or run where CUDA is")
    corpus = (config.get("language") or {}).get("corpus") or {}
    if "corpus" in rules and corpus.get("source") in ("files", "openwebtext") and corpus.get("path"):
        _check_corpus_path(corpus)


def _check_corpus_path(corpus: dict) -> None:
    import glob

    path = corpus["path"]
    found = glob.glob(path) if corpus["source"] == "files" else ([path] if Path(path).is_dir() else [])
    if not found:
        what = "no files match" if corpus["source"] == "files" else "no directory"
        raise UserError(f"config.language.corpus.path: {what} {path!r} on this machine")


def uses_gpu(config: dict) -> bool:
    """Whether jobs will run on CUDA. For `auto` this looks for the NVIDIA driver's device
    file rather than importing torch while Snakemake builds the DAG."""
    return config["device"] == "cuda" or (config["device"] == "auto" and Path("/dev/nvidiactl").exists())


# -- slices: what each stage's params carry ------------------------------------------------


def task_by_name(config: dict, name: str) -> dict:
    return next(t for t in config["tasks"] if t["name"] == name)


def train_cost(config: dict, task_name: str) -> int:
    """A training cell's cost, up to a factor: its step budget times its longest training
    sequence. Only the order matters (job priorities): E2's long sequences before E1's short ones."""
    task = task_by_name(config, task_name)
    module = tasks.get(task["kind"])
    return task["train"]["max_steps"] * module.seq_len(task["params"], task["params"]["n_max"])


def stack_size(config: dict, task: dict) -> int:
    """Seeds per training job of `task`: `stack`, or for `auto` all of its seeds when jobs run on
    CUDA (one small model leaves a GPU idle) and 1 on CPU (where stacking gains little)."""
    if config["stack"] == "auto":
        return len(task["seeds"]) if uses_gpu(config) else 1
    return config["stack"]


def seed_blocks(seeds: list[int], size: int) -> list[list[int]]:
    """The jobs of `stack`: seeds in fixed blocks of `size`, in sorted order, so that adding
    larger seeds adds blocks and leaves the full blocks before them as they were. Here, not in
    lengthgen.training.stacked: the workflow plans with it, and importing torch would slow every
    Snakemake start (dry runs and no-ops included)."""
    ordered = sorted(seeds)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def stack_blocks(config: dict) -> dict[tuple[int, ...], list[str]]:
    """{seeds of a block: the tasks whose seeds form it} when training is stacked (a task's
    stack_size above 1); empty when every task trains one model per job. The workflow then plans
    one training, sweep and attention job per block and task."""
    sizes = {t["name"]: stack_size(config, t) for t in config["tasks"]}
    blocks = {}
    if set(sizes.values()) != {1}:
        for task in config["tasks"]:
            for block in seed_blocks(task["seeds"], sizes[task["name"]]):
                blocks.setdefault(tuple(block), []).append(task["name"])
    return blocks


def train_split(config: dict, seed: int) -> str:
    """The training split a model of this seed trains on: its own draw (train-seed<seed>), so
    that a model seed and its data are one unit of replication, or the draw all share (train)."""
    return f"train-seed{seed}" if config["train_sets"] == "per_seed" else "train"


def split_seed(split: str, prefix: str) -> int | None:
    """The model seed of a per-seed split (train-seed3 -> 3), None for a shared one."""
    return int(split.removeprefix(prefix)) if split.startswith(prefix) else None


def test_split(config: dict, seed: int) -> str:
    """The test split a model of this seed is scored on: its own draw (test-seed<seed>), so that
    one draw's luck does not move every model together, or the draw all models share (test)."""
    return f"test-seed{seed}" if config["test_sets"] == "per_seed" else "test"


def data_slice(config: dict, task_name: str, split: str) -> dict:
    """What a dataset depends on: the task's parameters and the split's seed and size.

    `split` is train (the shared draw, data_seed), train-seed<s> (model seed s's own draw,
    seeded by [data_seed, s]), test (the shared draw, eval_seed) or test-seed<s> (model seed s's
    own, eval_seed + s). The file's metadata says split train or test either way."""
    task = task_by_name(config, task_name)
    out = {"name": task["name"], "kind": task["kind"], "params": task["params"], "split": split}
    if split.startswith("train"):
        own = split_seed(split, "train-seed")
        seed = config["data_seed"] if own is None else [config["data_seed"], own]
        out.update(split="train", seed=seed, train_examples=task["train_examples"])
    else:
        draw = split_seed(split, "test-seed") or 0
        out.update(split="test", seed=config["eval_seed"] + draw, eval=task["eval"])
    return out


def training_set_of(config: dict, split: str) -> str:
    """The training split a test split is drawn disjoint from: a seed's own test draw from that
    seed's training set, the shared test draw from the shared training set."""
    own = split_seed(split, "test-seed")
    return "train" if own is None else train_split(config, own)


def cell_slice(config: dict, task_name: str, scheme: str, seed: int) -> dict:
    """What a trained model depends on (and nothing it does not, e.g. test lengths)."""
    task = task_by_name(config, task_name)
    return {
        "task": task["name"],
        "scheme": scheme,
        "seed": seed,
        "scheme_options": task["scheme_options"][scheme],
        "model": task["model"],
        "train": task["train"],
        "device": config["device"],
        "gpu": uses_gpu(config),  # what `auto` will resolve to: numerics differ on CUDA (bf16)
        "threads": config["threads"],
    }


def cell_token(config: dict, task_name: str, scheme: str, seed: int) -> str:
    """The identity a cell's checkpoint and sweep must record (lengthgen.support.identity)."""
    return identity.of_cell(cell_slice(config, task_name, scheme, seed))


def lm_slice(config: dict, name: str, seed: int) -> dict:
    """What one language model depends on: its context and seed (one of language.seeds, the
    offset applied), the shared model and training keys."""
    lang = config["language"]
    context = lang["T_long"] if name == "long" else lang["T_short"]
    train = {**lang["train"], "batch_size": max(1, lang["train"]["batch_tokens"] // context)}
    return {
        "name": name,
        "context": context,
        "pose_target": lang["T_long"] if name == "pose" else None,
        "model": lang["model"],
        "train": train,
        "seed": seed,
        "device": config["device"],
        "gpu": uses_gpu(config),
        "threads": config["threads"],
    }


def lm_token(config: dict, name: str, seed: int) -> str:
    """The identity a language model's checkpoint must record (lengthgen.support.identity)."""
    return identity.of_lm(lm_slice(config, name, seed))


def influence_slice(config: dict, seed: int) -> dict:
    """What the scoring of one pair of language models (model seed `seed`) depends on."""
    lang = config["language"]
    return {k: lang[k] for k in ("T_long", "T_short", "influence", "models")} | {
        "seed": seed, "device": config["device"], "threads": config["threads"]}


def eval_slice(config: dict) -> dict:
    return {"device": config["device"], "threads": config["threads"], **config["eval"]}
