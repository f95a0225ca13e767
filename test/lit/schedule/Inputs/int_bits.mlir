// Integer bit ops (issue 12): BitShift left on i8 and right on u8 (held as i8 patterns), Mod of
// i32 (remsi + torch-mlir's sign fix-up), unsigned max of u16, Less of u8 (cmpi ult), BitwiseNot
// of i32 (xori -1) and And of i32, u8 -> f32 (uitofp).
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @f(%a: tensor<4x8xi8>, %b: tensor<4x8xi8>, %p: tensor<4x8xi32>, %q: tensor<4x8xi32>, %u: tensor<4x8xi16>, %v: tensor<4x8xi16>) -> (tensor<4x8xi8>, tensor<4x8xi8>, tensor<4x8xi32>, tensor<4x8xi16>, tensor<4x8xi1>, tensor<4x8xi32>, tensor<4x8xf32>, tensor<4x8xi1>) {
  %m1 = arith.constant -1 : i32
  %c0 = arith.constant 0 : i32
  %e8 = tensor.empty() : tensor<4x8xi8>
  %shl = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<4x8xi8>, tensor<4x8xi8>) outs(%e8 : tensor<4x8xi8>) {
  ^bb0(%x: i8, %y: i8, %o: i8):
    %r = arith.shli %x, %y : i8
    linalg.yield %r : i8
  } -> tensor<4x8xi8>
  %shr = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<4x8xi8>, tensor<4x8xi8>) outs(%e8 : tensor<4x8xi8>) {
  ^bb0(%x: i8, %y: i8, %o: i8):
    %r = arith.shrui %x, %y : i8
    linalg.yield %r : i8
  } -> tensor<4x8xi8>
  %e32 = tensor.empty() : tensor<4x8xi32>
  %mod = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%p, %q : tensor<4x8xi32>, tensor<4x8xi32>) outs(%e32 : tensor<4x8xi32>) {
  ^bb0(%x: i32, %y: i32, %o: i32):
    %r = arith.remsi %x, %y : i32
    %nz = arith.cmpi ne, %r, %c0 : i32
    %yn = arith.cmpi slt, %y, %c0 : i32
    %rn = arith.cmpi slt, %r, %c0 : i32
    %sx = arith.xori %yn, %rn : i1
    %fix = arith.andi %nz, %sx : i1
    %ry = arith.addi %r, %y : i32
    %s = arith.select %fix, %ry, %r : i32
    linalg.yield %s : i32
  } -> tensor<4x8xi32>
  %e16 = tensor.empty() : tensor<4x8xi16>
  %mx = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%u, %v : tensor<4x8xi16>, tensor<4x8xi16>) outs(%e16 : tensor<4x8xi16>) {
  ^bb0(%x: i16, %y: i16, %o: i16):
    %r = arith.maxui %x, %y : i16
    linalg.yield %r : i16
  } -> tensor<4x8xi16>
  %e1 = tensor.empty() : tensor<4x8xi1>
  %lt = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<4x8xi8>, tensor<4x8xi8>) outs(%e1 : tensor<4x8xi1>) {
  ^bb0(%x: i8, %y: i8, %o: i1):
    %r = arith.cmpi ult, %x, %y : i8
    linalg.yield %r : i1
  } -> tensor<4x8xi1>
  %bits = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%p, %q : tensor<4x8xi32>, tensor<4x8xi32>) outs(%e32 : tensor<4x8xi32>) {
  ^bb0(%x: i32, %y: i32, %o: i32):
    %n = arith.xori %x, %m1 : i32
    %r = arith.andi %n, %y : i32
    linalg.yield %r : i32
  } -> tensor<4x8xi32>
  %ef = tensor.empty() : tensor<4x8xf32>
  %f = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%a : tensor<4x8xi8>) outs(%ef : tensor<4x8xf32>) {
  ^bb0(%x: i8, %o: f32):
    %r = arith.uitofp %x : i8 to f32
    linalg.yield %r : f32
  } -> tensor<4x8xf32>
  // (a + b) < 0 on i8: MLIR's addi wraps (100 + 100 = -56), the lane holds 200: sext before the
  // compare (a silent wrong 'false' before)
  %c0_8 = arith.constant 0 : i8
  %neg = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%a, %b : tensor<4x8xi8>, tensor<4x8xi8>) outs(%e1 : tensor<4x8xi1>) {
  ^bb0(%x: i8, %y: i8, %o: i1):
    %s = arith.addi %x, %y : i8
    %r = arith.cmpi slt, %s, %c0_8 : i8
    linalg.yield %r : i1
  } -> tensor<4x8xi1>
  func.return %shl, %shr, %mod, %mx, %lt, %bits, %f, %neg : tensor<4x8xi8>, tensor<4x8xi8>, tensor<4x8xi32>, tensor<4x8xi16>, tensor<4x8xi1>, tensor<4x8xi32>, tensor<4x8xf32>, tensor<4x8xi1>
}
