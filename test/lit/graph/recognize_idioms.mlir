// RUN: m100-opt %s -p recognize-idioms | filecheck %s
// Inputs: torch-mlir's decompositions (ONNX Softmax / LayerNormalization, LLaMA's RMSNorm, Gelu,
// SiLU), as torch-mlir-opt prints them.

  func.func @softmax(%arg0: tensor<2x3x10xf32>) -> tensor<2x3x10xf32> {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0xFF800000 : f32
    %cst_0 = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<2x3xi64>
    %1 = linalg.fill ins(%c0_i64 : i64) outs(%0 : tensor<2x3xi64>) -> tensor<2x3xi64>
    %2 = tensor.empty() : tensor<2x3xf32>
    %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<2x3xf32>) -> tensor<2x3xf32>
    %4:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg0 : tensor<2x3x10xf32>) outs(%3, %1 : tensor<2x3xf32>, tensor<2x3xi64>) {
    ^bb0(%in: f32, %out: f32, %out_1: i64):
      %12 = linalg.index 2 : index
      %13 = arith.index_cast %12 : index to i64
      %14 = arith.maximumf %in, %out : f32
      %15 = arith.cmpf ogt, %in, %out : f32
      %16 = arith.select %15, %13, %out_1 : i64
      linalg.yield %14, %16 : f32, i64
    } -> (tensor<2x3xf32>, tensor<2x3xi64>)
    %expanded = tensor.expand_shape %4#0 [[0], [1, 2]] output_shape [2, 3, 1] : tensor<2x3xf32> into tensor<2x3x1xf32>
    %5 = tensor.empty() : tensor<2x3x10xf32>
    %6 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0, %expanded : tensor<2x3x10xf32>, tensor<2x3x1xf32>) outs(%5 : tensor<2x3x10xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %12 = arith.subf %in, %in_1 : f32
      linalg.yield %12 : f32
    } -> tensor<2x3x10xf32>
    %7 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6 : tensor<2x3x10xf32>) outs(%5 : tensor<2x3x10xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = math.exp %in : f32
      linalg.yield %12 : f32
    } -> tensor<2x3x10xf32>
    %8 = tensor.empty() : tensor<2x3x1xf32>
    %9 = linalg.fill ins(%cst_0 : f32) outs(%8 : tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
    %10 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%7 : tensor<2x3x10xf32>) outs(%9 : tensor<2x3x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = arith.addf %in, %out : f32
      linalg.yield %12 : f32
    } -> tensor<2x3x1xf32>
    %11 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%7, %10 : tensor<2x3x10xf32>, tensor<2x3x1xf32>) outs(%5 : tensor<2x3x10xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %12 = arith.divf %in, %in_1 : f32
      linalg.yield %12 : f32
    } -> tensor<2x3x10xf32>
    return %11 : tensor<2x3x10xf32>
  }
