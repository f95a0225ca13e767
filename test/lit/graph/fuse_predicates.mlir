// RUN: m100-opt %s -p fuse-predicates | filecheck %s

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>

// PRelu as torch-mlir emits it: an i1 mask generic (x < 0, compared in f64) and a select generic
// with a broadcast slope. The mask is computed inside the select's body: one generic, no i1 tensor.
// CHECK-LABEL: func.func @prelu
// CHECK-NOT:   -> tensor<2x3xi1>
// CHECK:       linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x, %slope, %x : tensor<2x3xf32>, tensor<3xf32>, tensor<2x3xf32>)
// CHECK-NEXT:  ^{{[a-z0-9]+}}(%[[A:[a-z0-9_]+]]: f32, %[[S:[a-z0-9_]+]]: f32, %[[X:[a-z0-9_]+]]: f32, %{{[a-z0-9_]+}}: f32):
// CHECK-NEXT:    %[[E:[a-z0-9_]+]] = arith.extf %[[X]] : f32 to f64
// CHECK-NEXT:    %[[C:[a-z0-9_]+]] = arith.cmpf olt, %[[E]], %zero : f64
// CHECK-NEXT:    %[[M:[a-z0-9_]+]] = arith.mulf %[[A]], %[[S]] : f32
// CHECK-NEXT:    %[[R:[a-z0-9_]+]] = arith.select %[[C]], %[[M]], %[[A]] : f32
// CHECK-NEXT:    linalg.yield %[[R]] : f32
func.func @prelu(%x: tensor<2x3xf32>, %slope: tensor<3xf32>) -> tensor<2x3xf32> {
  %zero = arith.constant 0.0 : f64
  %e1 = tensor.empty() : tensor<2x3xi1>
  %mask = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<2x3xf32>) outs(%e1 : tensor<2x3xi1>) {
  ^bb0(%in: f32, %out: i1):
    %d = arith.extf %in : f32 to f64
    %c = arith.cmpf olt, %d, %zero : f64
    linalg.yield %c : i1
  } -> tensor<2x3xi1>
  %e = tensor.empty() : tensor<2x3xf32>
  %y = linalg.generic {indexing_maps = [#id, #id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%mask, %x, %slope : tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%m: i1, %a: f32, %s: f32, %out: f32):
    %p = arith.mulf %a, %s : f32
    %r = arith.select %m, %p, %a : f32
    linalg.yield %r : f32
  } -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}

// Negative: a mask with two users stays a tensor (fusing would compute it twice).
// CHECK-LABEL: func.func @shared
// CHECK:       -> tensor<2x3xi1>
func.func @shared(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<2x3xi1>
  %mask = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<2x3xf32>) outs(%e1 : tensor<2x3xi1>) {
  ^bb0(%in: f32, %out: i1):
    %c = arith.cmpf olt, %in, %zero : f32
    linalg.yield %c : i1
  } -> tensor<2x3xi1>
  %e = tensor.empty() : tensor<2x3xf32>
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%mask, %x : tensor<2x3xi1>, tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%m: i1, %a: f32, %out: f32):
    %r = arith.select %m, %zero, %a : f32
    linalg.yield %r : f32
  } -> tensor<2x3xf32>
  %z = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%mask, %x : tensor<2x3xi1>, tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%m: i1, %a: f32, %out: f32):
    %r = arith.select %m, %a, %zero : f32
    linalg.yield %r : f32
  } -> tensor<2x3xf32>
  func.return %y, %z : tensor<2x3xf32>, tensor<2x3xf32>
}
