// Three buffers of TPB 1 (48 KiB double buffered + 2 x 24 KiB) live at once: 96 KiB > the tiny HBSM (64 KiB).
tpb.program "tiny" placed {
  %a = hbsm.alloc : !hbsm.buffer<hbsm[1], 6144xf32, slots = 2>
  %b = hbsm.alloc : !hbsm.buffer<hbsm[1], 6144xf32>
  %c = hbsm.alloc : !hbsm.buffer<hbsm[1], 6144xf32>
  %t0 = tpb.fill tpb 1 dst(%a) {value = 1.0}
  %t1 = tpb.copy tpb 1 src(%a, #twu.access<affine_map<(d0) -> (d0)>, [6144]>) dst(%b) after(%t0)
  %t2 = tpb.copy tpb 1 src(%b) dst(%c) after(%t1)
  %t3 = tpb.copy tpb 1 src(%c) dst(%a, #twu.access<affine_map<(d0) -> (d0)>, [6144]>) after(%t2)
}
