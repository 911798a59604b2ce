"""Search: candidates (kernel variants), search trees, beam search and MCTS, budgets, search memory.

A ``Candidate`` is the unit every other part exchanges: policies propose them, the evaluator
(``warpforge.gpu.evaluator``) verifies and times them, the store caches their evaluations by content hash.
"""
