// A matmul operand read through a 7-level transposing access: a TCU instruction can not be split.
tpb.program "tiny" placed {
  %a = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 2x3x2x3x2x3x2xf32>
  %b = hbsm.alloc offset 4096 : !hbsm.buffer<hbsm[0], 2x4xf32>
  %c = hbsm.alloc offset 8192 : !hbsm.buffer<hbsm[0], 216x4xf32>
  %t = tpb.matmul tpb 0 a(%a, #twu.access<affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d6, d5, d4, d3, d2, d1, d0)>, [2, 3, 2, 3, 2, 3, 2]>) b(%b) c(%c) {m = 216, n = 4, k = 2}
}
