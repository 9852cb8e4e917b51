"""lengthgen: a Snakemake pipeline reproducing *The Role of Sparsity for Length
Generalization in Transformers* (Golowich et al., ICML 2025)."""

__version__ = "0.1.0"
