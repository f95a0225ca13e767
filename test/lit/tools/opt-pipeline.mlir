// -p pipelines run xDSL passes as in xdsl-opt; input from a file or stdin, output to stdout or -o.
// RUN: m100-opt %s -p 'canonicalize,dce' | filecheck %s
// RUN: m100-opt %s | m100-opt -p canonicalize | filecheck %s
// RUN: cat %s | m100-opt -p canonicalize -o %t.out.mlir && filecheck %s --input-file %t.out.mlir
// RUN: m100-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @f(%a : i32) -> i32 {
  %z = arith.constant 0 : i32
  %b = arith.addi %a, %z : i32
  %unused = arith.muli %a, %a : i32
  func.return %b : i32
}
// CHECK-LABEL: func.func @f(%a: i32) -> i32 {
// CHECK-NEXT:    func.return %a : i32
// CHECK-NEXT:  }

// GENERIC: "func.func"() <{sym_name = "f", function_type = (i32) -> i32}>
// GENERIC: "arith.muli"
