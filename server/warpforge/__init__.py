"""WarpForge: makes the CUDA kernel under your cursor faster, and proves it.

The package never imports pycuda at import time: GPU work happens in worker processes only, so the
language server and the CLI run on machines with no GPU and no CUDA driver.
"""

__version__ = "0.1.0"
