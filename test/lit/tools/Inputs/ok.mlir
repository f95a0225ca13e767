func.func @f(%a : i32) -> i32 {
  %z = arith.constant 0 : i32
  %b = arith.addi %a, %z : i32
  %unused = arith.muli %a, %a : i32
  func.return %b : i32
}
