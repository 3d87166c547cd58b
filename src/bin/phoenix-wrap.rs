//! `phoenix-wrap`: what an agent's pane runs (`wrap`) and what reads the pane (`tap`), in the
//! shape `phoenix apply` writes them. A wrapper lives as long as its agent, one per agent all
//! day: this binary holds only what those two commands need and is linked position-dependent
//! (build.rs), so the pages of relocated data a position-independent `phoenix` writes in every
//! process at load are not copied into every wrapper. Any other command line is run by the
//! `phoenix` installed beside it.

fn main() {
    std::process::exit(phoenix::cli::wrapper_main());
}
