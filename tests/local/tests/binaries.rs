//! Every function binary is a position-independent executable: its image,
//! nearly all of the code (std, tokio, hyper, rustls, aws-lc's C), loads at
//! a random address at each start. The runner and the reconcile worker
//! parse TLS, HTTP/2, JSON and images from any tenant's server; ASLR of
//! that image is not traded for the relocations' start time (ARCHITECTURE,
//! "Start"). The test suite's binaries are linked as the deployed ones.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(target_os = "linux")]
use std::io::Read;
#[cfg(target_os = "linux")]
use std::path::Path;

/// ELF's `e_type` (bytes 16 and 17, little-endian on x86_64 and arm64).
#[cfg(target_os = "linux")]
fn elf_type(path: &Path) -> u16 {
    let mut header = [0u8; 18];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut header))
        .unwrap_or_else(|e| panic!("{}: {e} (built by `cargo test --workspace`)", path.display()));
    assert_eq!(&header[..4], b"\x7fELF", "{} is not an ELF file", path.display());
    u16::from_le_bytes([header[16], header[17]])
}

#[test]
#[cfg(target_os = "linux")]
fn every_function_binary_is_linked_position_independent() {
    const ET_EXEC: u16 = 2;
    const ET_DYN: u16 = 3;
    let dir = Path::new(env!("CARGO_BIN_EXE_local")).parent().unwrap();
    for name in ["create", "runner", "reconcile", "admin", "schedules"] {
        let kind = elf_type(&dir.join(name));
        assert_ne!(
            kind, ET_EXEC,
            "{name} is linked position-dependent: its image loads at a fixed address"
        );
        assert_eq!(kind, ET_DYN, "{name}: ELF type {kind}");
    }
}

/// The main job answers `--help` with its usage and starts nothing.
#[test]
fn the_main_job_answers_help_without_starting() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_local"))
        .arg("--help")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(said.starts_with("local [--serve]"), "{said}");
    assert!(!said.contains("Starting"), "{said}");
}
