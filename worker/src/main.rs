fn main() {
    println!("openwop-worker {}", env!("CARGO_PKG_VERSION"));
}
