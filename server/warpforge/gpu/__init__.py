"""The device side of the pipeline: evaluation of built candidates in isolated worker processes.

Everything here touches (or supervises what touches) a GPU; compiling, which needs none, is ``compiler``.
Nothing imported from here at package level touches CUDA; pycuda is imported only inside workers.
"""
