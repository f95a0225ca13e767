// RUN: m100-opt %s -p fold-constants,dce | filecheck %s
// RUN: m100-opt %s -p 'fold-constants{max-growth=100.0}',dce | filecheck %s --check-prefix=GROW

// A weight transpose, a weight copy to a batch of one, and BatchNorm's rsqrt(var + eps) are
// computed at compile time; a bias broadcast that would grow the constant data is kept.
func.func @weights(%x: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<1x2x3xf32>, tensor<2xf32>, tensor<4x2xf32>) {
  %w = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %var = arith.constant dense<[3.0, 0.0]> : tensor<2xf32>
  %b = arith.constant dense<[7.0, 8.0]> : tensor<2xf32>
  %eps = arith.constant 1.0 : f32
  %e0 = tensor.empty() : tensor<3x2xf32>
  %t = linalg.transpose ins(%w : tensor<2x3xf32>) outs(%e0 : tensor<3x2xf32>) permutation = [1, 0]
  %e1 = tensor.empty() : tensor<1x2x3xf32>
  %c = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%w : tensor<2x3xf32>) outs(%e1 : tensor<1x2x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x3xf32>
  %e2 = tensor.empty() : tensor<2xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%var : tensor<2xf32>) outs(%e2 : tensor<2xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %eps : f32
    %q = math.rsqrt %s : f32
    linalg.yield %q : f32
  } -> tensor<2xf32>
  %e3 = tensor.empty() : tensor<4x2xf32>
  %bb = linalg.broadcast ins(%b : tensor<2xf32>) outs(%e3 : tensor<4x2xf32>) dimensions = [0]
  func.return %t, %c, %r, %bb : tensor<3x2xf32>, tensor<1x2x3xf32>, tensor<2xf32>, tensor<4x2xf32>
}

// CHECK-LABEL: func.func @weights
// CHECK-DAG:   %[[T:.*]] = arith.constant dense<{{\[}}[1.000000e+00, 4.000000e+00], [2.000000e+00, 5.000000e+00], [3.000000e+00, 6.000000e+00]]> : tensor<3x2xf32>
// CHECK-DAG:   %[[C:.*]] = arith.constant dense<{{\[\[}}[1.000000e+00, 2.000000e+00, 3.000000e+00], [4.000000e+00, 5.000000e+00, 6.000000e+00]]]> : tensor<1x2x3xf32>
// CHECK-DAG:   %[[R:.*]] = arith.constant dense<[5.000000e-01, 1.000000e+00]> : tensor<2xf32>
// CHECK-NOT:   linalg.transpose
// CHECK-NOT:   linalg.generic
// CHECK:       %[[BB:.*]] = linalg.broadcast
// CHECK:       func.return %[[T]], %[[C]], %[[R]], %[[BB]]

// GROW-NOT:    linalg.broadcast
// GROW:        arith.constant dense<{{\[}}[7.000000e+00, 8.000000e+00], [7.000000e+00, 8.000000e+00], [7.000000e+00, 8.000000e+00], [7.000000e+00, 8.000000e+00]]> : tensor<4x2xf32>

// Scalar arith on constants at graph level (torch-mlir leaves an f64 -> f32 truncf for MaxPool
// padding; -DBL_MAX rounds to -inf as truncf does).
func.func @scalars() -> (f32, f32) {
  %big = arith.constant -1.7976931348623157E+308 : f64
  %t = arith.truncf %big : f64 to f32
  %i = arith.constant 3 : i64
  %f = arith.sitofp %i : i64 to f32
  func.return %t, %f : f32, f32
}
// CHECK-LABEL: func.func @scalars
// CHECK-DAG:   %[[T:.*]] = arith.constant 0xff800000 : f32
// CHECK-DAG:   %[[F:.*]] = arith.constant 3.000000e+00 : f32
// CHECK:       func.return %[[T]], %[[F]]
