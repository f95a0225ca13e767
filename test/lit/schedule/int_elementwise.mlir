// RUN: m100-opt %S/Inputs/int_ew.mlir -p 'm100-graph,m100-schedule{machine=tiny tpbs=1}' | filecheck %s
// RUN: m100-opt %S/Inputs/int_bitwise.mlir -p 'm100-graph,m100-schedule{machine=tiny}' | filecheck %s --check-prefix=BITWISE
// RUN: not m100-opt %S/Inputs/int_bigconst.mlir -p 'm100-graph,m100-schedule{machine=tiny}' 2>&1 | filecheck %s --check-prefix=BIG

// Integer tensors (docs/isa.md "CVU lanes"): i64 is held as i32, i1 as i8 0/1; integer bodies
// become integer-lane CVU stages (slt = cmp_gt with swapped operands, divsi = the integer lane's
// truncating div, xori with true = not, fptosi = ftoi).
// CHECK-DAG:  tpb.symbol "arg0" input 4x8xi32
// CHECK-DAG:  tpb.symbol "arg2" input 4x8xf32
// CHECK-DAG:  tpb.symbol "result0" output 4x8xi32
// CHECK-DAG:  tpb.symbol "result1" output 4x8xi8
// CHECK-DAG:  tpb.symbol "result2" output 4x8xi32
// CHECK-DAG:  stages = [#tpb.stage<cmp_gt(in1, in0)>]
// CHECK-DAG:  stages = [#tpb.stage<add(in1, in2)>, #tpb.stage<div(in1, in2)>, #tpb.stage<select(in0, s0, s1)>]
// CHECK-DAG:  stages = [#tpb.stage<cmp_eq(in0, 1.0)>, #tpb.stage<cmp_eq(s0, 0.0)>]
// CHECK-DAG:  stages = [#tpb.stage<ftoi(in0)>]

// BITWISE: stages = [#tpb.stage<and(in0, in1)>]
// BIG: m100-opt: error: 'arith.constant' (%k) in @f, op #0: i64 constant values in [1, 4294967296] do not fit i32 (the M100 has no 64-bit integers; i64 tensors are narrowed to i32)
