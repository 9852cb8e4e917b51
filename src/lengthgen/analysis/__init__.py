"""Tables and verdicts from the stages' outputs: aggregation, statistics, claims. No torch."""
