"""Search: search trees, beam search and MCTS, budgets, search memory, and the protocols it searches over.

Search proposes nothing itself: policies (``warpforge.policy``) implement the ``Policy`` protocol defined here,
and the evaluator (``warpforge.gpu.evaluator``) verifies and times what they propose. The unit they exchange,
``Candidate``, lives at the bottom with the source model (``warpforge.cuda.candidate``).
"""
