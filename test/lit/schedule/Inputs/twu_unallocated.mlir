tpb.program "tiny" placed {
  %a = hbsm.alloc : !hbsm.buffer<hbsm[0], 16xf32>
  %t = tpb.fill tpb 0 dst(%a) {value = 0.0}
}
