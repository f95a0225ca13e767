// An unsigned comparison with an i64 constant whose unsigned value (2**64 - 1) does not fit the
// i32 integer lane (u64 tensors are held as i32) -> one refusal.
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @f(%a: tensor<4x8xi64>) -> tensor<4x8xi1> {
  %big = arith.constant -1 : i64
  %e = tensor.empty() : tensor<4x8xi1>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x8xi64>) outs(%e : tensor<4x8xi1>) {
  ^bb0(%p: i64, %o: i1):
    %s = arith.cmpi ult, %p, %big : i64
    linalg.yield %s : i1
  } -> tensor<4x8xi1>
  func.return %r : tensor<4x8xi1>
}
