//! Link options of one binary: cargo has no per-binary rustflags, only linker arguments.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // `phoenix-hook` runs on every tool call of every agent, and most of its time is the
    // process start itself. Linked as a position-dependent executable it has no relocations
    // for the dynamic loader to apply at each start (a PIE of this size has about 12,000, and
    // copies the pages they touch): measured with `cargo bench --bench hooks`, see the
    // CHANGELOG. Its code is compiled position-independent as usual; only the executable is
    // loaded at a fixed address (the libraries it uses are still placed at random). With glibc
    // only: a static musl build is linked as a static PIE, whose start code relocates the
    // executable itself and crashes in one linked position-dependent.
    let var = |name| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bin=phoenix-hook=-no-pie");
        // `phoenix-wrap` runs for every agent as long as it does: its relocated data would be
        // a private copy in every wrapper (~500 kB of `phoenix`'s), for the fleet's whole life.
        println!("cargo:rustc-link-arg-bin=phoenix-wrap=-no-pie");
    }
}
