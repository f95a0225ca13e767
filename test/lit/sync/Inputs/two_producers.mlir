// Two DMAs and the DTDU of TPB 1 each produce data that the CVU of TPB 0 reads.
tpb.program "tiny" placed {
  %t0 = tpb.dma engine 0 src(#twu.walk<ddr, 0, f32, [(0, 1, 255)]>) dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 255)]>)
  %t1 = tpb.dma engine 1 src(#twu.walk<ddr, 1024, f32, [(0, 1, 255)]>) dst(#twu.walk<hbsm[0], 1024, f32, [(0, 1, 255)]>)
  %t2 = tpb.cvu tpb 0 in0(#twu.walk<hbsm[0], 0, f32, [(0, 1, 255)]>) in1(#twu.walk<hbsm[0], 1024, f32, [(0, 1, 255)]>) out(#twu.walk<hbsm[0], 2048, f32, [(0, 1, 255)]>) {in_shapes = [array<i64: 16, 16>, array<i64: 16, 16>], out_shape = array<i64: 16, 16>, stages = [#tpb.stage<add(in0, in1)>]}
}
