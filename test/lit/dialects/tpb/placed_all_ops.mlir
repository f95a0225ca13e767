// RUN: m100-opt %s | filecheck %s
// RUN: m100-opt %s | m100-opt | filecheck %s
// RUN: m100-opt %s --print-op-generic | m100-opt | filecheck %s
// Placed level: unallocated buffers, affine accesses (also mod/floordiv and slot-indexed), token edges, predicted cycles; every instruction kind.

tpb.program "tiny" placed {
  %x = hbsm.alloc : !hbsm.buffer<hbsm[1], 1x8x8x4xf16>
  %w = hbsm.alloc : !hbsm.buffer<hbsm[1], 3x3x1x4xf16>
  %y = hbsm.alloc : !hbsm.buffer<hbsm[1], 1x4x4x4xf32>
  %bias = hbsm.alloc : !hbsm.buffer<hbsm[1], 4xf32>
  %t0 = tpb.conv2d tpb 1 x(%x) w(%w) y(%y) bias(%bias) {n = 1, h = 8, width = 8, c = 4, f = 4, kh = 3, kw = 3, stride = array<i64: 2, 2>, pad = array<i64: 1, 1, 0, 0>, groups = 4, act = "silu", pred_start = 0, pred_end = 40}
  %r = hbsm.alloc : !hbsm.buffer<hbsm[1], 16x4xbf16>
  %t1 = tpb.cvu tpb 1 in0(%y, #twu.access<affine_map<(d0, d1) -> (0, (d0 floordiv 4), (d0 mod 4), d1)>, [16, 4]>) out(%r) after(%t0) {in_shapes = [array<i64: 16, 4>], out_shape = array<i64: 16, 4>, stages = [#tpb.stage<relu(in0)>]}
  %t2 = tpb.fill tpb 1 dst(%bias) {value = 0.0}
  %s = hbsm.alloc : !hbsm.buffer<hbsm[1], 64xi8, slots = 2>
  %s0 = hbsm.view %s[0] slot 0 : !hbsm.buffer<hbsm[1], 64xi8, slots = 2> -> !hbsm.buffer<hbsm[1], 64xi8>
  %s1 = hbsm.view %s[0] slot 1 : !hbsm.buffer<hbsm[1], 64xi8, slots = 2> -> !hbsm.buffer<hbsm[1], 64xi8>
  %t3 = tpb.broadcast tpb 1 src(%s0) dst(%s1) after(%t1, %t2) {tpb_mask = 3}
  %table = hbsm.alloc offset 0 : !hbsm.buffer<ddr, 100x16xf32>
  %idx = hbsm.alloc : !hbsm.buffer<hbsm[0], 4xi32>
  %rows = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x16xf32>
  %t4 = tpb.csu tpb 0 op0(%table) op1(%idx) op2(%rows) {routine = "gather", params = array<i64: 100, 16, 4>}
  %t5 = sync.join %t3, %t4
  %fb = hbsm.alloc : !hbsm.buffer<hbsm[1], 16xf32, slots = 2>
  %t7 = tpb.dma engine 0 src(%table, #twu.access<affine_map<(d0) -> (2, d0)>, [16]>) dst(%fb, #twu.access<affine_map<(d0) -> (1, d0)>, [16]>) {tpb_mask = 3}
  %t6 = tpb.dma engine 1 src(%table, #twu.access<affine_map<(d0) -> (7, d0)>, [16]>) dst(%rows, #twu.access<affine_map<(d0) -> (0, d0)>, [16]>) after(%t5) sync #sync.actions<blocks = 4>
}

// CHECK: builtin.module {
// CHECK-NEXT:   tpb.program "tiny" placed {
// CHECK-NEXT:     %x = hbsm.alloc : !hbsm.buffer<hbsm[1], 1x8x8x4xf16>
// CHECK-NEXT:     %w = hbsm.alloc : !hbsm.buffer<hbsm[1], 3x3x1x4xf16>
// CHECK-NEXT:     %y = hbsm.alloc : !hbsm.buffer<hbsm[1], 1x4x4x4xf32>
// CHECK-NEXT:     %bias = hbsm.alloc : !hbsm.buffer<hbsm[1], 4xf32>
// CHECK-NEXT:     %t0 = tpb.conv2d tpb 1 x(%x) w(%w) y(%y) bias(%bias) {n = 1, h = 8, width = 8, c = 4, f = 4, kh = 3, kw = 3, stride = array<i64: 2, 2>, pad = array<i64: 1, 1, 0, 0>, groups = 4, act = "silu", pred_start = 0, pred_end = 40}
// CHECK-NEXT:     %r = hbsm.alloc : !hbsm.buffer<hbsm[1], 16x4xbf16>
// CHECK-NEXT:     %t1 = tpb.cvu tpb 1 in0(%y, #twu.access<affine_map<(d0, d1) -> (0, (d0 floordiv 4), (d0 mod 4), d1)>, [16, 4]>) out(%r) after(%t0) {in_shapes = [array<i64: 16, 4>], out_shape = array<i64: 16, 4>, stages = [#tpb.stage<relu(in0)>]}
// CHECK-NEXT:     %t2 = tpb.fill tpb 1 dst(%bias) {value = 0.0}
// CHECK-NEXT:     %s = hbsm.alloc : !hbsm.buffer<hbsm[1], 64xi8, slots = 2>
// CHECK-NEXT:     %s0 = hbsm.view %s[0] slot 0 : !hbsm.buffer<hbsm[1], 64xi8, slots = 2> -> !hbsm.buffer<hbsm[1], 64xi8>
// CHECK-NEXT:     %s1 = hbsm.view %s[0] slot 1 : !hbsm.buffer<hbsm[1], 64xi8, slots = 2> -> !hbsm.buffer<hbsm[1], 64xi8>
// CHECK-NEXT:     %t3 = tpb.broadcast tpb 1 src(%s0) dst(%s1) after(%t1, %t2) {tpb_mask = 3}
// CHECK-NEXT:     %table = hbsm.alloc offset 0 : !hbsm.buffer<ddr, 100x16xf32>
// CHECK-NEXT:     %idx = hbsm.alloc : !hbsm.buffer<hbsm[0], 4xi32>
// CHECK-NEXT:     %rows = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x16xf32>
// CHECK-NEXT:     %t4 = tpb.csu tpb 0 op0(%table) op1(%idx) op2(%rows) {routine = "gather", params = array<i64: 100, 16, 4>}
// CHECK-NEXT:     %t5 = sync.join %t3, %t4
// CHECK-NEXT:     %fb = hbsm.alloc : !hbsm.buffer<hbsm[1], 16xf32, slots = 2>
// CHECK-NEXT:     %t7 = tpb.dma engine 0 src(%table, #twu.access<affine_map<(d0) -> (2, d0)>, [16]>) dst(%fb, #twu.access<affine_map<(d0) -> (1, d0)>, [16]>) {tpb_mask = 3}
// CHECK-NEXT:     %t6 = tpb.dma engine 1 src(%table, #twu.access<affine_map<(d0) -> (7, d0)>, [16]>) dst(%rows, #twu.access<affine_map<(d0) -> (0, d0)>, [16]>) after(%t5) sync #sync.actions<blocks = 4>
// CHECK-NEXT:   }
// CHECK-NEXT: }
