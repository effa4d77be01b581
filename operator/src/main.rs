fn main() {
    println!("openwop-operator {}", env!("CARGO_PKG_VERSION"));
}
