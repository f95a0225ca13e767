// RUN: m100-opt %S/Inputs/int_bits.mlir -p 'm100-graph,m100-schedule{machine=tiny tpbs=1}' | filecheck %s
// RUN: not m100-opt %S/Inputs/int_bits_bad.mlir -p 'm100-graph,m100-schedule{machine=tiny}' 2>&1 | filecheck %s --check-prefix=BAD

// Integer bit ops on the CVU integer lane (docs/isa.md "CVU lanes"): shifts carry the MLIR width
// (shr's second iparam: logical, for shrui); remsi is the truncating rem (the Mod fix-up body is
// longer than one pipeline: split); unsigned ops read zext'd operands and wrap an unsigned result
// back to the width (sext); xori with -1 is a bitwise not.
// CHECK-DAG:  stages = [#tpb.stage<shl(in0, in1), iparams = [8]>]
// CHECK-DAG:  stages = [#tpb.stage<shr(in0, in1), iparams = [8, 1]>]
// CHECK-DAG:  stages = [#tpb.stage<rem(in0, in1)>, #tpb.stage<cmp_eq(s0, 0.0)>,
// CHECK-DAG:  stages = [#tpb.stage<rem(in0, in1)>, #tpb.stage<add(s0, in1)>, #tpb.stage<select(in2, s1, s0)>]
// CHECK-DAG:  stages = [#tpb.stage<zext(in0), iparams = [16]>, #tpb.stage<zext(in1), iparams = [16]>, #tpb.stage<max(s0, s1)>, #tpb.stage<sext(s2), iparams = [16]>]
// CHECK-DAG:  stages = [#tpb.stage<zext(in0), iparams = [8]>, #tpb.stage<zext(in1), iparams = [8]>, #tpb.stage<cmp_gt(s1, s0)>]
// CHECK-DAG:  stages = [#tpb.stage<xor(in0, -1.0)>, #tpb.stage<and(s0, in1)>]
// CHECK-DAG:  stages = [#tpb.stage<cmp_gt(0.0, in0)>, #tpb.stage<add(in0, 256.0)>, #tpb.stage<select(s0, s1, in0)>, #tpb.stage<itof(s2)>]
// CHECK-DAG:  stages = [#tpb.stage<add(in0, in1)>, #tpb.stage<sext(s0), iparams = [8]>, #tpb.stage<cmp_gt(0.0, s1)>]

// BAD: m100-opt: error: 'linalg.generic' (%r) in @f, op #2: the unsigned constant 18446744073709551615 (i64) does not fit the i32 integer lane
