// Integer elementwise work (issue 11): Where(a < b, a + b, a / b) on i64, a bool output, and
// a float -> i32 cast (fptosi, truncation).
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @f(%a: tensor<4x8xi64>, %b: tensor<4x8xi64>, %x: tensor<4x8xf32>) -> (tensor<4x8xi64>, tensor<4x8xi1>, tensor<4x8xi32>) {
  %true = arith.constant true
  %e1 = tensor.empty() : tensor<4x8xi1>
  %lt = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<4x8xi64>, tensor<4x8xi64>) outs(%e1 : tensor<4x8xi1>) {
  ^bb0(%p: i64, %q: i64, %o: i1):
    %c = arith.cmpi slt, %p, %q : i64
    linalg.yield %c : i1
  } -> tensor<4x8xi1>
  %e64 = tensor.empty() : tensor<4x8xi64>
  %w = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%lt, %a, %b : tensor<4x8xi1>, tensor<4x8xi64>, tensor<4x8xi64>) outs(%e64 : tensor<4x8xi64>) {
  ^bb0(%c: i1, %p: i64, %q: i64, %o: i64):
    %s = arith.addi %p, %q : i64
    %d = arith.divsi %p, %q : i64
    %r = arith.select %c, %s, %d : i64
    linalg.yield %r : i64
  } -> tensor<4x8xi64>
  %n = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%lt : tensor<4x8xi1>) outs(%e1 : tensor<4x8xi1>) {
  ^bb0(%c: i1, %o: i1):
    %r = arith.xori %c, %true : i1
    linalg.yield %r : i1
  } -> tensor<4x8xi1>
  %e32 = tensor.empty() : tensor<4x8xi32>
  %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e32 : tensor<4x8xi32>) {
  ^bb0(%v: f32, %o: i32):
    %r = arith.fptosi %v : f32 to i32
    linalg.yield %r : i32
  } -> tensor<4x8xi32>
  func.return %w, %n, %t : tensor<4x8xi64>, tensor<4x8xi1>, tensor<4x8xi32>
}
