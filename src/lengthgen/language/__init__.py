"""E4, natural language: corpus adapters, tokenizers and token streams, language models,
influential-token scoring and its tables and figures."""
