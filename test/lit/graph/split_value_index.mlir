// RUN: m100-opt %s -p split-value-index | filecheck %s

// torch-mlir's one generic for ReduceMax + ArgMax of one input and axis (both results used):
// a copy supplies the max value, the original the index.
// CHECK-LABEL: func.func @max_and_argmax
// CHECK:       %[[V:[a-z0-9_]+]], %{{[a-z0-9_]+}} = linalg.generic
// CHECK:       %{{[a-z0-9_]+}}, %[[I:[a-z0-9_]+]] = linalg.generic
// CHECK-NOT:   linalg.generic
// CHECK:       func.return %[[V]], %[[I]] : tensor<3xf32>, tensor<3xi64>
// Only the index used (a plain ArgMax): unchanged, one generic.
// CHECK-LABEL: func.func @argmax_only
// CHECK:       linalg.generic
// CHECK-NOT:   linalg.generic
// CHECK:       func.return
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @max_and_argmax(%x: tensor<3x5xf32>) -> (tensor<3xf32>, tensor<3xi64>) {
  %z = arith.constant 0 : i64
  %ninf = arith.constant 0xFF800000 : f32
  %e0 = tensor.empty() : tensor<3xi64>
  %i0 = linalg.fill ins(%z : i64) outs(%e0 : tensor<3xi64>) -> tensor<3xi64>
  %e1 = tensor.empty() : tensor<3xf32>
  %v0 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<3xf32>) -> tensor<3xf32>
  %r:2 = linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<3x5xf32>) outs(%v0, %i0 : tensor<3xf32>, tensor<3xi64>) {
  ^bb0(%a: f32, %m: f32, %k: i64):
    %j = linalg.index 1 : index
    %jj = arith.index_cast %j : index to i64
    %mx = arith.maximumf %a, %m : f32
    %c = arith.cmpf ogt, %a, %m : f32
    %s = arith.select %c, %jj, %k : i64
    linalg.yield %mx, %s : f32, i64
  } -> (tensor<3xf32>, tensor<3xi64>)
  func.return %r#0, %r#1 : tensor<3xf32>, tensor<3xi64>
}
func.func @argmax_only(%x: tensor<3x5xf32>) -> tensor<3xi64> {
  %z = arith.constant 0 : i64
  %ninf = arith.constant 0xFF800000 : f32
  %e0 = tensor.empty() : tensor<3xi64>
  %i0 = linalg.fill ins(%z : i64) outs(%e0 : tensor<3xi64>) -> tensor<3xi64>
  %e1 = tensor.empty() : tensor<3xf32>
  %v0 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<3xf32>) -> tensor<3xf32>
  %r:2 = linalg.generic {indexing_maps = [#id, #row, #row], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<3x5xf32>) outs(%v0, %i0 : tensor<3xf32>, tensor<3xi64>) {
  ^bb0(%a: f32, %m: f32, %k: i64):
    %j = linalg.index 1 : index
    %jj = arith.index_cast %j : index to i64
    %mx = arith.maximumf %a, %m : f32
    %c = arith.cmpf ogt, %a, %m : f32
    %s = arith.select %c, %jj, %k : i64
    linalg.yield %mx, %s : f32, i64
  } -> (tensor<3xf32>, tensor<3xi64>)
  func.return %r#1 : tensor<3xi64>
}
