// RUN: m100-opt %s -p simplify-algebra | filecheck %s

// transpose(transpose(x)) that composes to the identity disappears; one that does not becomes a
// single transpose.
func.func @transposes(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4x2x3xf32>) {
  %e0 = tensor.empty() : tensor<3x2x4xf32>
  %a = linalg.transpose ins(%x : tensor<2x3x4xf32>) outs(%e0 : tensor<3x2x4xf32>) permutation = [1, 0, 2]
  %e1 = tensor.empty() : tensor<2x3x4xf32>
  %b = linalg.transpose ins(%a : tensor<3x2x4xf32>) outs(%e1 : tensor<2x3x4xf32>) permutation = [1, 0, 2]
  %e2 = tensor.empty() : tensor<4x3x2xf32>
  %c = linalg.transpose ins(%a : tensor<3x2x4xf32>) outs(%e2 : tensor<4x3x2xf32>) permutation = [2, 0, 1]
  %e3 = tensor.empty() : tensor<4x2x3xf32>
  %d = linalg.transpose ins(%c : tensor<4x3x2xf32>) outs(%e3 : tensor<4x2x3xf32>) permutation = [0, 2, 1]
  func.return %b, %d : tensor<2x3x4xf32>, tensor<4x2x3xf32>
}
// CHECK-LABEL: func.func @transposes(%x: tensor<2x3x4xf32>)
// CHECK-NEXT:    %[[E:.*]] = tensor.empty() : tensor<4x2x3xf32>
// CHECK-NEXT:    %[[T:.*]] = linalg.transpose ins(%x:tensor<2x3x4xf32>) outs(%[[E]]:tensor<4x2x3xf32>) permutation = [2, 0, 1]
// CHECK-NEXT:    func.return %x, %[[T]] : tensor<2x3x4xf32>, tensor<4x2x3xf32>

// Reshape chains: expand then collapse back is x; two collapses become one.
func.func @reshapes(%x: tensor<2x12xf32>) -> (tensor<2x12xf32>, tensor<24xf32>) {
  %a = tensor.expand_shape %x [[0], [1, 2]] output_shape [2, 3, 4] : tensor<2x12xf32> into tensor<2x3x4xf32>
  %b = tensor.collapse_shape %a [[0], [1, 2]] : tensor<2x3x4xf32> into tensor<2x12xf32>
  %c = tensor.expand_shape %x [[0], [1, 2]] output_shape [2, 3, 4] : tensor<2x12xf32> into tensor<2x3x4xf32>
  %d = tensor.collapse_shape %c [[0, 1], [2]] : tensor<2x3x4xf32> into tensor<6x4xf32>
  %e = tensor.collapse_shape %d [[0, 1]] : tensor<6x4xf32> into tensor<24xf32>
  func.return %b, %e : tensor<2x12xf32>, tensor<24xf32>
}
// CHECK-LABEL: func.func @reshapes(%x: tensor<2x12xf32>)
// CHECK-NEXT:    %[[C:.*]] = tensor.expand_shape %x
// CHECK-NEXT:    %[[E:.*]] = tensor.collapse_shape %[[C]] {{\[}}[0 : i64, 1 : i64, 2 : i64]] : tensor<2x3x4xf32> into tensor<24xf32>
// CHECK-NEXT:    func.return %x, %[[E]]

// x * 1 (a splat constant input, e.g. an RMSNorm weight of ones), x + 0 and x / 1 inside
// generic bodies vanish; the generics that are left copying their input go away.
func.func @neutral(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %ones = arith.constant dense<1.0> : tensor<8xf32>
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %a = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%ones, %x : tensor<8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%w: f32, %in: f32, %out: f32):
    %m = arith.mulf %w, %in : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  %b = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %p = arith.addf %in, %zero : f32
    %q = arith.divf %p, %one : f32
    %r = math.exp %q : f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  func.return %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
}
// CHECK-LABEL: func.func @neutral(%x: tensor<4x8xf32>)
// CHECK-NOT:     arith.mulf
// CHECK-NOT:     arith.addf
// CHECK-NOT:     arith.divf
// CHECK:         %[[B:.*]] = linalg.generic {{.*}} ins(%x : tensor<4x8xf32>)
// CHECK-NEXT:    ^{{.*}}(%[[IN:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT:      %[[R:.*]] = math.exp %[[IN]] : f32
// CHECK-NEXT:      linalg.yield %[[R]] : f32
// CHECK:         func.return %x, %[[B]]

// Negative: x * 2 and a real broadcast are kept.
func.func @kept(%x: tensor<8xf32>) -> tensor<4x8xf32> {
  %two = arith.constant 2.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %a = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %two : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  func.return %a : tensor<4x8xf32>
}
// CHECK-LABEL: func.func @kept
// CHECK:         arith.mulf %{{.*}}, %two : f32

// Negative: an input the body never reads but that alone gives some loops their range (the
// window of a pooling generic) is kept.
func.func @window(%x: tensor<1x4xf32>) -> tensor<1x3xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<1x3xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<1x3xf32>) -> tensor<1x3xf32>
  %w = tensor.empty() : tensor<2xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1 + d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : tensor<1x4xf32>, tensor<2xf32>) outs(%f : tensor<1x3xf32>) {
  ^bb0(%in: f32, %k: f32, %out: f32):
    %m = arith.maximumf %in, %out : f32
    linalg.yield %m : f32
  } -> tensor<1x3xf32>
  func.return %p : tensor<1x3xf32>
}
// CHECK-LABEL: func.func @window
// CHECK:         linalg.generic {{.*}} ins(%x, %w : tensor<1x4xf32>, tensor<2xf32>)
