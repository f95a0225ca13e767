// RUN: m100-opt %s -p fuse-elementwise | filecheck %s

#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#bc = affine_map<(d0, d1, d2) -> (d0, 0, d2)>

// RoPE's x * C + r * S in f16 (torch-mlir's three generics; the tables [T, 1, hd] read broadcast
// over the heads): one generic whose leaves keep their maps, computed in f32 between extf and ONE
// truncf (the CVU pipeline's single rounding at the store).
// CHECK-LABEL: func.func @rope
// CHECK:       linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, 0, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, 0, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %c, %r, %s : tensor<4x2x8xf16>, tensor<4x1x8xf16>, tensor<4x2x8xf16>, tensor<4x1x8xf16>)
// CHECK-NEXT:  ^{{[a-z0-9]+}}(%[[X:[a-z0-9_]+]]: f16, %[[C:[a-z0-9_]+]]: f16, %[[R:[a-z0-9_]+]]: f16, %[[S:[a-z0-9_]+]]: f16, %{{[a-z0-9_]+}}: f16):
// CHECK-NEXT:    %[[XW:[a-z0-9_]+]] = arith.extf %[[X]] : f16 to f32
// CHECK-NEXT:    %[[CW:[a-z0-9_]+]] = arith.extf %[[C]] : f16 to f32
// CHECK-NEXT:    %[[A:[a-z0-9_]+]] = arith.mulf %[[XW]], %[[CW]] : f32
// CHECK-NEXT:    %[[RW:[a-z0-9_]+]] = arith.extf %[[R]] : f16 to f32
// CHECK-NEXT:    %[[SW:[a-z0-9_]+]] = arith.extf %[[S]] : f16 to f32
// CHECK-NEXT:    %[[B:[a-z0-9_]+]] = arith.mulf %[[RW]], %[[SW]] : f32
// CHECK-NEXT:    %[[Y:[a-z0-9_]+]] = arith.addf %[[A]], %[[B]] : f32
// CHECK-NEXT:    %[[T:[a-z0-9_]+]] = arith.truncf %[[Y]] : f32 to f16
// CHECK-NEXT:    linalg.yield %[[T]] : f16
// CHECK-NOT:   linalg.generic
func.func @rope(%x: tensor<4x2x8xf16>, %c: tensor<4x1x8xf16>, %r: tensor<4x2x8xf16>, %s: tensor<4x1x8xf16>) -> tensor<4x2x8xf16> {
  %e = tensor.empty() : tensor<4x2x8xf16>
  %a = linalg.generic {indexing_maps = [#id, #bc, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %c : tensor<4x2x8xf16>, tensor<4x1x8xf16>) outs(%e : tensor<4x2x8xf16>) {
  ^bb0(%i: f16, %j: f16, %o: f16):
    %m = arith.mulf %i, %j : f16
    linalg.yield %m : f16
  } -> tensor<4x2x8xf16>
  %b = linalg.generic {indexing_maps = [#id, #bc, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%r, %s : tensor<4x2x8xf16>, tensor<4x1x8xf16>) outs(%e : tensor<4x2x8xf16>) {
  ^bb0(%i: f16, %j: f16, %o: f16):
    %m = arith.mulf %i, %j : f16
    linalg.yield %m : f16
  } -> tensor<4x2x8xf16>
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%a, %b : tensor<4x2x8xf16>, tensor<4x2x8xf16>) outs(%e : tensor<4x2x8xf16>) {
  ^bb0(%i: f16, %j: f16, %o: f16):
    %m = arith.addf %i, %j : f16
    linalg.yield %m : f16
  } -> tensor<4x2x8xf16>
  func.return %y : tensor<4x2x8xf16>
}

// f32: the same ops in f32, no extf / truncf (every op still rounds to f32: unchanged values);
// an outer scalar constant is read inside the body as before.
// CHECK-LABEL: func.func @f32_chain
// CHECK:       ins(%x, %z : tensor<4x2x8xf32>, tensor<4x2x8xf32>)
// CHECK-NOT:   arith.extf
// CHECK:         %[[N:[a-z0-9_]+]] = arith.negf %{{[a-z0-9_]+}} : f32
// CHECK-NEXT:    %[[M:[a-z0-9_]+]] = arith.subf %[[N]], %cst : f32
// CHECK-NEXT:    %[[D:[a-z0-9_]+]] = arith.divf %[[M]], %{{[a-z0-9_]+}} : f32
// CHECK-NEXT:    linalg.yield %[[D]] : f32
// CHECK-NOT:   arith.truncf
func.func @f32_chain(%x: tensor<4x2x8xf32>, %z: tensor<4x2x8xf32>) -> tensor<4x2x8xf32> {
  %cst = arith.constant 2.0 : f32
  %e = tensor.empty() : tensor<4x2x8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<4x2x8xf32>) outs(%e : tensor<4x2x8xf32>) {
  ^bb0(%i: f32, %o: f32):
    %n = arith.negf %i : f32
    %m = arith.subf %n, %cst : f32
    linalg.yield %m : f32
  } -> tensor<4x2x8xf32>
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%a, %z : tensor<4x2x8xf32>, tensor<4x2x8xf32>) outs(%e : tensor<4x2x8xf32>) {
  ^bb0(%i: f32, %j: f32, %o: f32):
    %d = arith.divf %i, %j : f32
    linalg.yield %d : f32
  } -> tensor<4x2x8xf32>
  func.return %y : tensor<4x2x8xf32>
}

