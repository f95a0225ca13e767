// u32 -> i64 (extui): zext of the low 32 bits (values >= 2**31 fault in the i32 lane at run time).
#id = affine_map<(d0) -> (d0)>
func.func @f(%a: tensor<8xi32>) -> tensor<8xi64> {
  %e = tensor.empty() : tensor<8xi64>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]} ins(%a : tensor<8xi32>) outs(%e : tensor<8xi64>) {
  ^bb0(%p: i32, %o: i64):
    %x = arith.extui %p : i32 to i64
    linalg.yield %x : i64
  } -> tensor<8xi64>
  func.return %r : tensor<8xi64>
}
