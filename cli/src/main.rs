fn main() {
    println!("kubectl-openwop {}", env!("CARGO_PKG_VERSION"));
}
