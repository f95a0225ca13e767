// RUN: m100-opt %s -p lower-quantized-add | filecheck %s
// A QDQ int8 Add of same-shape tensors becomes one generic on the int8 storage computing
// onnxruntime's QLinearAdd (MLAS AVX2): fma(a, ra, fma(b, rb, zc - fma(ra, za, rb * zb))),
// clamped, rounded half to even; a broadcasting Add keeps the ONNX definition (dcast, addf, qcast).

!aq = !quant.uniform<i8:f32, 5.000000e-01:3>
!bq = !quant.uniform<i8:f32, 2.500000e-01:-2>
!yq = !quant.uniform<i8:f32, 2.000000e+00:-128>

func.func @same_shape(%a: tensor<2x8x!aq>, %b: tensor<2x8x!bq>) -> tensor<2x8x!yq> {
  %af = quant.dcast %a : tensor<2x8x!aq> to tensor<2x8xf32>
  %bf = quant.dcast %b : tensor<2x8x!bq> to tensor<2x8xf32>
  %e = tensor.empty() : tensor<2x8xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%af, %bf : tensor<2x8xf32>, tensor<2x8xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<2x8xf32>
  %q = quant.qcast %s : tensor<2x8xf32> to tensor<2x8x!yq>
  func.return %q : tensor<2x8x!yq>
}
// ra = 0.5 / 2 = 0.25, rb = 0.25 / 2 = 0.125, fixed = -128 - (0.25 * 3 + 0.125 * -2) = -128.5
// CHECK-LABEL: func.func @same_shape
// CHECK-NOT:     quant.dcast
// CHECK-DAG:     %[[RA:.*]] = arith.constant 2.500000e-01 : f32
// CHECK-DAG:     %[[RB:.*]] = arith.constant 1.250000e-01 : f32
// CHECK-DAG:     %[[FX:.*]] = arith.constant -1.285000e+02 : f32
// CHECK:         linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<2x8xi8>, tensor<2x8xi8>) outs(%{{.*}} : tensor<2x8xi8>)
// CHECK-NEXT:    ^{{.*}}(%[[A:.*]]: i8, %[[B:.*]]: i8, %{{.*}}: i8):
// CHECK-NEXT:      %[[AF:.*]] = arith.sitofp %[[A]] : i8 to f32
// CHECK-NEXT:      %[[BF:.*]] = arith.sitofp %[[B]] : i8 to f32
// CHECK-NEXT:      %[[T:.*]] = math.fma %[[BF]], %[[RB]], %[[FX]] : f32
// CHECK-NEXT:      %[[U:.*]] = math.fma %[[AF]], %[[RA]], %[[T]] : f32
// CHECK-NEXT:      %[[LO:.*]] = arith.maximumf %[[U]], %{{.*}} : f32
// CHECK-NEXT:      %[[HI:.*]] = arith.minimumf %[[LO]], %{{.*}} : f32
// CHECK-NEXT:      %[[R:.*]] = math.roundeven %[[HI]] : f32
// CHECK-NEXT:      %[[O:.*]] = arith.fptosi %[[R]] : f32 to i8
// CHECK-NEXT:      linalg.yield %[[O]] : i8
// CHECK:         quant.scast %{{.*}} : tensor<2x8xi8> to tensor<2x8x!quant.uniform<i8:f32, 2.000000e+00:-128>>
// CHECK-NOT:     quant.qcast

func.func @broadcast(%a: tensor<2x8x!aq>, %b: tensor<8x!bq>) -> tensor<2x8x!yq> {
  %af = quant.dcast %a : tensor<2x8x!aq> to tensor<2x8xf32>
  %bf = quant.dcast %b : tensor<8x!bq> to tensor<8xf32>
  %e = tensor.empty() : tensor<2x8xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%af, %bf : tensor<2x8xf32>, tensor<8xf32>) outs(%e : tensor<2x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %r = arith.addf %x, %y : f32
    linalg.yield %r : f32
  } -> tensor<2x8xf32>
  %q = quant.qcast %s : tensor<2x8xf32> to tensor<2x8x!yq>
  func.return %q : tensor<2x8x!yq>
}
// CHECK-LABEL: func.func @broadcast
// CHECK:         quant.dcast
// CHECK:         arith.addf
// CHECK-NOT:     math.fma
// CHECK:         quant.qcast
