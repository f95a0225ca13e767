// RUN: m100-opt %s | filecheck %s
// RUN: m100-opt %s | m100-opt | filecheck %s
// RUN: m100-opt %s --print-op-generic | m100-opt | filecheck %s
// Every hbsm op and the buffer type print back exactly as written.

tpb.program "tiny" placed {
  %a = hbsm.alloc : !hbsm.buffer<hbsm[0], 64x32xf32, slots = 2>
  %b = hbsm.alloc offset 4096 {name = "x"} : !hbsm.buffer<ddr, 8xi4>
  %s = hbsm.alloc offset 0 : !hbsm.buffer<sram, 3x5xbf16>
  %h = hbsm.alloc offset 65532 : !hbsm.buffer<hbsm[1], 2xf16>
  %i = hbsm.alloc : !hbsm.buffer<hbsm[1], 4x4xi32>
  %f = hbsm.fifo producer 0 consumers [1] offset 0 : !hbsm.buffer<hbsm[1], 4x4xbf16, slots = 3>
  %g = hbsm.fifo producer 1 consumers [0, 1] : !hbsm.buffer<hbsm[0], 16xi8, slots = 2>
  %v = hbsm.view %a[16, 0] slot 1 : !hbsm.buffer<hbsm[0], 64x32xf32, slots = 2> -> !hbsm.buffer<hbsm[0], 16x32xf32>
  %w = hbsm.view %a[0, 8] : !hbsm.buffer<hbsm[0], 64x32xf32, slots = 2> -> !hbsm.buffer<hbsm[0], 64x8xf32, slots = 2>
  %x = hbsm.view %v[1, 1] {tag} : !hbsm.buffer<hbsm[0], 16x32xf32> -> !hbsm.buffer<hbsm[0], 15x31xf32>
}

// CHECK: builtin.module {
// CHECK-NEXT:   tpb.program "tiny" placed {
// CHECK-NEXT:     %a = hbsm.alloc : !hbsm.buffer<hbsm[0], 64x32xf32, slots = 2>
// CHECK-NEXT:     %b = hbsm.alloc offset 4096 {name = "x"} : !hbsm.buffer<ddr, 8xi4>
// CHECK-NEXT:     %s = hbsm.alloc offset 0 : !hbsm.buffer<sram, 3x5xbf16>
// CHECK-NEXT:     %h = hbsm.alloc offset 65532 : !hbsm.buffer<hbsm[1], 2xf16>
// CHECK-NEXT:     %i = hbsm.alloc : !hbsm.buffer<hbsm[1], 4x4xi32>
// CHECK-NEXT:     %f = hbsm.fifo producer 0 consumers [1] offset 0 : !hbsm.buffer<hbsm[1], 4x4xbf16, slots = 3>
// CHECK-NEXT:     %g = hbsm.fifo producer 1 consumers [0, 1] : !hbsm.buffer<hbsm[0], 16xi8, slots = 2>
// CHECK-NEXT:     %v = hbsm.view %a[16, 0] slot 1 : !hbsm.buffer<hbsm[0], 64x32xf32, slots = 2> -> !hbsm.buffer<hbsm[0], 16x32xf32>
// CHECK-NEXT:     %w = hbsm.view %a[0, 8] : !hbsm.buffer<hbsm[0], 64x32xf32, slots = 2> -> !hbsm.buffer<hbsm[0], 64x8xf32, slots = 2>
// CHECK-NEXT:     %x = hbsm.view %v[1, 1] {tag} : !hbsm.buffer<hbsm[0], 16x32xf32> -> !hbsm.buffer<hbsm[0], 15x31xf32>
// CHECK-NEXT:   }
// CHECK-NEXT: }
