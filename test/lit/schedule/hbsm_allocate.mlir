// RUN: m100-opt %s -p 'hbsm-allocate{report=true}' 2>%t.err | filecheck %s
// RUN: filecheck %s --check-prefix=REPORT < %t.err
// RUN: not m100-opt %S/Inputs/overflow.mlir -p hbsm-allocate 2>&1 | filecheck %s --check-prefix=OVER

// Liveness in program order: %a dies at the copy, so %c (same unit, allocated later) may reuse its
// bytes; %b is live with both and gets its own range. Offsets are bank (32 B) aligned. The DDR
// buffer without an offset lands after the highest allocated DDR byte.
tpb.program "tiny" placed {
  %in = hbsm.alloc offset 0 : !hbsm.buffer<ddr, 1000xf32>
  %out = hbsm.alloc : !hbsm.buffer<ddr, 16xf32>
  %a = hbsm.alloc : !hbsm.buffer<hbsm[0], 1000xf32>
  %b = hbsm.alloc : !hbsm.buffer<hbsm[0], 1000xf32>
  %c = hbsm.alloc : !hbsm.buffer<hbsm[0], 1000xf32>
  %s = hbsm.alloc : !hbsm.buffer<hbsm[1], 10xf32, slots = 3>
  %t0 = tpb.dma engine 0 src(%in) dst(%a)
  %t1 = tpb.copy tpb 0 src(%a) dst(%b) after(%t0)
  %t2 = tpb.copy tpb 0 src(%b) dst(%c) after(%t1)
  %t3 = tpb.copy tpb 0 src(%c) dst(%b) after(%t2)
  %t4 = tpb.dma engine 0 src(%in, #twu.access<affine_map<(d0) -> (d0)>, [10]>) dst(%s) after(%t3)
}
// CHECK:      %{{.*}} = hbsm.alloc offset 4032 : !hbsm.buffer<ddr, 16xf32>
// CHECK-NEXT: %[[A:.*]] = hbsm.alloc offset [[OA:[0-9]+]] : !hbsm.buffer<hbsm[0], 1000xf32>
// CHECK-NEXT: %{{.*}} = hbsm.alloc offset [[OB:[0-9]+]] : !hbsm.buffer<hbsm[0], 1000xf32>
// CHECK-NEXT: %{{.*}} = hbsm.alloc offset [[OA]] : !hbsm.buffer<hbsm[0], 1000xf32>
// CHECK-NEXT: %{{.*}} = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[1], 10xf32, slots = 3>
// REPORT: hbsm-allocate: highest HBSM byte per TPB: TPB0=8000, TPB1=120 (of 65536)

// OVER: m100-opt: error: hbsm-allocate: TPB 1: buffer %b<6144xf32> (tpb.copy tpb 1) (24576 B) does not fit: at instruction 2 the live buffers need 98304 B of the HBSM's 65536 B (32768 B too many): %a<6144xf32> (tpb.fill tpb 1) 49152 B (2 slots), %b<6144xf32> (tpb.copy tpb 1) 24576 B, %c<6144xf32> (tpb.copy tpb 1) 24576 B; to fit: shrink %a<6144xf32> (tpb.fill tpb 1) to <= 16384 B (a smaller tile)
