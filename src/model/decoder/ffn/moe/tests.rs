//! Expert grouping against rows alone, bit for bit (design rule R1), on our Q8_0 kernels.
use super::*;
use crate::kernels::matmul::QuantMatrix;
use crate::model::config::ModelConfig;
use crate::model::ops::Rope;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

const HIDDEN: usize = 64;
const FFN: usize = 32;
const EXPERTS: usize = 8;

fn random(n: usize, seed: &mut u64, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
        })
        .collect()
}

/// A Q8_0 matrix `[rows, cols]` on our kernels, from random values.
fn q8_0(rows: usize, cols: usize, seed: &mut u64) -> Linear {
    let v = random(rows * cols, seed, 1.0 / (cols as f32).sqrt());
    let t = Tensor::from_vec(v, (rows, cols), &Device::Cpu).expect("tensor");
    let q = QTensor::quantize(&t, GgmlDType::Q8_0).expect("q8_0");
    let data = q.data().expect("bytes");
    Linear {
        weight: None,
        bias: None,
        dense: None,
        quant: Some(QuantMatrix::from_ggml_q8_0_bytes(&data, rows, cols).expect("repack")),
        packed: None,
    }
}

fn block(top_k: usize) -> MoeFfn {
    let mut seed = 42u64;
    let experts = (0..EXPERTS)
        .map(|_| DenseFfn {
            gate_proj: q8_0(FFN, HIDDEN, &mut seed),
            up_proj: q8_0(FFN, HIDDEN, &mut seed),
            down_proj: q8_0(HIDDEN, FFN, &mut seed),
        })
        .collect();
    let router = q8_0(EXPERTS, HIDDEN, &mut seed);
    MoeFfn::new(router, experts, top_k, true)
}

fn config() -> ModelConfig {
    let json = serde_json::json!({
        "architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 16, "hidden_size": HIDDEN,
        "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "num_experts": EXPERTS,
        "num_experts_per_tok": 2, "moe_intermediate_size": FFN, "norm_topk_prob": true
    });
    crate::model::hf::config::parse(&json)
        .expect("config")
        .config
}

fn run(b: &MoeFfn, h: &[f32], dense: &[bool]) -> Vec<f32> {
    let config = config();
    let rope = Rope::new(vec![1.0; 8], 1.0, false, 16);
    let pass = LayerPass {
        config: &config,
        index: 0,
        rope: &rope,
        dense,
        mla_path: Default::default(),
    };
    b.forward(&pass, h).expect("forward")
}

/// 1, 2, 7 and 64 rows through the block at once give each row the bits it gets alone,
/// whatever experts the other rows chose, with top-1, top-2 and top-8 routing.
#[test]
fn expert_grouped_rows_equal_rows_alone_bit_for_bit() {
    let mut seed = 7u64;
    for top_k in [1, 2, EXPERTS] {
        let b = block(top_k);
        for n in [1, 2, 7, 64] {
            let h = random(n * HIDDEN, &mut seed, 1.0);
            let dense = vec![false; n];
            let together = run(&b, &h, &dense);
            for (i, row) in h.chunks_exact(HIDDEN).enumerate() {
                let alone = run(&b, row, &[false]);
                let got = &together[i * HIDDEN..(i + 1) * HIDDEN];
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(got), bits(&alone), "top-{top_k}, {n} rows, row {i}");
            }
        }
    }
}

/// The block is the weighted sum of its chosen experts, computed row by row from the
/// router's probabilities in f64: a check that the grouping puts each output back on its row.
#[test]
fn the_block_is_the_weighted_sum_of_the_chosen_experts() {
    let b = block(2);
    let mut seed = 9u64;
    let n = 5;
    let h = random(n * HIDDEN, &mut seed, 1.0);
    let got = run(&b, &h, &vec![false; n]);
    let config = config();
    let rope = Rope::new(vec![1.0; 8], 1.0, false, 16);
    for (i, row) in h.chunks_exact(HIDDEN).enumerate() {
        let pass = LayerPass {
            config: &config,
            index: 0,
            rope: &rope,
            dense: &[false],
            mla_path: Default::default(),
        };
        let routes = b.routes(&pass, row).expect("route");
        let mut want = vec![0f64; HIDDEN];
        for &(e, w) in &routes[0].experts {
            let y = b.experts[e].forward(&pass, row).expect("expert");
            for (o, v) in want.iter_mut().zip(y) {
                *o += w as f64 * v as f64;
            }
        }
        for (j, (g, w)) in got[i * HIDDEN..(i + 1) * HIDDEN]
            .iter()
            .zip(&want)
            .enumerate()
        {
            assert!(
                (*g as f64 - w).abs() < 1e-5,
                "row {i} value {j}: {g} vs {w}"
            );
        }
    }
}

/// The one-region path (every chosen expert's gate and up in one parallel region, then the
/// downs) gives the bits of running the experts one after another.
#[test]
fn one_region_experts_equal_experts_one_by_one_bit_for_bit() {
    let b = block(2);
    let mut seed = 11u64;
    for n in [1, 3, 16] {
        let h = random(n * HIDDEN, &mut seed, 1.0);
        let dense = vec![false; n];
        let config = config();
        let rope = Rope::new(vec![1.0; 8], 1.0, false, 16);
        let pass = LayerPass {
            config: &config,
            index: 0,
            rope: &rope,
            dense: &dense,
            mla_path: Default::default(),
        };
        let routes = b.routes(&pass, &h).expect("route");
        let mut members = vec![Vec::new(); EXPERTS];
        for (row, r) in routes.iter().enumerate() {
            for (slot, &(e, _)) in r.experts.iter().enumerate() {
                members[e].push((row, slot));
            }
        }
        let mats = grouped::quantized_experts(&b.experts, &members).expect("Q8_0 experts");
        let one_region = grouped::run(&pass, &mats, &members, &h, HIDDEN).expect("grouped");
        let one_by_one = b.each_expert(&pass, &members, &h, HIDDEN).expect("each");
        let bits = |v: &Vec<Vec<f32>>| {
            v.iter()
                .map(|y| y.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        assert!(
            one_region.iter().any(|y| !y.is_empty()),
            "{n} rows: no expert ran"
        );
        assert_eq!(bits(&one_region), bits(&one_by_one), "{n} rows");
    }
}
