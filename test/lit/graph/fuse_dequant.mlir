// RUN: m100-opt %s -p fuse-dequant | filecheck %s

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>

// W8A8 projection as torch-mlir emits ONNX Cast(MatMulInteger(x, W), f32) * dq -> Cast f16:
// the three generics after the i32 contraction become one (sitofp, mulf, truncf in its body).
func.func @dequant(%x: tensor<4x8xi8>, %w: tensor<8x6xi8>, %dq: tensor<6xf32>) -> tensor<4x6xf16> {
  %c0 = arith.constant 0 : i32
  %e = tensor.empty() : tensor<4x6xi32>
  %z = linalg.fill ins(%c0 : i32) outs(%e : tensor<4x6xi32>) -> tensor<4x6xi32>
  %acc = linalg.matmul ins(%x, %w : tensor<4x8xi8>, tensor<8x6xi8>) outs(%z : tensor<4x6xi32>) -> tensor<4x6xi32>
  %ef = tensor.empty() : tensor<4x6xf32>
  %f = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%acc : tensor<4x6xi32>) outs(%ef : tensor<4x6xf32>) {
  ^bb0(%a: i32, %o: f32):
    %v = arith.sitofp %a : i32 to f32
    linalg.yield %v : f32
  } -> tensor<4x6xf32>
  %m = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%f, %dq : tensor<4x6xf32>, tensor<6xf32>) outs(%ef : tensor<4x6xf32>) {
  ^bb0(%a: f32, %s: f32, %o: f32):
    %v = arith.mulf %a, %s : f32
    linalg.yield %v : f32
  } -> tensor<4x6xf32>
  %eh = tensor.empty() : tensor<4x6xf16>
  %h = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%m : tensor<4x6xf32>) outs(%eh : tensor<4x6xf16>) {
  ^bb0(%a: f32, %o: f16):
    %v = arith.truncf %a : f32 to f16
    linalg.yield %v : f16
  } -> tensor<4x6xf16>
  func.return %h : tensor<4x6xf16>
}
// CHECK-LABEL: func.func @dequant
// The fused generic is also the matmul's TCU epilogue (per-channel f32 scale, f16 result):
// CHECK:       %acc = linalg.matmul {m100.group = [[G:[0-9]+]] : i64, m100.epilogue = ["dequant"]}
// CHECK-NEXT:  %ef = tensor.empty() : tensor<4x6xf32>
// CHECK-NEXT:  %eh = tensor.empty() : tensor<4x6xf16>
// CHECK-NEXT:  %{{.*}} = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%dq, %acc : tensor<6xf32>, tensor<4x6xi32>) outs(%eh : tensor<4x6xf16>) attrs =  {m100.fused_into = [[G]] : i64, m100.stage = "dequant"} {
// CHECK-NEXT:  ^bb0(%[[S:.*]]: f32, %[[A:.*]]: i32, %{{.*}}: f16):
// CHECK-NEXT:    %[[F:.*]] = arith.sitofp %[[A]] : i32 to f32
// CHECK-NEXT:    %[[M:.*]] = arith.mulf %[[F]], %[[S]] : f32
// CHECK-NEXT:    %[[H:.*]] = arith.truncf %[[M]] : f32 to f16
// CHECK-NEXT:    linalg.yield %[[H]] : f16
// CHECK-NEXT:  } -> tensor<4x6xf16>
// CHECK-NEXT:  func.return

// A contraction's accumulator whose f32 value is read twice: unchanged (so is a sitofp of
// anything but a contraction's result: @arg).
func.func @not_fused(%x: tensor<4x8xi8>, %w: tensor<8x6xi8>, %dq: tensor<6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %c0 = arith.constant 0 : i32
  %e = tensor.empty() : tensor<4x6xi32>
  %z = linalg.fill ins(%c0 : i32) outs(%e : tensor<4x6xi32>) -> tensor<4x6xi32>
  %i = linalg.matmul ins(%x, %w : tensor<4x8xi8>, tensor<8x6xi8>) outs(%z : tensor<4x6xi32>) -> tensor<4x6xi32>
  %ef = tensor.empty() : tensor<4x6xf32>
  %f = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%i : tensor<4x6xi32>) outs(%ef : tensor<4x6xf32>) {
  ^bb0(%a: i32, %o: f32):
    %v = arith.sitofp %a : i32 to f32
    linalg.yield %v : f32
  } -> tensor<4x6xf32>
  %m = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%f, %dq : tensor<4x6xf32>, tensor<6xf32>) outs(%ef : tensor<4x6xf32>) {
  ^bb0(%a: f32, %s: f32, %o: f32):
    %v = arith.mulf %a, %s : f32
    linalg.yield %v : f32
  } -> tensor<4x6xf32>
  func.return %f, %m : tensor<4x6xf32>, tensor<4x6xf32>
}
// CHECK-LABEL: func.func @not_fused
// CHECK:       arith.sitofp
// CHECK-NEXT:  linalg.yield
// CHECK:       arith.mulf
// CHECK-NEXT:  linalg.yield

