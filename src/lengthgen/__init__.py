"""lengthgen: a Snakemake pipeline reproducing *The Role of Sparsity for Length
Generalization in Transformers* (Golowich et al., ICML 2025).

For notebooks::

    import lengthgen
    sweep = lengthgen.load_sweep("results")       # the long-format length sweep
    model = lengthgen.load_model("results/runs/sparse_parity_k1/rope/seed0/model.pt")
"""

__version__ = "0.1.0"

NOTEBOOK = ("load_model", "load_sweep")  # lengthgen.notebook


def __getattr__(name):
    # Loaded on first use and by name: every stage imports this package, and must neither pay
    # for pandas and torch here nor have its code digest (lengthgen.support.digest follows import
    # statements) include the notebook helpers.
    if name in NOTEBOOK:
        import importlib

        return getattr(importlib.import_module("lengthgen.notebook"), name)
    raise AttributeError(f"module 'lengthgen' has no attribute {name!r}")


def __dir__():
    return [*globals(), *NOTEBOOK]