// Negative: a producer with two users stays (fusing would compute it twice); a body with a math
// function (exp) keeps its rounding points; a producer read through a broadcast map is not inlined.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-4: linalg.generic
// CHECK-NOT:   arith.extf
func.func @kept(%x: tensor<4x2x8xf16>, %t: tensor<4x1x8xf16>) -> (tensor<4x2x8xf16>, tensor<4x2x8xf16>, tensor<4x2x8xf16>) {
  %e = tensor.empty() : tensor<4x2x8xf16>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<4x2x8xf16>) outs(%e : tensor<4x2x8xf16>) {
  ^bb0(%i: f16, %o: f16):
    %m = arith.mulf %i, %i : f16
    linalg.yield %m : f16
  } -> tensor<4x2x8xf16>
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%a, %x : tensor<4x2x8xf16>, tensor<4x2x8xf16>) outs(%e : tensor<4x2x8xf16>) {
  ^bb0(%i: f16, %j: f16, %o: f16):
    %m = arith.addf %i, %j : f16
    %k = math.exp %m : f16
    linalg.yield %k : f16
  } -> tensor<4x2x8xf16>
  %e1 = tensor.empty() : tensor<4x1x8xf16>
  %tt = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t : tensor<4x1x8xf16>) outs(%e1 : tensor<4x1x8xf16>) {
  ^bb0(%i: f16, %o: f16):
    %m = arith.mulf %i, %i : f16
    linalg.yield %m : f16
  } -> tensor<4x1x8xf16>
  %z = linalg.generic {indexing_maps = [#id, #bc, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%a, %tt : tensor<4x2x8xf16>, tensor<4x1x8xf16>) outs(%e : tensor<4x2x8xf16>) {
  ^bb0(%i: f16, %j: f16, %o: f16):
    %m = arith.subf %i, %j : f16
    linalg.yield %m : f16
  } -> tensor<4x2x8xf16>
  func.return %y, %z, %a : tensor<4x2x8xf16>, tensor<4x2x8xf16>, tensor<4x2x8xf16>
}

// A leaf read twice with the same map is one input: x * c + x.
// CHECK-LABEL: func.func @shared_leaf
// CHECK:       ins(%x, %c : tensor<4x2x8xf16>, tensor<4x1x8xf16>)
// CHECK-NEXT:  ^{{[a-z0-9]+}}(%[[X:[a-z0-9_]+]]: f16, %[[C:[a-z0-9_]+]]: f16, %{{[a-z0-9_]+}}: f16):
// CHECK-NEXT:    %[[XW:[a-z0-9_]+]] = arith.extf %[[X]] : f16 to f32
// CHECK-NEXT:    %[[CW:[a-z0-9_]+]] = arith.extf %[[C]] : f16 to f32
// CHECK-NEXT:    %[[A:[a-z0-9_]+]] = arith.mulf %[[XW]], %[[CW]] : f32
// CHECK-NEXT:    %[[Y:[a-z0-9_]+]] = arith.addf %[[A]], %[[XW]] : f32
func.func @shared_leaf(%x: tensor<4x2x8xf16>, %c: tensor<4x1x8xf16>) -> tensor<4x2x8xf16> {
  %e = tensor.empty() : tensor<4x2x8xf16>
  %a = linalg.generic {indexing_maps = [#id, #bc, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %c : tensor<4x2x8xf16>, tensor<4x1x8xf16>) outs(%e : tensor<4x2x8xf16>) {
  ^bb0(%i: f16, %j: f16, %o: f16):
    %m = arith.mulf %i, %j : f16
    linalg.yield %m : f16
  } -> tensor<4x2x8xf16>
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%a, %x : tensor<4x2x8xf16>, tensor<4x2x8xf16>) outs(%e : tensor<4x2x8xf16>) {
  ^bb0(%i: f16, %j: f16, %o: f16):
    %m = arith.addf %i, %j : f16
    linalg.yield %m : f16
  } -> tensor<4x2x8xf16>
  func.return %y : tensor<4x2x8xf16>
}