func.func @arg(%i: tensor<4x6xi32>, %dq: tensor<6xf32>) -> tensor<4x6xf32> {
  %ef = tensor.empty() : tensor<4x6xf32>
  %f = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%i : tensor<4x6xi32>) outs(%ef : tensor<4x6xf32>) {
  ^bb0(%a: i32, %o: f32):
    %v = arith.sitofp %a : i32 to f32
    linalg.yield %v : f32
  } -> tensor<4x6xf32>
  %m = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%f, %dq : tensor<4x6xf32>, tensor<6xf32>) outs(%ef : tensor<4x6xf32>) {
  ^bb0(%a: f32, %s: f32, %o: f32):
    %v = arith.mulf %a, %s : f32
    linalg.yield %v : f32
  } -> tensor<4x6xf32>
  func.return %m : tensor<4x6xf32>
}
// CHECK-LABEL: func.func @arg
// CHECK:       arith.sitofp
// CHECK-NEXT:  linalg.yield
// CHECK:       arith.mulf
// CHECK-NEXT:  linalg.yield

// A scale per row (not per output channel): fused into one generic, but not a TCU epilogue
#row = affine_map<(d0, d1) -> (d0)>
func.func @per_row(%x: tensor<4x8xi8>, %w: tensor<8x6xi8>, %dq: tensor<4xf32>) -> tensor<4x6xf32> {
  %c0 = arith.constant 0 : i32
  %e = tensor.empty() : tensor<4x6xi32>
  %z = linalg.fill ins(%c0 : i32) outs(%e : tensor<4x6xi32>) -> tensor<4x6xi32>
  %acc = linalg.matmul ins(%x, %w : tensor<4x8xi8>, tensor<8x6xi8>) outs(%z : tensor<4x6xi32>) -> tensor<4x6xi32>
  %ef = tensor.empty() : tensor<4x6xf32>
  %f = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%acc : tensor<4x6xi32>) outs(%ef : tensor<4x6xf32>) {
  ^bb0(%a: i32, %o: f32):
    %v = arith.sitofp %a : i32 to f32
    linalg.yield %v : f32
  } -> tensor<4x6xf32>
  %m = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%f, %dq : tensor<4x6xf32>, tensor<4xf32>) outs(%ef : tensor<4x6xf32>) {
  ^bb0(%a: f32, %s: f32, %o: f32):
    %v = arith.mulf %a, %s : f32
    linalg.yield %v : f32
  } -> tensor<4x6xf32>
  func.return %m : tensor<4x6xf32>
}
// CHECK-LABEL: func.func @per_row
// CHECK:       %acc = linalg.matmul ins
// CHECK:       arith.sitofp
// CHECK-NEXT:  arith.mulf
// CHECK-NEXT:  linalg.yield
// CHECK-NOT:   m100.stage

// The dequantization followed by a residual add (LLaMA's wo / wd): the dequantization alone is
// the matmul's TCU epilogue; the add stays a generic of its own reading the f16 result (fused
// into one generic, it would read the i32 accumulator from memory and no epilogue is possible).
func.func @residual(%x: tensor<4x8xi8>, %w: tensor<8x6xi8>, %dq: tensor<6xf32>, %r: tensor<4x6xf16>) -> tensor<4x6xf16> {
  %c0 = arith.constant 0 : i32
  %e = tensor.empty() : tensor<4x6xi32>
  %z = linalg.fill ins(%c0 : i32) outs(%e : tensor<4x6xi32>) -> tensor<4x6xi32>
  %acc = linalg.matmul ins(%x, %w : tensor<4x8xi8>, tensor<8x6xi8>) outs(%z : tensor<4x6xi32>) -> tensor<4x6xi32>
  %ef = tensor.empty() : tensor<4x6xf32>
  %f = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%acc : tensor<4x6xi32>) outs(%ef : tensor<4x6xf32>) {
  ^bb0(%a: i32, %o: f32):
    %v = arith.sitofp %a : i32 to f32
    linalg.yield %v : f32
  } -> tensor<4x6xf32>
  %m = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%f, %dq : tensor<4x6xf32>, tensor<6xf32>) outs(%ef : tensor<4x6xf32>) {
  ^bb0(%a: f32, %s: f32, %o: f32):
    %v = arith.mulf %a, %s : f32
    linalg.yield %v : f32
  } -> tensor<4x6xf32>
  %eh = tensor.empty() : tensor<4x6xf16>
  %h = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%m : tensor<4x6xf32>) outs(%eh : tensor<4x6xf16>) {
  ^bb0(%a: f32, %o: f16):
    %v = arith.truncf %a : f32 to f16
    linalg.yield %v : f16
  } -> tensor<4x6xf16>
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%r, %h : tensor<4x6xf16>, tensor<4x6xf16>) outs(%eh : tensor<4x6xf16>) {
  ^bb0(%a: f16, %b: f16, %o: f16):
    %v = arith.addf %a, %b : f16
    linalg.yield %v : f16
  } -> tensor<4x6xf16>
  func.return %y : tensor<4x6xf16>
}
// CHECK-LABEL: func.func @residual
// CHECK:       %acc = linalg.matmul {m100.group = [[G:[0-9]+]] : i64, m100.epilogue = ["dequant"]}
// CHECK:       attrs =  {m100.fused_into = [[G]] : i64, m100.stage = "dequant"} {
// CHECK:         arith.sitofp
// CHECK-NEXT:    arith.mulf
// CHECK-NEXT:    arith.truncf
// CHECK-NEXT:    linalg.yield
// CHECK:       ins(%r, %{{.*}} : tensor<4x6xf16>, tensor<4x6xf16>)
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    arith.addf
// CHECK-NEXT:    linalg.yield
