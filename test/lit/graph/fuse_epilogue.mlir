// RUN: m100-opt %s -p recognize-idioms,fuse-epilogue | filecheck %s
// RUN: m100-opt %s -p recognize-idioms,fuse-epilogue --print-op-generic | filecheck %s --check-prefix=GEN

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>

// MLP layer as torch-mlir emits it: matmul, bias add, ReLU (cmpf ugt + select).
func.func @mlp(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>) -> tensor<2x3xf32> {
  %zero = arith.constant 0.0 : f32
  %b = arith.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %e = tensor.empty() : tensor<2x3xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x3xf32>) -> tensor<2x3xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<2x4xf32>, tensor<4x3xf32>) outs(%z : tensor<2x3xf32>) -> tensor<2x3xf32>
  %bias = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%mm, %b : tensor<2x3xf32>, tensor<3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%in: f32, %bi: f32, %out: f32):
    %s = arith.addf %in, %bi : f32
    linalg.yield %s : f32
  } -> tensor<2x3xf32>
  %relu = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%bias : tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.cmpf ugt, %in, %zero : f32
    %s = arith.select %c, %in, %zero : f32
    linalg.yield %s : f32
  } -> tensor<2x3xf32>
  func.return %relu : tensor<2x3xf32>
}
// CHECK-LABEL: func.func @mlp
// CHECK:       %mm = linalg.matmul {m100.group = [[G:[0-9]+]] : i64, m100.epilogue = ["bias", "relu"]}
// CHECK:       %bias = linalg.generic {{.*}}attrs =  {m100.fused_into = [[G]] : i64, m100.stage = "bias"}
// CHECK:       %relu = linalg.generic {{.*}}attrs =  {m100.fused_into = [[G]] : i64, m100.stage = "relu"}

// NHWC conv whose init is the broadcast bias, then ReLU6 (clamp 0..6).
func.func @conv(%x: tensor<1x4x4x2xf32>, %w: tensor<1x1x2x3xf32>) -> tensor<1x4x4x3xf32> {
  %zero = arith.constant 0.0 : f32
  %six = arith.constant 6.0 : f32
  %b = arith.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %e = tensor.empty() : tensor<1x4x4x3xf32>
  %bb = linalg.broadcast ins(%b : tensor<3xf32>) outs(%e : tensor<1x4x4x3xf32>) dimensions = [0, 1, 2]
  %c = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x4x4x2xf32>, tensor<1x1x2x3xf32>) outs(%bb : tensor<1x4x4x3xf32>) -> tensor<1x4x4x3xf32>
  %r6 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c : tensor<1x4x4x3xf32>) outs(%e : tensor<1x4x4x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    %n = arith.minimumf %m, %six : f32
    linalg.yield %n : f32
  } -> tensor<1x4x4x3xf32>
  func.return %r6 : tensor<1x4x4x3xf32>
}
// CHECK-LABEL: func.func @conv
// CHECK:       %c = linalg.conv_2d_nhwc_hwcf {m100.group = [[C:[0-9]+]] : i64, m100.epilogue = ["bias", "clamp"], m100.clamp = [0.000000e+00 : f64, 6.000000e+00 : f64]
// CHECK:       %r6 = linalg.generic {{.*}}attrs =  {m100.fused_into = [[C]] : i64, m100.stage = "clamp"}
// GEN:         "linalg.broadcast"(%b, %e) <{dimensions = array<i64: 0, 1, 2>}> ({
// GEN:         }) {m100.fused_into = [[C:[0-9]+]] : i64, m100.stage = "bias"}
// GEN:         "linalg.conv_2d_nhwc_hwcf"(%x, %w, %bb)
// GEN:         }) {m100.group = [[C]] : i64, m100.epilogue = ["bias", "clamp"]

// batch_matmul then SiLU (an idiom group of two generics): the whole group is the activation.
func.func @silu(%x: tensor<1x2x4xf32>, %w: tensor<1x4x3xf32>) -> tensor<1x2x3xf32> {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %e = tensor.empty() : tensor<1x2x3xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x3xf32>) -> tensor<1x2x3xf32>
  %mm = linalg.batch_matmul ins(%x, %w : tensor<1x2x4xf32>, tensor<1x4x3xf32>) outs(%z : tensor<1x2x3xf32>) -> tensor<1x2x3xf32>
  %sg = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%mm : tensor<1x2x3xf32>) outs(%e : tensor<1x2x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.negf %in : f32
    %b = math.exp %a : f32
    %c = arith.addf %b, %one : f32
    %d = arith.divf %one, %c : f32
    linalg.yield %d : f32
  } -> tensor<1x2x3xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%mm, %sg : tensor<1x2x3xf32>, tensor<1x2x3xf32>) outs(%e : tensor<1x2x3xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %m = arith.mulf %in, %in2 : f32
    linalg.yield %m : f32
  } -> tensor<1x2x3xf32>
  func.return %y : tensor<1x2x3xf32>
}
// CHECK-LABEL: func.func @silu
// CHECK:       %mm = linalg.batch_matmul {m100.group = [[S:[0-9]+]] : i64, m100.epilogue = ["silu"]}
// CHECK:       %sg = linalg.generic {{.*}}m100.idiom = "silu", m100.fused_into = [[S]] : i64, m100.stage = "silu"}
// CHECK:       %y = linalg.generic {{.*}}m100.idiom = "silu", m100.idiom_root, m100.fused_into = [[S]] : i64, m100.stage = "silu"}

