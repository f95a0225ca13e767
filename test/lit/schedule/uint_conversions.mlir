// RUN: m100-opt %S/Inputs/uint_ew.mlir -p 'm100-graph,m100-schedule{machine=tiny tpbs=1}' | filecheck %s
// RUN: m100-opt %S/Inputs/uint_wide.mlir -p 'm100-graph,m100-schedule{machine=tiny}' | filecheck %s --check-prefix=WIDE

// Unsigned u8/u16 held as signed bits (issue 11): extui = x + 2**N where x < 0 (integer lane),
// uitofp = that then itof, fptoui to i8 = ftoi then the signed bits (v - 256 where v >= 128).
// CHECK-DAG:  stages = [#tpb.stage<cmp_gt(0.0, in0)>, #tpb.stage<add(in0, 256.0)>, #tpb.stage<select(s0, s1, in0)>]
// CHECK-DAG:  stages = [#tpb.stage<cmp_gt(0.0, in0)>, #tpb.stage<add(in0, 65536.0)>, #tpb.stage<select(s0, s1, in0)>, #tpb.stage<itof(s2)>]
// CHECK-DAG:  stages = [#tpb.stage<ftoi(in0)>, #tpb.stage<cmp_ge(s0, 128.0)>, #tpb.stage<sub(s0, 256.0)>, #tpb.stage<select(s1, s2, s0)>]

// u32 -> i64 (issue 12): the integer lane's zext of the low 32 bits; a value >= 2**31 (held as a
// negative i32) does not fit the lane and faults at run time (test/unit/sim/test_cvu_bits.py)
// WIDE: stages = [#tpb.stage<zext(in0), iparams = [32]>]
