// RUN: m100-opt %s -p raise-quant-casts | filecheck %s
// torch-mlir's QuantizeLinear / DequantizeLinear generics -> quant.qcast / quant.dcast on
// !quant.uniform types; a Q then DQ with equal parameters meets directly.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

func.func @qdq(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %s = arith.constant 0.5 : f32
  %zf = arith.constant 3.0 : f32
  %zi = arith.constant 3 : i64
  %lo = arith.constant -128.0 : f32
  %hi = arith.constant 127.0 : f32
  %e8 = tensor.empty() : tensor<2x3xi8>
  %q = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<2x3xf32>) outs(%e8 : tensor<2x3xi8>) {
  ^bb0(%in: f32, %out: i8):
    %a = arith.divf %in, %s : f32
    %b = math.roundeven %a : f32
    %c = arith.addf %b, %zf : f32
    %d = arith.maximumf %c, %lo : f32
    %e = arith.minimumf %d, %hi : f32
    %f = arith.fptosi %e : f32 to i8
    linalg.yield %f : i8
  } -> tensor<2x3xi8>
  %ef = tensor.empty() : tensor<2x3xf32>
  %dq = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%q : tensor<2x3xi8>) outs(%ef : tensor<2x3xf32>) {
  ^bb0(%in: i8, %out: f32):
    %a = arith.extsi %in : i8 to i64
    %b = arith.subi %a, %zi : i64
    %c = arith.sitofp %b : i64 to f32
    %d = arith.mulf %c, %s : f32
    linalg.yield %d : f32
  } -> tensor<2x3xf32>
  func.return %dq : tensor<2x3xf32>
}
// CHECK-LABEL: func.func @qdq
// CHECK:      %[[Q:.*]] = quant.qcast %x : tensor<2x3xf32> to tensor<2x3x!quant.uniform<i8:f32, 5.000000e-01:3>>
// CHECK:      %[[D:.*]] = quant.dcast %[[Q]] : tensor<2x3x!quant.uniform<i8:f32, 5.000000e-01:3>> to tensor<2x3xf32>
// CHECK-NEXT: func.return %[[D]]

// Per-axis weights (row scales and zero points as 1-D constants), narrowed storage range on Q.
func.func @per_axis(%w: tensor<2x3xi8>, %x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi8>) {
  %sc = arith.constant dense<[0.25, 0.125]> : tensor<2xf32>
  %zp = arith.constant dense<[0, -1]> : tensor<2xi8>
  %ef = tensor.empty() : tensor<2x3xf32>
  %dq = linalg.generic {indexing_maps = [#id, #row, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%w, %sc, %zp : tensor<2x3xi8>, tensor<2xf32>, tensor<2xi8>) outs(%ef : tensor<2x3xf32>) {
  ^bb0(%in: i8, %s: f32, %z: i8, %out: f32):
    %a = arith.extsi %z : i8 to i16
    %b = arith.extsi %in : i8 to i16
    %c = arith.subi %b, %a : i16
    %d = arith.sitofp %c : i16 to f32
    %e = arith.mulf %d, %s : f32
    linalg.yield %e : f32
  } -> tensor<2x3xf32>
  %s1 = arith.constant 0.5 : f32
  %lo = arith.constant -127.0 : f32
  %hi = arith.constant 127.0 : f32
  %e8 = tensor.empty() : tensor<2x3xi8>
  %q = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<2x3xf32>) outs(%e8 : tensor<2x3xi8>) {
  ^bb0(%in: f32, %out: i8):
    %a = arith.divf %in, %s1 : f32
    %b = math.roundeven %a : f32
    %d = arith.maximumf %b, %lo : f32
    %e = arith.minimumf %d, %hi : f32
    %f = arith.fptosi %e : f32 to i8
    linalg.yield %f : i8
  } -> tensor<2x3xi8>
  func.return %dq, %q : tensor<2x3xf32>, tensor<2x3xi8>
}
// CHECK-LABEL: func.func @per_axis
// CHECK:      %[[S:.*]] = quant.scast %w : tensor<2x3xi8> to tensor<2x3x!quant.uniform<i8:f32:0, {2.500000e-01, 1.250000e-01:-1}>>
// CHECK-NEXT: quant.dcast %[[S]]
// CHECK:      %[[Q:.*]] = quant.qcast %x : tensor<2x3xf32> to tensor<2x3x!quant.uniform<i8<-127:127>:f32, 5.000000e-01>>
// CHECK-NEXT: quant.scast %[[Q]] : tensor<2x3x!quant.uniform<i8<-127:127>:f32, 5.000000e-01>> to tensor<2x3xi8>

// Negatives: math.round (half away from zero) is not QuantizeLinear's rounding; a scale that is
// not a constant; unsigned storage (fptoui / uitofp) -- all left as generics.
func.func @negative(%x: tensor<2x3xf32>, %sv: f32, %u: tensor<2x3xi8>) -> (tensor<2x3xi8>, tensor<2x3xi8>, tensor<2x3xf32>) {
  %s = arith.constant 0.5 : f32
  %lo = arith.constant -128.0 : f32
  %hi = arith.constant 127.0 : f32
  %e8 = tensor.empty() : tensor<2x3xi8>
  %r1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<2x3xf32>) outs(%e8 : tensor<2x3xi8>) {
  ^bb0(%in: f32, %out: i8):
    %a = arith.divf %in, %s : f32
    %b = math.round %a : f32
    %d = arith.maximumf %b, %lo : f32
    %e = arith.minimumf %d, %hi : f32
    %f = arith.fptosi %e : f32 to i8
    linalg.yield %f : i8
  } -> tensor<2x3xi8>
  %r2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<2x3xf32>) outs(%e8 : tensor<2x3xi8>) {
  ^bb0(%in: f32, %out: i8):
    %a = arith.divf %in, %sv : f32
    %b = math.roundeven %a : f32
    %d = arith.maximumf %b, %lo : f32
    %e = arith.minimumf %d, %hi : f32
    %f = arith.fptosi %e : f32 to i8
    linalg.yield %f : i8
  } -> tensor<2x3xi8>
  %ef = tensor.empty() : tensor<2x3xf32>
  %r3 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%u : tensor<2x3xi8>) outs(%ef : tensor<2x3xf32>) {
  ^bb0(%in: i8, %out: f32):
    %c = arith.uitofp %in : i8 to f32
    %d = arith.mulf %c, %s : f32
    linalg.yield %d : f32
  } -> tensor<2x3xf32>
  func.return %r1, %r2, %r3 : tensor<2x3xi8>, tensor<2x3xi8>, tensor<2x3xf32>
}
// CHECK-LABEL: func.func @negative
// CHECK-NOT:   quant.
// CHECK:       math.round %
// CHECK-NOT:   quant.
// CHECK:       arith.uitofp
// CHECK-NOT:   quant.
// CHECK:       func.return
