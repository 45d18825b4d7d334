//! The build script of every Lambda binary (the five functions and the
//! benchmark's `bare_lambda`, so the baseline is linked as they are): link
//! the executable position-dependent (`-no-pie`) on Linux.
//!
//! Why: a position-independent executable is relocated at every start. The
//! SDK, rustls and tracing leave about 55,000 relative relocations in a
//! function binary; the loader reads their table (1.3 MB) and writes each
//! into `.data.rel.ro` (1.4 MB), a private copy of every page of it, before
//! `main`. That was 1.1 to 1.5 ms of each cold start here, about a quarter
//! of a function's init (README, Benchmarks), and on Lambda those pages are
//! read from a package whose page cache is cold. Position-dependent, the
//! linker resolves them once and the pages are read only where used.
//!
//! What it gives up: the executable's own load address is fixed; the
//! heap, the stacks, the mappings and the shared libraries (libc) are still
//! placed at random. The code is Rust, whose safety rules out the memory
//! corruption that address randomisation mitigates, except in unsafe code
//! and in the C of aws-lc (the crypto under rustls); Go's toolchain links
//! Lambda functions this way by default. ARCHITECTURE.md, "Start".
//!
//! The objects stay position-independent (rustc's default); only the link
//! changes, and `-no-pie` after rustc's own `-pie` wins with gcc, clang and
//! `zig cc` (cargo-lambda's linker) alike.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo::rustc-link-arg-bins=-no-pie");
    }
    println!("cargo::rerun-if-changed=../../infra/build/lambda_binary.rs");
}
