// RUN: m100-opt %s -p classify-ops | filecheck %s
// RUN: m100-opt %s -p classify-ops --print-op-generic | filecheck %s --check-prefix=GEN

#id = affine_map<(d0, d1) -> (d0, d1)>

func.func @units(%x: tensor<4x6xf32>, %img: tensor<1x2x4x4xf32>, %w: tensor<3x2x1x1xf32>, %idx: tensor<2xi64>) -> (tensor<4x4xf32>, tensor<1x3x4x4xf32>, tensor<1x2x2x2xf32>, tensor<4xi64>, tensor<2x6xf32>, tensor<4x1xf32>, tensor<6x4xf32>, tensor<4x2xf32>, tensor<2x4x6xf32>, tensor<8x6xf32>, tensor<1x2x6x6xf32>, tensor<24xf32>) {
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %c0 = arith.constant 0 : i64
  %e44 = tensor.empty() : tensor<4x4xf32>
  %z44 = linalg.fill ins(%zero : f32) outs(%e44 : tensor<4x4xf32>) -> tensor<4x4xf32>
  %e64 = tensor.empty() : tensor<6x4xf32>
  %xt = linalg.transpose ins(%x : tensor<4x6xf32>) outs(%e64 : tensor<6x4xf32>) permutation = [1, 0]
  %mm = linalg.matmul ins(%x, %xt : tensor<4x6xf32>, tensor<6x4xf32>) outs(%z44 : tensor<4x4xf32>) -> tensor<4x4xf32>
  %ec = tensor.empty() : tensor<1x3x4x4xf32>
  %conv = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%img, %w : tensor<1x2x4x4xf32>, tensor<3x2x1x1xf32>) outs(%ec : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  %ep = tensor.empty() : tensor<1x2x2x2xf32>
  %fp = linalg.fill ins(%ninf : f32) outs(%ep : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %win = tensor.empty() : tensor<2x2xf32>
  %pool = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%img, %win : tensor<1x2x4x4xf32>, tensor<2x2xf32>) outs(%fp : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  // arg-max (torch-mlir's ArgMax): max and index; the index is used
  %ei = tensor.empty() : tensor<4xi64>
  %fi = linalg.fill ins(%c0 : i64) outs(%ei : tensor<4xi64>) -> tensor<4xi64>
  %ef = tensor.empty() : tensor<4xf32>
  %ff = linalg.fill ins(%ninf : f32) outs(%ef : tensor<4xf32>) -> tensor<4xf32>
  %am:2 = linalg.generic {indexing_maps = [#id, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x6xf32>) outs(%ff, %fi : tensor<4xf32>, tensor<4xi64>) {
  ^bb0(%in: f32, %out: f32, %oi: i64):
    %i = linalg.index 1 : index
    %ii = arith.index_cast %i : index to i64
    %m = arith.maximumf %in, %out : f32
    %c = arith.cmpf ogt, %in, %out : f32
    %s = arith.select %c, %ii, %oi : i64
    linalg.yield %m, %s : f32, i64
  } -> (tensor<4xf32>, tensor<4xi64>)
  // gather (torch-mlir's Gather): tensor.extract in the body
  %eg = tensor.empty() : tensor<2x6xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, #id], iterator_types = ["parallel", "parallel"]} ins(%idx : tensor<2xi64>) outs(%eg : tensor<2x6xf32>) {
  ^bb0(%in: i64, %out: f32):
    %r = arith.index_cast %in : i64 to index
    %c = linalg.index 1 : index
    %v = tensor.extract %x[%r, %c] : tensor<4x6xf32>
    linalg.yield %v : f32
  } -> tensor<2x6xf32>
  // sum reduction
  %e41 = tensor.empty() : tensor<4x1xf32>
  %z41 = linalg.fill ins(%zero : f32) outs(%e41 : tensor<4x1xf32>) -> tensor<4x1xf32>
  %sum = linalg.generic {indexing_maps = [#id, affine_map<(d0, d1) -> (d0, 0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x6xf32>) outs(%z41 : tensor<4x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  } -> tensor<4x1xf32>
  // elementwise
  %ex = tensor.empty() : tensor<6x4xf32>
  %ew = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%xt : tensor<6x4xf32>) outs(%ex : tensor<6x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %a = math.exp %in : f32
    linalg.yield %a : f32
  } -> tensor<6x4xf32>
  // data movement
  %sl = tensor.extract_slice %x[0, 0] [4, 2] [1, 1] : tensor<4x6xf32> to tensor<4x2xf32>
  %eb = tensor.empty() : tensor<2x4x6xf32>
  %bc = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<4x6xf32>) outs(%eb : tensor<2x4x6xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x4x6xf32>
  %cat = tensor.concat dim(0) %x, %x : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  %pad = tensor.pad %img low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %zero : f32
  } : tensor<1x2x4x4xf32> to tensor<1x2x6x6xf32>
  %flat = tensor.collapse_shape %x [[0, 1]] : tensor<4x6xf32> into tensor<24xf32>
  func.return %mm, %conv, %pool, %am#1, %g, %sum, %ew, %sl, %bc, %cat, %pad, %flat : tensor<4x4xf32>, tensor<1x3x4x4xf32>, tensor<1x2x2x2xf32>, tensor<4xi64>, tensor<2x6xf32>, tensor<4x1xf32>, tensor<6x4xf32>, tensor<4x2xf32>, tensor<2x4x6xf32>, tensor<8x6xf32>, tensor<1x2x6x6xf32>, tensor<24xf32>
}
// CHECK-LABEL: func.func @units
// CHECK-NOT:   arith.constant {{.*}}m100.unit
// CHECK:       %z44 = linalg.fill {m100.unit = "dtdu.fill"}
// CHECK:       %mm = linalg.matmul {m100.unit = "tcu.matmul"}
// CHECK:       %conv = linalg.conv_2d_nchw_fchw {m100.unit = "tcu.conv2d"
// CHECK:       %pool = linalg.pooling_nchw_max {m100.unit = "cvu.pool"
// CHECK:       %am, %am_1 = linalg.generic {{.*}}attrs =  {m100.unit = "csu.argmax"}
// CHECK:       %g = linalg.generic {{.*}}attrs =  {m100.unit = "csu.gather"}
// CHECK:       %sum = linalg.generic {{.*}}attrs =  {m100.unit = "cvu.reduction"}
// CHECK:       %ew = linalg.generic {{.*}}attrs =  {m100.unit = "cvu.elementwise"}
// CHECK:       %sl = tensor.extract_slice {{.*}}{m100.unit = "dtdu.copy"}
// CHECK:       %bc = linalg.generic {{.*}}attrs =  {m100.unit = "dtdu.copy"}
// CHECK:       %cat = tensor.concat {{.*}}{m100.unit = "dtdu.copy"}
// CHECK:       %pad = tensor.pad
// CHECK:       } {m100.unit = "dtdu.copy"} : tensor<1x2x4x4xf32> to tensor<1x2x6x6xf32>
// CHECK:       %flat = tensor.collapse_shape {{.*}}{m100.unit = "dtdu.copy"}
// the pretty form of linalg.transpose prints no attributes: check it in generic form
// GEN:         %xt = "linalg.transpose"
// GEN:         }) {m100.unit = "dtdu.copy"} : (tensor<4x6xf32>, tensor<6x4xf32>) -> tensor<6x4xf32>

// Constants, tensor.empty and func.return get no unit (no unit runs them).
func.func @no_unit() -> tensor<2xf32> {
  %c = arith.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %e = tensor.empty() : tensor<2xf32>
  func.return %c : tensor<2xf32>
}
// CHECK-LABEL: func.func @no_unit
// CHECK-NOT:   m100.unit
// CHECK:       func.return
