"""The compiler: nvcc and the CUDA binary tools, run as guarded subprocesses; needs no GPU.

``build`` compiles a translation unit to a cubin (cached, parallel-safe), ``toolchain`` finds and guards the
tools (nvcc, cuobjdump, nvdisasm, ncu, compute-sanitizer), ``sandbox`` starts every one of them (stdin closed,
memory and file-size caps, the process group killed at the time limit), ``includes`` checks what a unit's
``#include``s reach before nvcc runs, ``mangle`` reads C++ symbol names. It sits below
``gpu`` (which runs what it builds) and ``profile``/``policy`` (which compile to read resources and SASS), so
none of them has to reach into the device package to compile; see docs/architecture.md.
"""
