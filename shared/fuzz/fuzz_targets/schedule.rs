//! `shared::fuzzing::schedule`: its properties are documented there.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shared::fuzzing::schedule(data));
