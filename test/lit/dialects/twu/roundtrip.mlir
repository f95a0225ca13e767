// RUN: m100-opt %s | filecheck %s
// RUN: m100-opt %s | m100-opt | filecheck %s
// RUN: m100-opt %s --print-op-generic | m100-opt | filecheck %s
// Every #twu attribute form prints back exactly as written.

"test.op"() {a = #twu.walk<hbsm[1], 1024, f32, [(0, 64, 4032), (0, 1, 63)]>, b = #twu.walk<ddr, 0, i4, []>, c = #twu.walk<sram, 4096, bf16, [(3, 0, 5), (-2, -1, -9)]>, d = #twu.walk<ddr[3], 8, i8, [(0, 1, 0)]>, e = #twu.access<affine_map<(d0, d1) -> (d1, d0)>, [64, 32]>, f = #twu.access<affine_map<(d0, d1, d2) -> (((d0 * 2) + d2), (d1 + 1))>, [4, 3, 2]>, g = #twu.access<affine_map<() -> (0)>, []>} : () -> ()

// CHECK: builtin.module {
// CHECK-NEXT:   "test.op"() {a = #twu.walk<hbsm[1], 1024, f32, [(0, 64, 4032), (0, 1, 63)]>, b = #twu.walk<ddr, 0, i4, []>, c = #twu.walk<sram, 4096, bf16, [(3, 0, 5), (-2, -1, -9)]>, d = #twu.walk<ddr[3], 8, i8, [(0, 1, 0)]>, e = #twu.access<affine_map<(d0, d1) -> (d1, d0)>, [64, 32]>, f = #twu.access<affine_map<(d0, d1, d2) -> (((d0 * 2) + d2), (d1 + 1))>, [4, 3, 2]>, g = #twu.access<affine_map<() -> (0)>, []>} : () -> ()
// CHECK-NEXT: }
