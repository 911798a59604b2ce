"""The wide yardstick: WarpForge's funnel measured on CUDA kernels written by other people (issue 27).

Tooling only. The code it measures lives outside the repository (``/work/outside/wide`` by default) and is
never committed; see ``benchmarks/wide/README.md``.
"""