// CHECK-LABEL: func.func @softmax
// CHECK-COUNT-2: linalg.fill {m100.group = [[G:[0-9]+]] : i64, m100.idiom = "softmax"}
// CHECK:       linalg.generic {{.*}}m100.group = [[G]] : i64, m100.idiom = "softmax"
// CHECK:       tensor.expand_shape {{.*}}m100.group = [[G]] : i64, m100.idiom = "softmax"
// CHECK:       math.exp
// CHECK:       linalg.generic {{.*}}m100.group = [[G]] : i64, m100.idiom = "softmax", m100.idiom_axis = 2 : i64, m100.idiom_root

  func.func @layernorm(%arg0: tensor<2x4x16xf32>) -> tensor<2x4x16xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant dense<0.5> : tensor<16xf32>
    %cst_1 = arith.constant dense<0.5> : tensor<16xf32>
    %cst_2 = arith.constant 1.600000e+01 : f32
    %cst_3 = arith.constant 9.99999974E-6 : f32
    %0 = tensor.empty() : tensor<2x4x1xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
    %2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg0 : tensor<2x4x16xf32>) outs(%1 : tensor<2x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.addf %in, %out : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x1xf32>
    %3 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%2 : tensor<2x4x1xf32>) outs(%0 : tensor<2x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.divf %in, %cst_2 : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x1xf32>
    %4 = tensor.empty() : tensor<2x4x16xf32>
    %collapsed = tensor.collapse_shape %3 [[0], [1, 2]] : tensor<2x4x1xf32> into tensor<2x4xf32>
    %5 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%collapsed : tensor<2x4xf32>) outs(%4 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<2x4x16xf32>
    %6 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0, %5 : tensor<2x4x16xf32>, tensor<2x4x16xf32>) outs(%4 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32):
      %16 = arith.subf %in, %in_5 : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x16xf32>
    %7 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6, %6 : tensor<2x4x16xf32>, tensor<2x4x16xf32>) outs(%4 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32):
      %16 = arith.mulf %in, %in_5 : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x16xf32>
    %8 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%7 : tensor<2x4x16xf32>) outs(%1 : tensor<2x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.addf %in, %out : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x1xf32>
    %9 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%8 : tensor<2x4x1xf32>) outs(%0 : tensor<2x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.divf %in, %cst_2 : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x1xf32>
    %10 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%9 : tensor<2x4x1xf32>) outs(%0 : tensor<2x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.addf %in, %cst_3 : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x1xf32>
    %11 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%10 : tensor<2x4x1xf32>) outs(%0 : tensor<2x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = math.rsqrt %in : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x1xf32>
    %collapsed_4 = tensor.collapse_shape %11 [[0], [1, 2]] : tensor<2x4x1xf32> into tensor<2x4xf32>
    %12 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%collapsed_4 : tensor<2x4xf32>) outs(%4 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<2x4x16xf32>
    %13 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6, %12 : tensor<2x4x16xf32>, tensor<2x4x16xf32>) outs(%4 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32):
      %16 = arith.mulf %in, %in_5 : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x16xf32>
    %14 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%13, %cst_0 : tensor<2x4x16xf32>, tensor<16xf32>) outs(%4 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32):
      %16 = arith.mulf %in, %in_5 : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x16xf32>
    %15 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%14, %cst_1 : tensor<2x4x16xf32>, tensor<16xf32>) outs(%4 : tensor<2x4x16xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32):
      %16 = arith.addf %in, %in_5 : f32
      linalg.yield %16 : f32
    } -> tensor<2x4x16xf32>
    return %15 : tensor<2x4x16xf32>
  }
// CHECK-LABEL: func.func @layernorm
// CHECK:       linalg.fill {m100.group = [[L:[0-9]+]] : i64, m100.idiom = "layernorm"}
// CHECK:       math.rsqrt
// the scale and shift generics are part of the group; the shift produces the result
// CHECK:       arith.mulf
// CHECK:       linalg.generic {{.*}}m100.group = [[L]] : i64, m100.idiom = "layernorm", m100.idiom_axis = 2 : i64, m100.idiom_eps = 9.99{{[0-9]*}}e-06 : f64, m100.idiom_root
// CHECK-NEXT:  ^{{.*}}:
// CHECK-NEXT:    arith.addf

