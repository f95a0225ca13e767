// RUN: m100-opt %s -p check-supported | filecheck %s
// RUN: not m100-opt %S/Inputs/unsupported_cbrt.mlir -p check-supported 2>&1 | filecheck %s --check-prefix=SIN
// RUN: not m100-opt %S/Inputs/unsupported_cbrt.mlir -p m100-graph 2>&1 | filecheck %s --check-prefix=SIN
// RUN: not m100-opt %S/Inputs/unsupported_dynamic.mlir -p classify-ops 2>&1 | filecheck %s --check-prefix=DYN
// RUN: not m100-opt %S/Inputs/unsupported_memref.mlir -p check-supported 2>&1 | filecheck %s --check-prefix=MEM

// A supported graph passes unchanged.
func.func @ok(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>) -> tensor<2x3xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x3xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x3xf32>) -> tensor<2x3xf32>
  %y = linalg.matmul ins(%x, %w : tensor<2x4xf32>, tensor<4x3xf32>) outs(%z : tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
// CHECK-LABEL: func.func @ok
// CHECK:       linalg.matmul ins(%x, %w

// One line naming the first offending op, where it is, why, and how many more there are.
// SIN:         m100-opt: error: unsupported op 'linalg.generic' (%y) in @cbrt, op #1: its body uses 'math.cbrt', which no CVU/TCU operation computes (and 1 more unsupported op)
// SIN-NOT:     Traceback
// DYN:         m100-opt: error: unsupported op 'linalg.matmul' (%y) in @dyn, op #0: dynamic shapes are not supported
// MEM:         m100-opt: error: unsupported op 'memref.alloc' (%m) in @alloc, op #0: no M100 unit runs this op
