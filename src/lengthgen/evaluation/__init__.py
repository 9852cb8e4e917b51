"""Reading trained cells: length sweeps by greedy decoding, and the attention analysis."""
