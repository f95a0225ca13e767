// RUN: m100-opt %s -p twu-materialize | filecheck %s
// RUN: not m100-opt %S/Inputs/twu_unsplittable.mlir -p twu-materialize 2>&1 | filecheck %s --check-prefix=ERR
// RUN: not m100-opt %S/Inputs/twu_unallocated.mlir -p twu-materialize 2>&1 | filecheck %s --check-prefix=ALLOC
// ERR:   m100-opt: error: twu-materialize: 'tpb.matmul' (tpb 0): operand 'a' needs more than 6 TWU levels and this instruction can not be split (give the operand a simpler layout)
// ALLOC: m100-opt: error: twu-materialize: 'tpb.fill' (tpb 0): operand 'dst': buffer !hbsm.buffer<hbsm[0], 16xf32> has no offset (run hbsm-allocate first)

tpb.program "tiny" placed {
  %src = hbsm.alloc offset 0 : !hbsm.buffer<ddr, 4x8x16xf32>
  %a = hbsm.alloc offset 1024 : !hbsm.buffer<hbsm[0], 4x8x16xf32>
  %t = hbsm.alloc offset 4096 : !hbsm.buffer<hbsm[0], 16x32xf32>
  %d = hbsm.alloc offset 8192 : !hbsm.buffer<hbsm[1], 2x3x2x3x2x3x2xf32>
  %e = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 2x3x2x3x2x3x2xf32>
  %v = hbsm.view %t[2, 8] : !hbsm.buffer<hbsm[0], 16x32xf32> -> !hbsm.buffer<hbsm[0], 4x8xf32>
  %db = hbsm.alloc offset 16384 : !hbsm.buffer<hbsm[0], 64xf32, slots = 2>
  // A whole contiguous 3-D buffer folds into one level; the DDR source row band starts at row 1.
  // CHECK: tpb.dma engine 0 src(%src, #twu.walk<ddr, 0, f32, [(128, 1, 511)]>) dst(%a, #twu.walk<hbsm[0], 1024, f32, [(0, 1, 383)]>)
  %t0 = tpb.dma engine 0 src(%src, #twu.access<affine_map<(d0, d1, d2) -> (d0 + 1, d1, d2)>, [3, 8, 16]>) dst(%a, #twu.access<affine_map<(d0, d1, d2) -> (d0, d1, d2)>, [3, 8, 16]>)
  // A transposed read of plane 0 (16 x 8 of an 8 x 16 plane): two levels, the inner one strided by
  // the row length; the 4x32 destination is contiguous and folds.
  // CHECK: tpb.copy tpb 0 src(%a, #twu.walk<hbsm[0], 1024, f32, [(0, 1, 15), (0, 16, 112)]>) dst(%t, #twu.walk<hbsm[0], 4096, f32, [(0, 1, 127)]>)
  %t1 = tpb.copy tpb 0 src(%a, #twu.access<affine_map<(d0, d1) -> (0, d1, d0)>, [16, 8]>) dst(%t, #twu.access<affine_map<(d0, d1) -> (d0, d1)>, [4, 32]>) after(%t0)
  // A view adds its offsets: element (2, 8) of a 16x32 buffer is byte 4096 + (2 * 32 + 8) * 4.
  // CHECK: tpb.fill tpb 0 dst(%v, #twu.walk<hbsm[0], 4096, f32, [(72, 32, 168), (0, 1, 7)]>)
  %t2 = tpb.fill tpb 0 dst(%v) {value = 0.0}
  // A broadcast (stride-0 repeat) level.
  // CHECK: tpb.dma engine 1 src(%src, #twu.walk<ddr, 0, f32, [(0, 0, 4), (0, 1, 15)]>) dst(%db, #twu.walk<hbsm[0], 16384, f32, [(0, 1, 63)]>)
  %t3 = tpb.dma engine 1 src(%src, #twu.access<affine_map<(d0, d1) -> (0, 0, d1)>, [4, 16]>) dst(%db, #twu.access<affine_map<(d0, d1) -> (d0 * 16 + d1)>, [4, 16]>)
  // A 7-level transposing copy (nothing folds) exceeds the 6-level budget: it splits into two
  // copies along its outermost loop and its token becomes their join.
  // CHECK:      %[[C0:.*]] = tpb.copy tpb 0 src(%e, #twu.walk<hbsm[0], 0, f32, [(0, 2, 4), (0, 6, 6), (0, 12, 24), (0, 36, 36), (0, 72, 144), (0, 216, 216)]>) dst(%d, #twu.walk<hbsm[1], 8192, f32, [(0, 1, 215)]>)
  // CHECK-NEXT: %[[C1:.*]] = tpb.copy tpb 0 src(%e, #twu.walk<hbsm[0], 0, f32, [(1, 2, 5), (0, 6, 6), (0, 12, 24), (0, 36, 36), (0, 72, 144), (0, 216, 216)]>) dst(%d, #twu.walk<hbsm[1], 8192, f32, [(216, 1, 431)]>)
  // CHECK-NEXT: %[[J:.*]] = sync.join %[[C0]], %[[C1]]
  // CHECK-NEXT: tpb.fill tpb 1 dst(%d, #twu.walk<hbsm[1], 8192, f32, [(0, 1, 431)]>) after(%[[J]])
  %t4 = tpb.copy tpb 0 src(%e, #twu.access<affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d6, d5, d4, d3, d2, d1, d0)>, [2, 3, 2, 3, 2, 3, 2]>) dst(%d, #twu.access<affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3, d4, d5, d6)>, [2, 3, 2, 3, 2, 3, 2]>)
  %t5 = tpb.fill tpb 1 dst(%d) after(%t4) {value = 1.0}
}