// Negative: a result also needed elsewhere is not fused; a second activation (tanh after a
// ReLU) and a bias after an activation do not fit the TCU pipeline and stay on the CVU.
func.func @negative(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %zero = arith.constant 0.0 : f32
  %b = arith.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %e = tensor.empty() : tensor<2x3xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<2x3xf32>) -> tensor<2x3xf32>
  %m1 = linalg.matmul ins(%x, %w : tensor<2x4xf32>, tensor<4x3xf32>) outs(%z : tensor<2x3xf32>) -> tensor<2x3xf32>
  %t1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%m1 : tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = math.tanh %in : f32
    linalg.yield %t : f32
  } -> tensor<2x3xf32>
  %m2 = linalg.matmul ins(%x, %w : tensor<2x4xf32>, tensor<4x3xf32>) outs(%z : tensor<2x3xf32>) -> tensor<2x3xf32>
  %r2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%m2 : tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<2x3xf32>
  %t2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%r2 : tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = math.tanh %in : f32
    linalg.yield %t : f32
  } -> tensor<2x3xf32>
  %b2 = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%t2, %b : tensor<2x3xf32>, tensor<3xf32>) outs(%e : tensor<2x3xf32>) {
  ^bb0(%in: f32, %bi: f32, %out: f32):
    %s = arith.addf %in, %bi : f32
    linalg.yield %s : f32
  } -> tensor<2x3xf32>
  func.return %m1, %t1, %b2 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}
// CHECK-LABEL: func.func @negative
// CHECK:       %m1 = linalg.matmul ins
// CHECK:       %t1 = linalg.generic
// CHECK-NOT:   m100.fused_into
// CHECK:       %m2 = linalg.matmul {m100.group = [[N:[0-9]+]] : i64, m100.epilogue = ["relu"]}
// CHECK:       %r2 = linalg.generic {{.*}}m100.fused_into = [[N]] : i64, m100.stage = "relu"}
// CHECK:       %t2 = linalg.generic
// CHECK-NOT:   m100.fused_into
// CHECK:       func.return

// int32 accumulator: bias (addi), ReLU (maxsi), then requantization to i8 -> all three stages.
func.func @int8_epilogue(%a: tensor<2x4xi32>, %b: tensor<4x3xi32>) -> tensor<2x3xi8> {
  %z = arith.constant 0 : i32
  %bias = arith.constant dense<[100, -200, 300]> : tensor<3xi32>
  %scale = arith.constant 0.01 : f32
  %lo = arith.constant -128.0 : f32
  %hi = arith.constant 127.0 : f32
  %e = tensor.empty() : tensor<2x3xi32>
  %f = linalg.fill ins(%z : i32) outs(%e : tensor<2x3xi32>) -> tensor<2x3xi32>
  %mm = linalg.matmul ins(%a, %b : tensor<2x4xi32>, tensor<4x3xi32>) outs(%f : tensor<2x3xi32>) -> tensor<2x3xi32>
  %bb = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%mm, %bias : tensor<2x3xi32>, tensor<3xi32>) outs(%e : tensor<2x3xi32>) {
  ^bb0(%in: i32, %bi: i32, %out: i32):
    %s = arith.addi %in, %bi : i32
    linalg.yield %s : i32
  } -> tensor<2x3xi32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%bb : tensor<2x3xi32>) outs(%e : tensor<2x3xi32>) {
  ^bb0(%in: i32, %out: i32):
    %m = arith.maxsi %in, %z : i32
    linalg.yield %m : i32
  } -> tensor<2x3xi32>
  %e8 = tensor.empty() : tensor<2x3xi8>
  %q = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<2x3xi32>) outs(%e8 : tensor<2x3xi8>) {
  ^bb0(%in: i32, %out: i8):
    %x = arith.sitofp %in : i32 to f32
    %y = arith.mulf %x, %scale : f32
    %t = math.roundeven %y : f32
    %c1 = arith.maximumf %t, %lo : f32
    %c2 = arith.minimumf %c1, %hi : f32
    %o = arith.fptosi %c2 : f32 to i8
    linalg.yield %o : i8
  } -> tensor<2x3xi8>
  func.return %q : tensor<2x3xi8>
}
// CHECK-LABEL: func.func @int8_epilogue
// CHECK:       %mm = linalg.matmul {m100.group = [[Q:[0-9]+]] : i64, m100.epilogue = ["bias", "relu", "requant"], m100.requant_scale = [0.0099999997764825821 : f64], m100.requant_zp = 0 : i64, m100.requant_range = [-128 : i64, 127 : i64]}
// CHECK:       %bb = linalg.generic {{.*}}m100.fused_into = [[Q]] : i64, m100.stage = "bias"}
// CHECK:       %r = linalg.generic {{.*}}m100.fused_into = [[Q]] : i64, m100.stage = "relu"}
// CHECK:       %q = linalg.generic {{.*}}m100.fused_into = [[Q]] : i64, m100.stage = "requant"}

