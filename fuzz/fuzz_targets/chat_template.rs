//! Fuzz target: see [`nanollm_fuzz::chat_template`]. Errors are the expected answer to bad input;
//! a panic, abort, hang or huge allocation is a finding.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = nanollm_fuzz::chat_template(data);
});
