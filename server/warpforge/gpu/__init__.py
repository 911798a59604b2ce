"""GPU side of the pipeline: build (nvcc), and evaluation in isolated worker processes.

Nothing imported from here at package level touches CUDA; pycuda is imported only inside workers.
"""
