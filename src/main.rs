fn main() {
    std::process::exit(phoenix::cli::main());
}
