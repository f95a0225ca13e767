// RUN: m100-opt %s -p materialize-index | filecheck %s

// Trilu (torch-mlir's tril with k = 1 on i32): the row and column indices become constant i64
// iota inputs read along d0 / d1; the index_cast to i64 is the block argument itself, a cast to
// a narrower type a trunci of it.
// CHECK-LABEL: func.func @tril
// CHECK-DAG:   %[[R:[a-z0-9_]+]] = arith.constant dense<[0, 1, 2]> : tensor<3xi64>
// CHECK-DAG:   %[[C:[a-z0-9_]+]] = arith.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
// CHECK:       linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>]
// CHECK-SAME:  ins(%{{.*}}, %[[R]], %[[C]] : tensor<3x4xi32>, tensor<3xi64>, tensor<4xi64>)
// CHECK:       ^bb0(%{{[a-z0-9_]+}}: i32, %[[I:[a-z0-9_]+]]: i64, %[[J:[a-z0-9_]+]]: i64, %{{[a-z0-9_]+}}: i32):
// CHECK-NOT:   linalg.index
// CHECK:       arith.trunci %[[J]] : i64 to i32
// CHECK:       arith.addi %[[I]], %{{.*}} : i64
// CHECK-LABEL: func.func @gather
// A gather (tensor.extract at an index) is left to the CSU gather: unchanged.
// CHECK:       linalg.index 1
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @tril(%x: tensor<3x4xi32>) -> tensor<3x4xi32> {
  %k = arith.constant 1 : i64
  %z = arith.constant 0 : i32
  %e = tensor.empty() : tensor<3x4xi32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<3x4xi32>) outs(%e : tensor<3x4xi32>) {
  ^bb0(%in: i32, %o: i32):
    %i = linalg.index 0 : index
    %ii = arith.index_cast %i : index to i64
    %j = linalg.index 1 : index
    %jj = arith.index_cast %j : index to i32
    %jw = arith.extsi %jj : i32 to i64
    %ik = arith.addi %ii, %k : i64
    %c = arith.cmpi sle, %jw, %ik : i64
    %s = arith.select %c, %in, %z : i32
    linalg.yield %s : i32
  } -> tensor<3x4xi32>
  func.return %r : tensor<3x4xi32>
}
func.func @gather(%t: tensor<5x4xf32>, %idx: tensor<3xi64>) -> tensor<3x4xf32> {
  %e = tensor.empty() : tensor<3x4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, #id], iterator_types = ["parallel", "parallel"]} ins(%idx : tensor<3xi64>) outs(%e : tensor<3x4xf32>) {
  ^bb0(%in: i64, %o: f32):
    %i = arith.index_cast %in : i64 to index
    %j = linalg.index 1 : index
    %v = tensor.extract %t[%i, %j] : tensor<5x4xf32>
    linalg.yield %v : f32
  } -> tensor<3x4xf32>
  func.return %r : tensor<3x4xf32>
}
