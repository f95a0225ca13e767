// Unsigned 8/16-bit conversions (issue 11): u8 -> i32 (extui), u16 -> f32 (uitofp), f32 -> u8
// (fptoui), all with the values held as signed bits.
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @f(%a: tensor<4x8xi8>, %b: tensor<4x8xi16>, %x: tensor<4x8xf32>) -> (tensor<4x8xi32>, tensor<4x8xf32>, tensor<4x8xi8>) {
  %e32 = tensor.empty() : tensor<4x8xi32>
  %u = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x8xi8>) outs(%e32 : tensor<4x8xi32>) {
  ^bb0(%p: i8, %o: i32):
    %r = arith.extui %p : i8 to i32
    linalg.yield %r : i32
  } -> tensor<4x8xi32>
  %ef = tensor.empty() : tensor<4x8xf32>
  %f = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%b : tensor<4x8xi16>) outs(%ef : tensor<4x8xf32>) {
  ^bb0(%p: i16, %o: f32):
    %r = arith.uitofp %p : i16 to f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  %e8 = tensor.empty() : tensor<4x8xi8>
  %q = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e8 : tensor<4x8xi8>) {
  ^bb0(%v: f32, %o: i8):
    %r = arith.fptoui %v : f32 to i8
    linalg.yield %r : i8
  } -> tensor<4x8xi8>
  func.return %u, %f, %q : tensor<4x8xi32>, tensor<4x8xf32>, tensor<4x8xi8>
}
