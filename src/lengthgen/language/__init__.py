"""E4, natural language: corpus adapters, tokenizers and token streams, language models and
influential-token scoring. The scores' tables are analysis/language_scores.py and
analysis/language_summary.py, their figures reporting/language.py."""
