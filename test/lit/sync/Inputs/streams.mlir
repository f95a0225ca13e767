tpb.program "tiny" placed {
  tpb.stream cluster 0 {
    %t0 = tpb.fill tpb 0 dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 255)]>) {value = 1.0}
  }
}
