// A bitwise And of i32 values: the integer lane's and stage (refused before issue 12).
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @f(%a: tensor<4x8xi32>, %b: tensor<4x8xi32>) -> tensor<4x8xi32> {
  %e = tensor.empty() : tensor<4x8xi32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<4x8xi32>, tensor<4x8xi32>) outs(%e : tensor<4x8xi32>) {
  ^bb0(%p: i32, %q: i32, %o: i32):
    %s = arith.andi %p, %q : i32
    linalg.yield %s : i32
  } -> tensor<4x8xi32>
  func.return %r : tensor<4x8xi32>
}