// Negative: quantizing a float accumulator is not a TCU requantization (isa: integer only).
func.func @float_quant(%a: tensor<2x4xf32>, %b: tensor<4x3xf32>) -> tensor<2x3xi8> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x3xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x3xf32>) -> tensor<2x3xf32>
  %mm = linalg.matmul ins(%a, %b : tensor<2x4xf32>, tensor<4x3xf32>) outs(%f : tensor<2x3xf32>) -> tensor<2x3xf32>
  %e8 = tensor.empty() : tensor<2x3xi8>
  %q = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%mm : tensor<2x3xf32>) outs(%e8 : tensor<2x3xi8>) {
  ^bb0(%in: f32, %out: i8):
    %o = arith.fptosi %in : f32 to i8
    linalg.yield %o : i8
  } -> tensor<2x3xi8>
  func.return %q : tensor<2x3xi8>
}
// CHECK-LABEL: func.func @float_quant
// CHECK-NOT:   m100.
// CHECK:       func.return

// Negative: an int32 -> i8 op that is not exactly a requantization (math.round rounds half away
// from zero; the TCU and ONNX round half to even) is not fused: it stays a separate op.
func.func @not_requant(%a: tensor<2x4xi32>, %b: tensor<4x3xi32>) -> tensor<2x3xi8> {
  %z = arith.constant 0 : i32
  %scale = arith.constant 0.01 : f32
  %lo = arith.constant -128.0 : f32
  %hi = arith.constant 127.0 : f32
  %e = tensor.empty() : tensor<2x3xi32>
  %f = linalg.fill ins(%z : i32) outs(%e : tensor<2x3xi32>) -> tensor<2x3xi32>
  %mm = linalg.matmul ins(%a, %b : tensor<2x4xi32>, tensor<4x3xi32>) outs(%f : tensor<2x3xi32>) -> tensor<2x3xi32>
  %e8 = tensor.empty() : tensor<2x3xi8>
  %q = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%mm : tensor<2x3xi32>) outs(%e8 : tensor<2x3xi8>) {
  ^bb0(%in: i32, %out: i8):
    %x = arith.sitofp %in : i32 to f32
    %y = arith.mulf %x, %scale : f32
    %t = math.round %y : f32
    %c1 = arith.maximumf %t, %lo : f32
    %c2 = arith.minimumf %c1, %hi : f32
    %o = arith.fptosi %c2 : f32 to i8
    linalg.yield %o : i8
  } -> tensor<2x3xi8>
  func.return %q : tensor<2x3xi8>
}
// CHECK-LABEL: func.func @not_requant
// CHECK-NOT:   m100.
// CHECK:       func.return

// Negative (issue 10): an addend that is a runtime value is not a bias, even when it varies only
// along the output channel (a bias graph input, or a [1, N] residual when M = 1): the TCU reads
// a fused bias from a constant buffer, so these adds stay on the CVU and the ReLU is not fused.
func.func @runtime_bias(%x: tensor<1x4xf32>, %w: tensor<4x3xf32>, %b: tensor<3xf32>, %r: tensor<1x3xf32>) -> (tensor<1x3xf32>, tensor<1x3xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x3xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x3xf32>) -> tensor<1x3xf32>
  %m1 = linalg.matmul ins(%x, %w : tensor<1x4xf32>, tensor<4x3xf32>) outs(%z : tensor<1x3xf32>) -> tensor<1x3xf32>
  %b1 = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]} ins(%m1, %b : tensor<1x3xf32>, tensor<3xf32>) outs(%e : tensor<1x3xf32>) {
  ^bb0(%in: f32, %bi: f32, %out: f32):
    %s = arith.addf %in, %bi : f32
    linalg.yield %s : f32
  } -> tensor<1x3xf32>
  %r1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%b1 : tensor<1x3xf32>) outs(%e : tensor<1x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x3xf32>
  %m2 = linalg.matmul ins(%x, %w : tensor<1x4xf32>, tensor<4x3xf32>) outs(%z : tensor<1x3xf32>) -> tensor<1x3xf32>
  %res = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%r, %m2 : tensor<1x3xf32>, tensor<1x3xf32>) outs(%e : tensor<1x3xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %s = arith.addf %in, %in2 : f32
    linalg.yield %s : f32
  } -> tensor<1x3xf32>
  func.return %r1, %res : tensor<1x3xf32>, tensor<1x3xf32>
}
// CHECK-LABEL: func.func @runtime_bias
// CHECK-NOT:   m100.
// CHECK:       func.return
