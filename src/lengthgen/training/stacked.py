"""Stacked training: the seeds of one (task, scheme) cell trained as one batched model.

The models' parameters are stacked along a leading model axis (`model.stack`), on which
`model/transformer.py`'s own forward applies each matrix to every model with one batched matmul; one backward
pass and one fused AdamW call update every model. What that saves is a step's fixed costs, so
it pays where one small model leaves the device idle (a GPU); see docs/performance.md.

Each model stays the model `train.train` would train alone, up to the stacked forward's
floating-point order: it is built from its own seed, reads its own batches (`training_batch`
with its seed), packs them on its own, is scored by the same loss (training/step.py, whose step
a cell takes as a stack of one), and stops on its own; a stopped model leaves the stack, so its
parameters and optimizer state freeze. Every model's checkpoint, log and meta.json are written where, and as, the
one-model path writes them.
"""

from __future__ import annotations

from pathlib import Path

import torch

from lengthgen import tasks
from lengthgen.model.transformer import param_count, set_parameters, stack
from lengthgen.support import device as devices
from lengthgen.support.errors import UserError
from lengthgen.training import loop, train
from lengthgen.training.optim import adamw, lr_at, sliced_state
from lengthgen.training.step import cell_step
from lengthgen.training.train import build_model, cell_id, cell_outputs, load_training_data, training_batch


def train_block(cells: list[dict], data_paths: list, out_dirs: list, checkpoint_path, code_digest: str = "",
                log=print) -> None:
    """The `train-stack` stage: the block's seeds stacked, or one model at a time (each with a
    checkpoint of its own beside the block's) when the cells cannot be stacked. `data_paths`:
    each seed's own training set, in the cells' order, or one that every seed shares."""
    paths = per_cell_paths(cells, data_paths)
    why = unstackable(cells[0])
    if why is None:
        train_stacked(cells, paths, out_dirs, checkpoint_path, code_digest=code_digest, log=log)
        return
    log(f"training one model at a time: {why}")
    checkpoint = Path(checkpoint_path)
    for cell, path, out_dir in zip(cells, paths, out_dirs, strict=True):
        train.train(cell, path, out_dir, checkpoint.with_name(f"seed{cell['seed']}.pt"),
                    code_digest=code_digest, log=log)


def per_cell_paths(cells: list[dict], data_paths) -> list:
    """One training set per cell: the given one per cell, or the one given for all."""
    paths = [data_paths] if isinstance(data_paths, (str, Path)) else list(data_paths)
    if len(paths) == 1:
        return paths * len(cells)
    if len(paths) != len(cells):
        raise UserError(f"--data: {len(paths)} training sets for {len(cells)} cells (give one, or one per cell)")
    return paths


def unstackable(cell: dict) -> str | None:
    """Why this cell's models cannot be trained stacked (None when they can)."""
    if cell["model"].get("dropout", 0.0) > 0:
        return "dropout draws one random mask for the whole stack, not each model's own"
    return None


def _same_but_seed(cells: list[dict]) -> None:
    strip = [{k: v for k, v in c.items() if k != "seed"} for c in cells]
    if any(s != strip[0] for s in strip[1:]):
        raise UserError("--cells: expected the seeds of one (task, scheme); these cells differ in more than the seed")
    if len({c["seed"] for c in cells}) != len(cells):
        raise UserError("--cells: a seed appears twice")


class Stack:
    """The active models as one stacked Transformer (`model.stack`), its parameters and their optimizer."""

    def __init__(self, models: list, weight_decay: float):
        self.model = stack(models)
        self.names = [n for n, _ in self.model.named_parameters()]
        self.params = list(self.model.parameters())
        self.weight_decay = weight_decay
        self.opt = adamw(self.params, {"lr": 0.0, "weight_decay": weight_decay})

    def keep(self, rows: list[int]) -> None:
        """Drop every model not in `rows` (positions in the stack): their state freezes."""
        index = torch.tensor(rows, device=self.params[0].device)
        state = self.opt.state_dict()
        set_parameters(self.model, {n: p.detach()[index].clone() for n, p in zip(self.names, self.params, strict=True)})
        self.params = list(self.model.parameters())
        self.opt = adamw(self.params, {"lr": 0.0, "weight_decay": self.weight_decay})
        self.opt.load_state_dict(sliced_state(state, index))

    def state_of(self, row: int) -> dict:
        """One model's state dict (parameters and buffers) at its position in the stack."""
        return {**{n: p.detach()[row].clone() for n, p in zip(self.names, self.params, strict=True)},
                **{n: b.clone() for n, b in self.model.named_buffers()}}  # the same in every model


def train_stacked(cells: list[dict], data_paths, out_dirs: list, checkpoint_path, code_digest: str = "",
                  log=print) -> list[dict]:
    """Train the cells (seeds of one (task, scheme)) as one stack, each on its own training set
    (`data_paths`, or one shared); write each model's outputs into its own directory of
    `out_dirs`, as `train.train` does."""
    _same_but_seed(cells)
    if len(out_dirs) != len(cells):
        raise UserError(f"--out-dirs: {len(out_dirs)} directories for {len(cells)} cells")
    paths = per_cell_paths(cells, data_paths)
    first = cells[0]
    dev = devices.resolve(first["device"], first["threads"])
    loaded = {p: load_training_data(p, first) for p in dict.fromkeys(paths)}  # a shared set is read once
    data = [loaded[p][0] for p in paths]
    meta = loaded[paths[0]][1]
    gaps = tasks.get(meta["kind"]).gap_after(first["scheme_options"]["positions"] == "coupled")
    models = []
    for cell in cells:
        torch.manual_seed(cell["seed"])  # each model's own initialization, as trained alone
        models.append(build_model(cell, len(meta["vocab"])).to(dev))
    trainer = StackTrainer(cells, data, meta, gaps, models, dev, [Path(d) for d in out_dirs], code_digest, log)
    fingerprint = loop.fingerprint(cells, [loop.file_digest(p) for p in paths], code_digest)
    loop.run(trainer, Path(checkpoint_path), fingerprint, log)
    return trainer.summaries


