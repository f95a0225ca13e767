func.func @f(%a : i32) -> i32 {
  %z = arith.constant 0 : i32
  %b = arith.addi %a, %z : i32
  %unused = arith.muli %a, %a : i32
  func.return %b : i32
}
// -----
func.func @f(%a : i32) -> i32 {
  %b = arith.addi %a, %a : i32
  %c = arith.addi %b, %b : i32
  %d = arith.addi %c, %c : i32
  func.return %d, %d : i32, i32
}
