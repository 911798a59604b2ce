#pragma once
typedef float real;
static inline int cdiv(int a, int b) { return (a + b - 1) / b; }
