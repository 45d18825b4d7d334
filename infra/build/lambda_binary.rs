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
//! What it gives up: the executable's load address is fixed, and in a
//! Rust binary the executable is nearly all of the code (std, tokio, hyper,
//! rustls, aws-lc's C and assembly) and its GOT; anyone can learn those
//! addresses by building this repository at its `Cargo.lock`, which is what
//! a return-oriented exploit needs. Only libc, the stacks, the heap and
//! other mappings stay at random addresses. What that mitigation guards
//! against is memory corruption, which Rust's rules make unlikely but do not
//! rule out: unsafe code in tokio, hyper, bytes and the like, and the C of
//! aws-lc. The functions that meet hostile input are the webhook intake (a
//! public URL, signature checked before anything else) and the runner and
//! reconcile worker (TLS to connector servers). Go's toolchain links Lambda
//! functions this way by default. To take the trade back, delete the
//! `println!` below: the functions then pay the relocations at each start.
//! ARCHITECTURE.md, "Start".
//!
//! The objects stay position-independent (rustc's default); only the link
//! changes, and `-no-pie` after rustc's own `-pie` wins with gcc, clang and
//! `zig cc` (cargo-lambda's linker) alike.

fn main() {
    // glibc targets only: on a static (musl) target, `-no-pie` would undo
    // rustc's `-static-pie` rather than its `-pie`.
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") == "linux" && target("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo::rustc-link-arg-bins=-no-pie");
    }
    println!("cargo::rerun-if-changed=../../infra/build/lambda_binary.rs");
}
