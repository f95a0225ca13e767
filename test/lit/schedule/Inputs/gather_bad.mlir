// A gather whose index is computed inside the body (idx + 1): not a form the CSU gather takes.
func.func @f(%t: tensor<16x8xf32>, %i: tensor<4xi64>) -> tensor<4x8xf32> {
  %one = arith.constant 1 : i64
  %e = tensor.empty() : tensor<4x8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%i : tensor<4xi64>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%a: i64, %o: f32):
    %s = arith.addi %a, %one : i64
    %c = arith.index_cast %s : i64 to index
    %j = linalg.index 1 : index
    %v = tensor.extract %t[%c, %j] : tensor<16x8xf32>
    linalg.yield %v : f32
  } -> tensor<4x8xf32>
  func.return %r : tensor<4x8xf32>
}
