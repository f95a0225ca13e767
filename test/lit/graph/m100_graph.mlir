// RUN: m100-opt %s -p m100-graph | filecheck %s
// RUN: m100-opt %s -p m100-graph --print-op-generic | filecheck %s --check-prefix=GEN
// RUN: m100-opt %s -p 'm100-graph{layout=false fuse=false}' | filecheck %s --check-prefix=NOLAYOUT
// Input: torch-mlir's generic-form output for an ONNX Conv(+bias) -> Relu -> Conv(+bias) -> Relu ->
// MaxPool net (torch-mlir-import-onnx + the two lowering pipelines + --mlir-print-op-generic).

#map = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)>
#map1 = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>
#map2 = affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map4 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 * 2 + d4, d3 * 2 + d5)>
#map5 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>
#map6 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>
"builtin.module"() ({
  "func.func"() <{function_type = (tensor<1x3x8x8xf32>) -> tensor<1x8x4x4xf32>, sym_name = "convnet"}> ({
  ^bb0(%arg0: tensor<1x3x8x8xf32>):
    %0 = "arith.constant"() <{value = 0.000000e+00 : f32}> : () -> f32
    %1 = "arith.constant"() <{value = 0xFF800000 : f32}> : () -> f32
    %2 = "arith.constant"() <{value = dense<"0x69F3B53E506127BF70B904BE9EB2483FC028BF3F0F29A1BF41C8C13FA545AC3F0604483FBA66873E7EBAA0BE6CA0BA3FBFE9FA3FF99BE63F5255A83F91FAB63E2FAA9ABFFAF391BBBE0E283F07E9A4BF704DCA3E1817DC3EDB2F323F2D9197BF576529BF7174DFBE12BC95BF9BA3DE3F03E8FDBEB56EA83E9F6384BE3DAFCA3F9701A93F6623223F4E060DC0551C553D0F062F3FD081803F282F1EBFAB37E93FE203A9BFE75929BF705F6F3F7EED483D332700402D0B413E021922BF0150C1BEADAA8BBF068BA3BFA662213F48C7143F1AB4A53FD82D41BFAC34D83F7B2493BE3686C93F1B96DDBEA2483CBFBDC77F3EA806843FB2DF243E38E515BF16ADABBF0465B3BFD3AF003FD55D7D3FD73C28BECA8489BFB17F5F3FF3E3A3BFA18B36BF07FB1E3F500210C03CD2C53E6AE614BF09CEDF3D67099BBD13F74E3E41B5313F852442BFBDE2B53F48E1393FDDFE573F431A953F629F493F8A15583FD3D09A3D87A0B6BF43490ABEE9FE44BF671CB6BFED53843E758C11BFA2D083BF0F8185BFF76D893EDAA3B73E4946A93F5AFA63BC015B853F6A7DB33FA138933F246117C082459D3FACE2AD3E8FF8D83E8511BE3E"> : tensor<4x3x3x3xf32>}> : () -> tensor<4x3x3x3xf32>
    %3 = "arith.constant"() <{value = dense<[0.382757157, 0.319414228, -0.358913302, -1.90163529]> : tensor<4xf32>}> : () -> tensor<4xf32>
    %4 = "arith.constant"() <{value = dense<"0xAF0EDFBD5FC14DBFCB428A3F34D993BE21F5AA3DC77F59BF27B802BF2BF53CBCC620BEBF66F3993E693CD9BDABC597BFA67C19C06257033FEF5C98BEA2AE07BF85D271BE4982E83F1AFC4BBD7165B13D6758BEBF02DCD23F7EE06A3F5291883F7B44433DE3A96A3FBEECBD3EF6F91C3F79D81BBE5CA8BCBF80B1833FC2ACF7BFF5B175BE586E51BE717C85BFA3F51C3F3B234DBE35ADDFBE5914053F2B02F4BE19CAB13FEBF1B33EC6DBF2BEADDDF8BF7564A7BF451D8B3F35464FBDC5F590BE1256D23FDA2DA4BFABED15BF03F7F1BE331A163F71DD29BFF4081DBF8975CDBFA4B63A3F265F4E3FA7E7F3BE9642273E6E75A5BF7E91F1BEB260B03FFFFC0A3EFFDC1340778549BF858D143FAE3248BE70D9103F454DECBBAEAA0FBF221C5EBFF239444016679EBDF81001C0B00A26BF03942D3F8D0000BF1A23AE3F964E803FA9FE1BBE4AC6F1BE529D80BF023133BFF48FBCBFA8299A3F159CCB3F22C9A0BF634197BF995EE2BF27BF76BF39CE46C0323692BF5301A63FFDFBB0BE08C65A3F275AFABE8C5DE13FCDFF4B3ECE95C3BEEA5A23402D21A6BE0C519CBF7FC14E3E7D111FBD537D883F33F06BBFEE014E3FB94D5A3F8EED2ABF7029273E29AC54BFB82116407E4234BF60F9E7BE616D88BFCF36B1BEAF8BC0BBD48D443FDA481CBF873B3EBE864FB5BFA2D053BF275F30407547853F680B48BFD52FABBFCCBF79BF08B1B1BCBA3E0E3D6B8E3EBF79AEA4BF8010B63F5143E73E61C7BFBE03F561BE4F8F07BF2BE83BC01CE0EC3D990789BFF65780BF3DE823BF20783B3FF4D395BF8996B7BF58CD233F521E413FAE7C75BF4BF90F3FD95095BEF8429A3E2567A1BF9238553F64049A3F3B17233F5EEF0E3FF56C71C04371853EB272D0BC199316BE8F6D21BF62C6623D0D01D33E3E0F87BED238EDBE93689D3FAB7C8DBF20DC833F540E353EFAE64DBF827894BEB3846BBF07D12C3F2E20B23E328A0EBF7D158DBF887A9A3E3917753F0823E9BD4D32D63EA186C0BEB9618A3D092395BEB18C963E3A40C1BFACE9243F6C736BBE7A9BB73E213DAEBE6206A43EBD4989BF3636983FC00DDABFC70585BF7252713E6A3EBB3F92668E3EB7DB7DBE5B69B6BF08DE43BE1DD5A2BC8E64D83F99431F3F51B9C3BFC0B60140BC3ECABE462461BFFDC6BC3FB2CC4BBD321CBCBE6F09603EA24A583F484B7E3FA206B0BF3ECEFF3F8565723FA426C2BEB19351BF331178BFD6ADFC3D65E425BFC8CE43BF5EAE4F3F92A8BA3E3E05CABEA7F73B3F4306AF3F75188CBF56711ABFAA4F713F7D0C383FBF23683E38CA943F864A8BBF6354BDBF6DD35DBF66F8FA3D58CC4BBFA874F9BE9C9979BF72D41EBFDE9C80BF8824BC3EFB7D4B3F03FDF5BE7C3D54BE8DBE14BF1400083F0363B63D550DCC3F6D388CBFED99B93ED752E33E9D8BB8BE7E62153F8321B8BF789A07401DC8ABBF7D786B3FF3808FBF2350933F1A01C5BE9D39223EFB7E5A3DDBE48C3FDEA1A4BE57E63DC0369342BF151F3C3E0C85E1BEFB12453F3CF6813F7E5117BEB3ACBEBF532CB13F7FA18A3F952F99BE33EE0640CE9FB2BE248D91BF499D1FBE75F6893FF3FC6FBFBEC1F93FBE8265BF0555743FE3610B3F22C11DBE"> : tensor<8x4x3x3xf32>}> : () -> tensor<8x4x3x3xf32>
    %5 = "arith.constant"() <{value = dense<[1.08053303, -1.49979877, 1.35757184, -0.0636840314, -0.542435229, 0.749174058, 1.05989897, 0.769795417]> : tensor<8xf32>}> : () -> tensor<8xf32>
    %6 = "tensor.pad"(%arg0) <{operandSegmentSizes = array<i32: 1, 0, 0>, static_high = array<i64: 0, 0, 1, 1>, static_low = array<i64: 0, 0, 1, 1>}> ({
    ^bb0(%arg24: index, %arg25: index, %arg26: index, %arg27: index):
      "tensor.yield"(%0) : (f32) -> ()
    }) : (tensor<1x3x8x8xf32>) -> tensor<1x3x10x10xf32>
    %7 = "tensor.empty"() : () -> tensor<1x4x8x8xf32>
    %8 = "linalg.broadcast"(%3, %7) <{dimensions = array<i64: 0, 2, 3>}> ({
    ^bb0(%arg22: f32, %arg23: f32):
      "linalg.yield"(%arg22) : (f32) -> ()
    }) : (tensor<4xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
    %9 = "linalg.conv_2d_nchw_fchw"(%6, %2, %8) <{dilations = dense<1> : vector<2xi64>, operandSegmentSizes = array<i32: 2, 1>, strides = dense<1> : vector<2xi64>}> ({
    ^bb0(%arg19: f32, %arg20: f32, %arg21: f32):
      %27 = "arith.mulf"(%arg19, %arg20) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %28 = "arith.addf"(%arg21, %27) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%28) : (f32) -> ()
    }) {linalg.memoized_indexing_maps = [#map, #map1, #map2]} : (tensor<1x3x10x10xf32>, tensor<4x3x3x3xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
    %10 = "linalg.generic"(%9, %7) <{indexing_maps = [#map3, #map3], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg17: f32, %arg18: f32):
      %25 = "arith.cmpf"(%arg17, %0) <{fastmath = #arith.fastmath<none>, predicate = 9 : i64}> : (f32, f32) -> i1
      %26 = "arith.select"(%25, %arg17, %0) : (i1, f32, f32) -> f32
      "linalg.yield"(%26) : (f32) -> ()
    }) : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
    %11 = "tensor.pad"(%10) <{operandSegmentSizes = array<i32: 1, 0, 0>, static_high = array<i64: 0, 0, 1, 1>, static_low = array<i64: 0, 0, 1, 1>}> ({
    ^bb0(%arg13: index, %arg14: index, %arg15: index, %arg16: index):
      "tensor.yield"(%0) : (f32) -> ()
    }) : (tensor<1x4x8x8xf32>) -> tensor<1x4x10x10xf32>
    %12 = "tensor.empty"() : () -> tensor<1x8x8x8xf32>
    %13 = "linalg.broadcast"(%5, %12) <{dimensions = array<i64: 0, 2, 3>}> ({
    ^bb0(%arg11: f32, %arg12: f32):
      "linalg.yield"(%arg11) : (f32) -> ()
    }) : (tensor<8xf32>, tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %14 = "linalg.conv_2d_nchw_fchw"(%11, %4, %13) <{dilations = dense<1> : vector<2xi64>, operandSegmentSizes = array<i32: 2, 1>, strides = dense<1> : vector<2xi64>}> ({
    ^bb0(%arg8: f32, %arg9: f32, %arg10: f32):
      %23 = "arith.mulf"(%arg8, %arg9) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      %24 = "arith.addf"(%arg10, %23) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%24) : (f32) -> ()
    }) {linalg.memoized_indexing_maps = [#map, #map1, #map2]} : (tensor<1x4x10x10xf32>, tensor<8x4x3x3xf32>, tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %15 = "linalg.generic"(%14, %12) <{indexing_maps = [#map3, #map3], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg6: f32, %arg7: f32):
      %21 = "arith.cmpf"(%arg6, %0) <{fastmath = #arith.fastmath<none>, predicate = 9 : i64}> : (f32, f32) -> i1
      %22 = "arith.select"(%21, %arg6, %0) : (i1, f32, f32) -> f32
      "linalg.yield"(%22) : (f32) -> ()
    }) : (tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
    %16 = "tensor.empty"() : () -> tensor<1x8x4x4xf32>
    %17 = "linalg.fill"(%1, %16) <{operandSegmentSizes = array<i32: 1, 1>}> ({
    ^bb0(%arg4: f32, %arg5: f32):
      "linalg.yield"(%arg4) : (f32) -> ()
    }) : (f32, tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
    %18 = "tensor.empty"() : () -> tensor<2x2xf32>
    %19 = "linalg.pooling_nchw_max"(%15, %18, %17) <{dilations = dense<1> : vector<2xi64>, operandSegmentSizes = array<i32: 2, 1>, strides = dense<2> : vector<2xi64>}> ({
    ^bb0(%arg1: f32, %arg2: f32, %arg3: f32):
      %20 = "arith.maximumf"(%arg3, %arg1) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "linalg.yield"(%20) : (f32) -> ()
    }) {linalg.memoized_indexing_maps = [#map4, #map5, #map6]} : (tensor<1x8x8x8xf32>, tensor<2x2xf32>, tensor<1x8x4x4xf32>) -> tensor<1x8x4x4xf32>
    "func.return"(%19) : (tensor<1x8x4x4xf32>) -> ()
  }) : () -> ()
}) : () -> ()


// CHECK-LABEL: func.func @convnet
// CHECK:       tensor.pad %arg0 low[0, 0, 1, 1] high[0, 0, 1, 1]
// CHECK:       } {m100.unit = "dtdu.copy"}
// CHECK:       linalg.broadcast {{.*}} dimensions = [0, 1, 2]
// CHECK:       linalg.conv_2d_nhwc_hwcf {m100.group = [[G1:[0-9]+]] : i64, m100.epilogue = ["bias", "relu"], m100.unit = "tcu.conv2d"
// CHECK:       linalg.generic {{.*}}attrs =  {m100.fused_into = [[G1]] : i64, m100.stage = "relu", m100.unit = "tcu.epilogue"}
// the padding between the convolutions is done in NHWC; no transpose between the convs
// CHECK-NOT:   linalg.transpose
// CHECK:       tensor.pad {{.*}} low[0, 1, 1, 0] high[0, 1, 1, 0]
// CHECK-NOT:   linalg.transpose
// CHECK:       linalg.conv_2d_nhwc_hwcf {m100.group = [[G2:[0-9]+]] : i64, m100.epilogue = ["bias", "relu"], m100.unit = "tcu.conv2d"
// CHECK:       linalg.generic {{.*}}attrs =  {m100.fused_into = [[G2]] : i64, m100.stage = "relu", m100.unit = "tcu.epilogue"}
// the max-pool runs NHWC as well: the only other transpose is the one back at the output
// CHECK-NOT:   linalg.transpose
// CHECK:       linalg.fill {m100.unit = "dtdu.fill"}
// CHECK:       linalg.pooling_nhwc_max {m100.unit = "cvu.pool"
// CHECK:       linalg.transpose {{.*}} permutation = [0, 3, 1, 2]
// CHECK-NOT:   linalg.conv_2d_nchw_fchw
// CHECK-NOT:   linalg.pooling_nchw

// the pretty form of transpose/broadcast hides attributes: check them in generic form
// GEN:         "linalg.transpose"(%{{.*}}) <{permutation = array<i64: 0, 2, 3, 1>}>
// GEN:         }) {m100.unit = "dtdu.copy"}
// GEN:         "linalg.broadcast"
// GEN:         }) {m100.fused_into = [[G:[0-9]+]] : i64, m100.stage = "bias", m100.unit = "tcu.epilogue"}
// GEN:         "linalg.conv_2d_nhwc_hwcf"
// GEN:         }) {m100.group = [[G]] : i64, m100.epilogue = ["bias", "relu"], m100.unit = "tcu.conv2d"}
// GEN:         "linalg.transpose"(%{{.*}}) <{permutation = array<i64: 0, 3, 1, 2>}>
// GEN:         }) {m100.unit = "dtdu.copy"}

// NOLAYOUT:    linalg.conv_2d_nchw_fchw {m100.unit = "tcu.conv2d"
// NOLAYOUT:    linalg.pooling_nchw_max
// NOLAYOUT-NOT: m100.fused_into
// NOLAYOUT-NOT: linalg.transpose