// LLaMA RMSNorm: x * 1/sqrt(mean(x^2) + eps) (the reciprocal guarded by cf.assert)
func.func @rmsnorm(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
  %c2 = arith.constant 2 : i64
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %n = arith.constant 8.0 : f32
  %eps = arith.constant dense<1.0e-06> : tensor<f32>
  %e = tensor.empty() : tensor<1x4x8xf32>
  %sq = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<1x4x8xf32>) outs(%e : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %p = math.fpowi %in, %c2 : f32, i64
    linalg.yield %p : f32
  } -> tensor<1x4x8xf32>
  %e1 = tensor.empty() : tensor<1x4x1xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1x4x1xf32>) -> tensor<1x4x1xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%sq : tensor<1x4x8xf32>) outs(%z : tensor<1x4x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  } -> tensor<1x4x1xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<1x4x1xf32>) outs(%e1 : tensor<1x4x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %d = arith.divf %in, %n : f32
    linalg.yield %d : f32
  } -> tensor<1x4x1xf32>
  %v = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> ()>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%m, %eps : tensor<1x4x1xf32>, tensor<f32>) outs(%e1 : tensor<1x4x1xf32>) {
  ^bb0(%in: f32, %ep: f32, %out: f32):
    %a = arith.addf %in, %ep : f32
    linalg.yield %a : f32
  } -> tensor<1x4x1xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<1x4x1xf32>) outs(%e1 : tensor<1x4x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %q = math.sqrt %in : f32
    linalg.yield %q : f32
  } -> tensor<1x4x1xf32>
  %rc = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%r : tensor<1x4x1xf32>) outs(%e1 : tensor<1x4x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %nz = arith.cmpf one, %in, %zero : f32
    cf.assert %nz, "unimplemented: tensor with zero element"
    %q = arith.divf %one, %in : f32
    linalg.yield %q : f32
  } -> tensor<1x4x1xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %rc : tensor<1x4x8xf32>, tensor<1x4x1xf32>) outs(%e : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %p = arith.mulf %in, %in2 : f32
    linalg.yield %p : f32
  } -> tensor<1x4x8xf32>
  func.return %y : tensor<1x4x8xf32>
}
// CHECK-LABEL: func.func @rmsnorm
// CHECK:       %sq = linalg.generic {{.*}}m100.group = [[R:[0-9]+]] : i64, m100.idiom = "rmsnorm"
// CHECK:       %z = linalg.fill {m100.group = [[R]] : i64, m100.idiom = "rmsnorm"}
// CHECK:       %rc = linalg.generic {{.*}}m100.group = [[R]] : i64, m100.idiom = "rmsnorm"
// CHECK:       %y = linalg.generic {{.*}}m100.group = [[R]] : i64, m100.idiom = "rmsnorm", m100.idiom_axis = 2 : i64, m100.idiom_eps = 9.99{{[0-9]*}}e-07 : f64, m100.idiom_root

// GELU (erf form, one generic) and SiLU (sigmoid, then x * sigmoid(x): two generics)
func.func @acts(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %one = arith.constant 1.0 : f32
  %half = arith.constant 0.5 : f32
  %sqrt2 = arith.constant 1.41421354 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.divf %in, %sqrt2 : f32
    %b = math.erf %a : f32
    %c = arith.addf %b, %one : f32
    %d = arith.mulf %c, %half : f32
    %f = arith.mulf %in, %d : f32
    linalg.yield %f : f32
  } -> tensor<4x8xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.negf %in : f32
    %b = math.exp %a : f32
    %c = arith.addf %b, %one : f32
    %d = arith.divf %one, %c : f32
    linalg.yield %d : f32
  } -> tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x, %s : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %m = arith.mulf %in, %in2 : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  func.return %g, %y : tensor<4x8xf32>, tensor<4x8xf32>
}
// CHECK-LABEL: func.func @acts
// CHECK:       %g = linalg.generic {{.*}}m100.group = {{[0-9]+}} : i64, m100.idiom = "gelu", m100.idiom_root
// CHECK:       %s = linalg.generic {{.*}}m100.group = [[S:[0-9]+]] : i64, m100.idiom = "silu"}
// CHECK:       %y = linalg.generic {{.*}}m100.group = [[S]] : i64, m100.idiom = "silu", m100.idiom_root

// Negative: x / sum(x) is not a softmax (no exp); a sigmoid whose value is also returned can not
// be folded into a silu group, and a sigmoid alone is no idiom.
func.func @negative(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %e1 = tensor.empty() : tensor<2x1xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e1 : tensor<2x1xf32>) -> tensor<2x1xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, 0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<2x8xf32>) outs(%z : tensor<2x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  } -> tensor<2x1xf32>
  %e = tensor.empty() : tensor<2x8xf32>
  %n = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, 0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x, %s : tensor<2x8xf32>, tensor<2x1xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %d = arith.divf %in, %in2 : f32
    linalg.yield %d : f32
  } -> tensor<2x8xf32>
  %sg = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<2x8xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.negf %in : f32
    %b = math.exp %a : f32
    %c = arith.addf %b, %one : f32
    %d = arith.divf %one, %c : f32
    linalg.yield %d : f32
  } -> tensor<2x8xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x, %sg : tensor<2x8xf32>, tensor<2x8xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %m = arith.mulf %in, %in2 : f32
    linalg.yield %m : f32
  } -> tensor<2x8xf32>
  func.return %n, %sg, %y : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}
// CHECK-LABEL: func.func @negative
// CHECK-NOT:   m100.idiom
// CHECK:       func.return
