/* Portable instance of the gated delta rule kernels: "vectors" of one float,
 * so every head size is covered; the fallback of every other width and the
 * whole path at SPINDLE_SIMD=scalar. */
#include <stdbool.h>
#include <stdint.h>

#define VW 1
#define VF float
#define K(name) name##_portable
#define K_NAME "portable"
#define VZERO() 0.0f
#define VSET1(v) (v)
#define VLOADU(p) (*(p))
#define VSTOREU(p, v) (*(p) = (v))
#define VADD(a, b) ((a) + (b))
#define VMUL(a, b) ((a) * (b))
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VHSUM(v) (v)

#include "compute/linear_attention/delta_net_simd.inc"
