// The project's element type and the operations a kernel can apply, shared by the kernels and the host code.
#pragma once

typedef float real;

enum Op { OP_SCALE = 0, OP_SHIFT = 1 };
