// An i64 constant that does not fit i32: the narrowing is refused with one line.
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @f(%a: tensor<1x2xi64>) -> tensor<1x2xi64> {
  %k = arith.constant dense<[[1, 4294967296]]> : tensor<1x2xi64>
  %e = tensor.empty() : tensor<1x2xi64>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %k : tensor<1x2xi64>, tensor<1x2xi64>) outs(%e : tensor<1x2xi64>) {
  ^bb0(%p: i64, %q: i64, %o: i64):
    %s = arith.addi %p, %q : i64
    linalg.yield %s : i64
  } -> tensor<1x2xi64>
  func.return %r : tensor<1x2xi64>
}
