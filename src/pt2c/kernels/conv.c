/* pt2c kernel library: NCHW float32 2-D convolution.
 *
 * pt2c_conv2d lowers each (image, group) to one GEMM
 *     out_g[OCg, OH*OW] = W_g[OCg, Cg*KH*KW] x col[Cg*KH*KW, OH*OW]
 * with W_g pre-packed as the GEMM's A operand (layout.py: pack_conv_weight).
 * 1x1 / stride 1 / no padding reads the input directly as B.  Otherwise the
 * columns are gathered (im2col) one packed-B micro-panel (KC x NR) at a time,
 * right before the micro-kernels use it, so they never leave L1 and the
 * scratch is one micro-panel per thread; each thread multiplies its own chunks
 * of the output pixels.
 *
 * pt2c_conv2d_depthwise is direct: one plane per task over the input itself for
 * stride-1 "same" convs on large planes, else 8 channels at a time over
 * interleaved, zero-padded bands of input rows (see there).
 *
 * Epilogue: ep->bias is per output channel, ep->residual is a tensor of the
 * output's NCHW shape (ep->ldr is ignored), then ep->act.
 *
 * Files, by algorithm (included here in this order; the compiler picks the kernel of each layer
 * from its shape, at compile time):
 *   conv_gemm.c       pt2c_conv2d: 1x1 read in place, strided 1x1 subsampled, else im2col made
 *                     panel by panel inside gemm_bfn.c's GEMM (padded convs from a zero-bordered
 *                     copy); pt2c_conv2d_smallp: few output pixels, the product transposed
 *   conv_winograd.c   pt2c_conv2d_wino: Winograd F(4x4, 3x3)
 *   conv_depthwise.c  pt2c_conv2d_depthwise: direct depthwise kernels
 *   conv_pwdw.c       pt2c_conv2d_pw_dw: a 1x1 expansion and the depthwise conv that reads it
 *   conv_naive.c      plain references of the above (tests only: no kernel includes it)
 */
#ifndef PT2C_CONV_C
#define PT2C_CONV_C

#include "common.h"
#include "gemm.c"
#include "conv_gemm.c"
#include "conv_winograd.c"
#include "conv_depthwise.c"
#include "conv_pwdw.c"

#endif /* PT2C_CONV_C */
