// RUN: m100-opt %s | filecheck %s
// RUN: m100-opt %s | m100-opt | filecheck %s
// RUN: m100-opt %s --print-op-generic | m100-opt | filecheck %s
// Worked example 1 of docs/dialects.md (placed level).

tpb.program "tiny" placed {
  tpb.symbol "a" input 64x32xf32 at ddr 0
  tpb.symbol "c" output 64x64xf32 at ddr 16384
  %A = hbsm.alloc offset 0 : !hbsm.buffer<ddr, 64x32xf32>
  %C = hbsm.alloc offset 16384 : !hbsm.buffer<ddr, 64x64xf32>
  %W = hbsm.alloc offset 65536 : !hbsm.buffer<ddr, 32x64xf32>
  %a = hbsm.alloc : !hbsm.buffer<hbsm[0], 64x32xf32>
  %b = hbsm.alloc : !hbsm.buffer<hbsm[0], 32x64xf32>
  %c = hbsm.alloc : !hbsm.buffer<hbsm[0], 64x64xf32>
  %ct = hbsm.fifo producer 0 consumers [1] : !hbsm.buffer<hbsm[1], 64x64xf32, slots = 2>
  %t0 = tpb.dma engine 0 src(%A) dst(%a)
  %t1 = tpb.dma engine 1 src(%W) dst(%b)
  %t2 = tpb.matmul tpb 0 a(%a) b(%b) c(%c) after(%t0, %t1) {m = 64, n = 64, k = 32, act = "relu", pred_start = 0, pred_end = 2100}
  %ct0 = hbsm.view %ct[0, 0] slot 0 : !hbsm.buffer<hbsm[1], 64x64xf32, slots = 2> -> !hbsm.buffer<hbsm[1], 64x64xf32>
  %t3 = tpb.copy tpb 0 src(%c, #twu.access<affine_map<(d0, d1) -> (d1, d0)>, [64, 64]>) dst(%ct0) after(%t2)
  %t4 = tpb.dma engine 0 src(%ct0) dst(%C) after(%t3)
}

// CHECK: builtin.module {
// CHECK-NEXT:   tpb.program "tiny" placed {
// CHECK-NEXT:     tpb.symbol "a" input 64x32xf32 at ddr 0
// CHECK-NEXT:     tpb.symbol "c" output 64x64xf32 at ddr 16384
// CHECK-NEXT:     %A = hbsm.alloc offset 0 : !hbsm.buffer<ddr, 64x32xf32>
// CHECK-NEXT:     %C = hbsm.alloc offset 16384 : !hbsm.buffer<ddr, 64x64xf32>
// CHECK-NEXT:     %W = hbsm.alloc offset 65536 : !hbsm.buffer<ddr, 32x64xf32>
// CHECK-NEXT:     %a = hbsm.alloc : !hbsm.buffer<hbsm[0], 64x32xf32>
// CHECK-NEXT:     %b = hbsm.alloc : !hbsm.buffer<hbsm[0], 32x64xf32>
// CHECK-NEXT:     %c = hbsm.alloc : !hbsm.buffer<hbsm[0], 64x64xf32>
// CHECK-NEXT:     %ct = hbsm.fifo producer 0 consumers [1] : !hbsm.buffer<hbsm[1], 64x64xf32, slots = 2>
// CHECK-NEXT:     %t0 = tpb.dma engine 0 src(%A) dst(%a)
// CHECK-NEXT:     %t1 = tpb.dma engine 1 src(%W) dst(%b)
// CHECK-NEXT:     %t2 = tpb.matmul tpb 0 a(%a) b(%b) c(%c) after(%t0, %t1) {m = 64, n = 64, k = 32, act = "relu", pred_start = 0, pred_end = 2100}
// CHECK-NEXT:     %ct0 = hbsm.view %ct[0, 0] slot 0 : !hbsm.buffer<hbsm[1], 64x64xf32, slots = 2> -> !hbsm.buffer<hbsm[1], 64x64xf32>
// CHECK-NEXT:     %t3 = tpb.copy tpb 0 src(%c, #twu.access<affine_map<(d0, d1) -> (d1, d0)>, [64, 64]>) dst(%ct0) after(%t2)
// CHECK-NEXT:     %t4 = tpb.dma engine 0 src(%ct0) dst(%C) after(%t3)
// CHECK-NEXT:   }
// CHECK-NEXT: }
