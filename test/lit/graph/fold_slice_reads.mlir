// RUN: m100-opt %s -p fold-slice-reads | filecheck %s

// The halves of x's last axis and a half of a table read broadcast (prefill RoPE): one view of
// each source with the cut axis split in blocks of the slice's size, the generic reading block 0
// or 1 of it (no slice left: the CVU op loads the halves through its maps).
// CHECK-LABEL: func.func @halves
// CHECK-NEXT:  %[[XV:[0-9]+]] = tensor.expand_shape %x {{\[}}[0 : i64], [1 : i64], [2 : i64, 3 : i64]] output_shape [4, 2, 2, 4] : tensor<4x2x8xf16> into tensor<4x2x2x4xf16>
// CHECK-NEXT:  %[[CV:[0-9]+]] = tensor.expand_shape %c {{\[}}[0 : i64], [1 : i64], [2 : i64, 3 : i64]] output_shape [4, 1, 2, 4] : tensor<4x1x8xf16> into tensor<4x1x2x4xf16>
// CHECK-NOT:   tensor.extract_slice
// CHECK:       linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, 0, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 1, d2)>, affine_map<(d0, d1, d2) -> (d0, 0, 1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[XV]], %[[XV]], %[[CV]] : tensor<4x2x2x4xf16>, tensor<4x2x2x4xf16>, tensor<4x1x2x4xf16>)
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#bc = affine_map<(d0, d1, d2) -> (d0, 0, d2)>

func.func @halves(%x: tensor<4x2x8xf16>, %c: tensor<4x1x8xf16>) -> tensor<4x2x4xf16> {
  %lo = tensor.extract_slice %x[0, 0, 0] [4, 2, 4] [1, 1, 1] : tensor<4x2x8xf16> to tensor<4x2x4xf16>
  %hi = tensor.extract_slice %x[0, 0, 4] [4, 2, 4] [1, 1, 1] : tensor<4x2x8xf16> to tensor<4x2x4xf16>
  %ch = tensor.extract_slice %c[0, 0, 4] [4, 1, 4] [1, 1, 1] : tensor<4x1x8xf16> to tensor<4x1x4xf16>
  %e = tensor.empty() : tensor<4x2x4xf16>
  %y = linalg.generic {indexing_maps = [#id, #id, #bc, #id], iterator_types = ["parallel", "parallel", "parallel"]} ins(%lo, %hi, %ch : tensor<4x2x4xf16>, tensor<4x2x4xf16>, tensor<4x1x4xf16>) outs(%e : tensor<4x2x4xf16>) {
  ^bb0(%a: f16, %b: f16, %s: f16, %o: f16):
    %m = arith.mulf %b, %s : f16
    %r = arith.subf %a, %m : f16
    linalg.yield %r : f16
  } -> tensor<4x2x4xf16>
  func.return %y : tensor<4x2x4xf16>
}


// Left alone: a slice that is not a whole block (offset 1, size 4 of 8) and one that the
// function also returns.
// CHECK-LABEL: func.func @kept
// CHECK-NEXT:  %odd = tensor.extract_slice %x[0, 1] [4, 4] [1, 1]
// CHECK-NEXT:  %ret = tensor.extract_slice %x[0, 4] [4, 4] [1, 1]
// CHECK:       ins(%odd, %ret : tensor<4x4xf32>, tensor<4x4xf32>)
func.func @kept(%x: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %odd = tensor.extract_slice %x[0, 1] [4, 4] [1, 1] : tensor<4x8xf32> to tensor<4x4xf32>
  %ret = tensor.extract_slice %x[0, 4] [4, 4] [1, 1] : tensor<4x8xf32> to tensor<4x4xf32>
  %e = tensor.empty() : tensor<4x4xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%odd, %ret : tensor<4x4xf32>, tensor<4x4xf32>) outs(%e : tensor<4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<4x4xf32>
  func.return %y, %ret : tensor<4x4xf32>, tensor<4x4xf32>
}


// A slice of a slice (ONNX Slice over the heads and the half of one group's heads imports as
// one slice per axis): one slice of the inner slice's source at the summed offsets, folded the
// same way (both cut axes split in blocks; no slice left).
// CHECK-LABEL: func.func @group_halves
// CHECK-NEXT:  %[[XV:[0-9]+]] = tensor.expand_shape %x {{\[}}[0 : i64], [1 : i64, 2 : i64], [3 : i64, 4 : i64]] output_shape [4, 2, 2, 2, 4] : tensor<4x4x8xf16> into tensor<4x2x2x2x4xf16>
// CHECK-NOT:   tensor.extract_slice
// CHECK:       linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, 1, d1, 0, d2)>, affine_map<(d0, d1, d2) -> (d0, 1, d1, 1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[XV]], %[[XV]] : tensor<4x2x2x2x4xf16>, tensor<4x2x2x2x4xf16>)
func.func @group_halves(%x: tensor<4x4x8xf16>) -> tensor<4x2x4xf16> {
  %g = tensor.extract_slice %x[0, 2, 0] [4, 2, 8] [1, 1, 1] : tensor<4x4x8xf16> to tensor<4x2x8xf16>
  %lo = tensor.extract_slice %g[0, 0, 0] [4, 2, 4] [1, 1, 1] : tensor<4x2x8xf16> to tensor<4x2x4xf16>
  %hi = tensor.extract_slice %g[0, 0, 4] [4, 2, 4] [1, 1, 1] : tensor<4x2x8xf16> to tensor<4x2x4xf16>
  %e = tensor.empty() : tensor<4x2x4xf16>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%lo, %hi : tensor<4x2x4xf16>, tensor<4x2x4xf16>) outs(%e : tensor<4x2x4xf16>) {
  ^bb0(%a: f16, %b: f16, %o: f16):
    %r = arith.subf %a, %b : f16
    linalg.yield %r : f16
  } -> tensor<4x2x4xf16>
  func.return %y : tensor<4x2x4xf16>
}


// The inner slice of a folded slice of a slice stays while something else reads it.
// CHECK-LABEL: func.func @inner_kept
// CHECK:       %g = tensor.extract_slice %x[0, 2] [4, 2] [1, 1]
// CHECK-NOT:   tensor.extract_slice
// CHECK:       func.return %y, %g
func.func @inner_kept(%x: tensor<4x4xf32>) -> (tensor<2x2xf32>, tensor<4x2xf32>) {
  %g = tensor.extract_slice %x[0, 2] [4, 2] [1, 1] : tensor<4x4xf32> to tensor<4x2xf32>
  %r = tensor.extract_slice %g[2, 0] [2, 2] [1, 1] : tensor<4x2xf32> to tensor<2x2xf32>
  %e = tensor.empty() : tensor<2x2xf32>
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<2x2xf32>) outs(%e : tensor<2x2xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %a : f32
    linalg.yield %s : f32
  } -> tensor<2x2xf32>
  func.return %y, %g : tensor<2x2xf32>, tensor<4x2xf32>
}
