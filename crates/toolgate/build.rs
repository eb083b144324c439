//! Links `toolgate` with packed relative relocations (DT_RELR) where the C
//! library it links against can apply them (glibc 2.36 and later).
//!
//! Why: a position-independent executable carries one 24-byte relocation
//! per pointer in its read-only data (vtables, string tables), and the
//! loader reads all of them at every start. Here that table is 1.5 MB of
//! the binary, and every page of it stays in the process's memory. Packed,
//! it takes a few kilobytes (`docs/BENCHMARKS.md`, "idle RSS").
//!
//! Only when the libc linked against defines `GLIBC_ABI_DT_RELR`: a loader
//! without it would ignore the packed table and start with broken
//! pointers, and the linker then records that version as required, so
//! such a binary refuses to start on an older glibc instead. Not for a
//! static build (`scripts/build-static`) or a cross build, whose C library
//! is not the one probed here.

use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let var = |name: &str| env::var(name).unwrap_or_default();
    let native = var("HOST") == var("TARGET");
    let static_crt = var("CARGO_CFG_TARGET_FEATURE").split(',').any(|f| f == "crt-static");
    if !native
        || static_crt
        || var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
    {
        return;
    }
    if libc_applies_packed_relocations() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the libc.so.6 the C compiler links against defines the version
/// `GLIBC_ABI_DT_RELR`.
fn libc_applies_packed_relocations() -> bool {
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let Ok(out) = Command::new(cc).arg("-print-file-name=libc.so.6").output() else {
        return false;
    };
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match std::fs::read(&path) {
        Ok(bytes) => bytes.windows(17).any(|w| w == b"GLIBC_ABI_DT_RELR"),
        Err(_) => false,
    }
}