class StackTrainer(loop.Trainer):
    """A block's part of the training loop: every active model steps at once; each keeps its own
    rows and early-stop streak, and leaves the stack when its streak stops it."""

    advice = "lower train.lr or check the data"

    def __init__(self, cells, data, meta, gaps, models, dev, out_dirs: list[Path], code_digest: str, log):
        self.cells, self.data, self.meta, self.gaps, self.models, self.dev = cells, data, meta, gaps, models, dev
        self.cfg, self.out_dirs, self.code_digest, self.log = cells[0]["train"], out_dirs, code_digest, log
        self.stack = Stack(models, self.cfg["weight_decay"])
        n = len(cells)
        self.active, self.streak, self.rows, self.done = list(range(n)), [0] * n, [[] for _ in cells], {}
        self.max_steps, self.checkpoint_every, self.log_every = (
            self.cfg["max_steps"], self.cfg["checkpoint_every"], self.cfg["log_every"])
        self.name = _block_id(cells)
        sizes = sorted({len(d["tokens"]) for d in data})
        self.about = (f"{n} models of {param_count(models[0]):,} parameters on {devices.describe(dev)}, "
                      f"{'-'.join(f'{x:,}' for x in sizes)} examples each")

    def step(self, step: int) -> dict[str, float]:
        batches = [training_batch(self.data[i], step, self.cells[i], self.gaps) for i in self.active]
        self.lr = lr_at(step, self.cfg)
        self.last = cell_step(self.stack.model, self.stack.opt, batches, self.lr, self.cfg["grad_clip"], self.dev,
                              self.cells[0]["scheme_options"])
        return {cell_id(self.cells[i]): loss for i, loss in zip(self.active, self.last[0], strict=True)}

    def record(self, step: int) -> None:
        for i, loss, acc in zip(self.active, *self.last, strict=True):
            self.streak[i] = loop.next_streak(self.streak[i], loss, acc, self.cfg["early_stop"])
            self.rows[i].append((step, loss, acc, self.lr))
        self.active = _drop_stopped(self.stack, self.cells, self.active, self.streak, self.done, step + 1, self.log)

    def converged(self) -> bool:
        return not self.active

    def status(self) -> str:
        return f"({len(self.active)} of {len(self.cells)} models training)"

    def checkpoint(self, steps: int) -> dict:
        return {"params": [p.detach() for p in self.stack.params], "optimizer": self.stack.opt.state_dict(),
                "step": steps, "active": self.active, "streak": self.streak, "rows": self.rows, "done": self.done}

    def restore(self, state: dict) -> None:
        self.active, self.streak, self.rows, self.done = _restore(self.stack, state)

    def outputs(self, stopped: str):
        """Each model's files, as a model trained alone writes them (`stopped`, the block's, is
        not each model's)."""
        for k, i in enumerate(self.active):
            self.done[i] = self.stack.state_of(k)
        self.summaries = []
        for i, (cell, model) in enumerate(zip(self.cells, self.models, strict=True)):
            model.load_state_dict({k: self.done[i][k] for k in model.state_dict()})
            own = "converged" if loop.patience_met(self.streak[i], self.cfg["early_stop"]) else "max_steps"
            summary, files = cell_outputs(model, cell, self.meta, self.rows[i], self.dev, self.code_digest, own)
            self.summaries.append(summary)
            yield self.out_dirs[i], files


def _block_id(cells: list[dict]) -> str:
    c = cells[0]
    return f"{c['task']}/{c['scheme']}/seeds{'-'.join(str(x['seed']) for x in cells)}"


def _drop_stopped(stack: Stack, cells, active: list[int], streak, done: dict, step: int, log) -> list[int]:
    """Take the models whose early stop has come out of the stack, keeping their final state in
    `done`; the models still training, in stack order."""
    stopped = [i for i in active if loop.patience_met(streak[i], cells[i]["train"]["early_stop"])]
    for i in stopped:
        done[i] = stack.state_of(active.index(i))
        log(f"{cell_id(cells[i])}: stopped at step {step} (converged)")
    still = [i for i in active if i not in stopped]
    if stopped and still:
        stack.keep([active.index(i) for i in still])
    return still


def _restore(stack: Stack, state: dict) -> tuple:
    """Load a stacked checkpoint into `stack`; its active models, streaks, rows and the final
    states of the models that had stopped."""
    stack.keep(state["active"])
    with torch.no_grad():
        for p, saved in zip(stack.params, state["params"], strict=True):
            p.copy_(saved)
    stack.opt.load_state_dict(state["optimizer"])
    return tuple(state[k] for k in ("active", "streak", "rows", "done"))
