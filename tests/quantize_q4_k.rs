//! Our Q4_K quantizer (`--quantize q4_k`) against libggml's: the bytes of
//! `ggml_quantize_chunk(GGML_TYPE_Q4_K, …)` on 48 rows of 512 values (six kinds — plain, small
//! with spikes, all positive, constant, with zero sub-blocks, heavy-tailed — at eight scales), committed as
//! tests/fixtures/q4_k/q4_k.bin by tests/fixtures/q4_k/make_fixture.sh. The rows are built
//! here exactly as make_fixture.c builds them (every step exact or the same IEEE operation).
use nanollm::kernels::matmul::quantize_q4_k::quantize_row_q4_k;

const ROWS: usize = 48;
const COLS: usize = 512;

fn inputs() -> Vec<f32> {
    let mut state: u32 = 2_463_534_242;
    let mut uniform = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state >> 8) as f32 * (1.0 / 16_777_216.0) * 2.0 - 1.0
    };
    let mut x = vec![0f32; ROWS * COLS];
    for r in 0..ROWS {
        for c in 0..COLS {
            let u = uniform();
            let v = match r % 6 {
                0 => u,
                1 => u * 0.01 * if c % 37 == 0 { 20.0 } else { 1.0 },
                2 => u * 0.25 + 0.5,
                3 => 0.25,
                4 => {
                    if (c / 32) % 3 == 0 {
                        0.0
                    } else {
                        u * 3.0
                    }
                }
                _ => u * u * u * 8.0,
            };
            x[r * COLS + c] = v * (1 + r / 6) as f32;
        }
    }
    x
}

#[test]
fn q4_k_bytes_equal_libggml_s() {
    let want = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/q4_k/q4_k.bin"),
    )
    .expect("fixture");
    let x = inputs();
    let mut got = Vec::new();
    for row in x.chunks_exact(COLS) {
        quantize_row_q4_k(row, &mut got).expect("quantize");
    }
    assert_eq!(got.len(), want.len());
    for (b, (g, w)) in got.chunks(144).zip(want.chunks(144)).enumerate() {
        assert_eq!(g, w, "block {b} (row {}) differs", b / (COLS / 256));
    }
    assert!(quantize_row_q4_k(&x[..100], &mut got).is_err());
}
