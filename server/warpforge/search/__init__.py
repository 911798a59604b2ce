"""Search over verified variants: candidates, the tree, beam search, MCTS, budgets, search memory."""
