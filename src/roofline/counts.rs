//! FLOPs and bytes of a forward pass, counted from the model's shapes ([`ModelConfig`]) and
//! the bytes of the weights as the kernels store them ([`WeightBytes`]).
//!
//! Notation: L = `num_hidden_layers`, h = `hidden_size`, H = `num_attention_heads`,
//! H_kv = `num_key_value_heads`, d = `head_dim`, I = `intermediate_size`, V = `vocab_size`.
//! One multiply-add is 2 FLOPs. Counted: the matrix products (the linear layers and the LM
//! head) and attention's two products (QKᵀ and PV). Not counted: RMSNorm, RoPE, SwiGLU and
//! the residual adds (O(n · h): about 0.3% of SmolLM2's FLOPs), the softmax (about 5 FLOPs
//! per head per (query, key) pair against attention's 4 · d: ~2% of attention), biases
//! (Qwen2) and Qwen3's q/k norms.
use crate::kv::KvDtype;
use crate::model::decoder::attention::MlaPath;
use crate::model::ModelConfig;
use serde::Serialize;

/// Weights of one decoder layer's matrices that one token reads (parameters):
/// `h · (H·d + 2 · H_kv·d)` (Q, K, V) `+ H·d · h` (O) `+ 3 · h · I` (gate, up, down); for a
/// mixture of experts (E experts, k per token, each of width I_e) the router and the k
/// chosen experts, `+ E · h + k · 3 · h · I_e` in place of the dense MLP: the active
/// parameters, not the held ones.
///
/// MLA (DeepSeek): the query's (`h · H·(d_nope + d_rope)`, or its LoRA pair), `kv_a`
/// (`h · (r_kv + d_rope)`), the latent's up-maps (`H · (d_nope + d_v) · r_kv`: `k_b` and
/// `v_b` absorbed, or the expansion's `W_UK`, `W_UV`) and O (`H·d_v · h`); shared experts
/// add `n_shared · 3 · h · I_e`; the first `first_k_dense_replace` layers are dense.
pub fn layer_params(c: &ModelConfig) -> u64 {
    layers_params(c) / (c.num_hidden_layers.max(1) as u64)
}

/// [`layer_params`] of layer `layer` (DeepSeek's leading dense layers differ).
pub fn layer_params_at(c: &ModelConfig, layer: usize) -> u64 {
    let h = c.hidden_size as u64;
    let heads = c.num_attention_heads as u64;
    let attention = match c.mla {
        Some(m) => {
            let (qd, r, rope) = (
                m.q_head_dim() as u64,
                m.kv_lora_rank as u64,
                m.qk_rope_head_dim as u64,
            );
            let (nope, v) = (m.qk_nope_head_dim as u64, m.v_head_dim as u64);
            let q = match m.q_lora_rank {
                Some(ql) => h * ql as u64 + ql as u64 * heads * qd,
                None => h * heads * qd,
            };
            q + h * (r + rope) + heads * (nope + v) * r + heads * v * h
        }
        None => {
            let q = (c.num_attention_heads * c.head_dim) as u64;
            let kv = (c.num_key_value_heads * c.head_dim) as u64;
            h * (q + 2 * kv) + q * h
        }
    };
    let ffn = match c.moe {
        Some(m) if m.is_moe_layer(layer) => {
            let (e, k, i) = (
                m.num_experts as u64,
                m.num_experts_per_tok as u64,
                m.moe_intermediate_size as u64,
            );
            e * h + (k + m.num_shared_experts as u64) * 3 * h * i
        }
        _ => 3 * h * c.intermediate_size as u64,
    };
    attention + ffn
}

/// Every layer's [`layer_params_at`], summed.
pub fn layers_params(c: &ModelConfig) -> u64 {
    (0..c.num_hidden_layers)
        .map(|i| layer_params_at(c, i))
        .sum()
}

/// FLOPs of attention's two products per (query, key) pair and layer: `4 · H · d` (QKᵀ and
/// PV). MLA: expanded rows `2 · H · (d_nope + d_rope) + 2 · H · d_v`; absorbed rows score
/// the latent and weigh it, `2 · H · (r_kv + d_rope) + 2 · H · r_kv`. `decode_row`: a
/// generated row (absorbed under [`MlaPath::Auto`]).
pub fn pair_flops(c: &ModelConfig, decode_row: bool, path: MlaPath) -> u64 {
    let heads = c.num_attention_heads as u64;
    match c.mla {
        None => 4 * heads * c.head_dim as u64,
        Some(m) if expanded(decode_row, path) => {
            2 * heads * m.q_head_dim() as u64 + 2 * heads * m.v_head_dim as u64
        }
        Some(m) => {
            let (r, rope) = (m.kv_lora_rank as u64, m.qk_rope_head_dim as u64);
            2 * heads * (r + rope) + 2 * heads * r
        }
    }
}

/// Whether a row of this class takes MLA's expanded path under `path`.
fn expanded(decode_row: bool, path: MlaPath) -> bool {
    match path {
        MlaPath::Auto => !decode_row,
        MlaPath::Expanded => true,
        MlaPath::Absorbed => false,
    }
}

/// What MLA's expanded path adds to a decode step over `keys` positions: every cached
/// latent expanded again (`2 · keys · L · H · (d_nope + d_v) · r_kv` FLOPs) into f32 K and
/// V rows written and read back (`2 · keys · L · H · (d_nope + d_rope + d_v) · 4` bytes,
/// the K/V a plain MHA cache would hold, in f32). (0, 0) without MLA or when absorbed.
pub fn expanded_decode_extra(c: &ModelConfig, keys: f64, path: MlaPath) -> (f64, f64) {
    match c.mla {
        Some(m) if expanded(true, path) => {
            let lh = (c.num_hidden_layers * c.num_attention_heads) as f64;
            let (nope, v, r) = (
                m.qk_nope_head_dim as f64,
                m.v_head_dim as f64,
                m.kv_lora_rank as f64,
            );
            let flops = 2.0 * keys * lh * (nope + v) * r;
            let bytes = 2.0 * keys * lh * (m.q_head_dim() as f64 + v) * 4.0;
            (flops, bytes)
        }
        _ => (0.0, 0.0),
    }
}

/// Weights of the LM head (parameters): `V · h` (tied or not: the same matrix size).
pub fn lm_head_params(c: &ModelConfig) -> u64 {
    c.vocab_size as u64 * c.hidden_size as u64
}

/// (query, key) pairs of causal attention for `n` new positions `start .. start + n`, each
/// attending to every position up to its own: `Σ_{p=start}^{start+n−1} (p + 1)
/// = n · start + n (n + 1) / 2` (the causal triangle, plus the cached rectangle).
pub fn causal_pairs(start: u64, n: u64) -> u64 {
    n * start + n * (n + 1) / 2
}

/// (query, key) pairs of `n` new positions `start .. start + n` of a layer whose window is
/// `window` (`None`: [`causal_pairs`]): each position `p` attends to `min(p + 1, W)` keys.
pub fn windowed_pairs(start: u64, n: u64, window: Option<usize>) -> u64 {
    let Some(w) = window.map(|w| w as u64) else {
        return causal_pairs(start, n);
    };
    // Σ_{t = start + 1}^{start + n} min(t, W): the t ≤ W part, then W for each t > W.
    let (lo, hi) = (start + 1, start + n);
    let below = match lo <= w {
        true => {
            let top = hi.min(w);
            (lo + top) * (top + 1 - lo) / 2
        }
        false => 0,
    };
    below + hi.saturating_sub(w.max(lo - 1)) * w
}

/// FLOPs of one forward pass, by where they are spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Flops {
    /// The layers' linear projections: `2 · n · L · layer_params` ([`layer_params`]).
    pub linear: u64,
    /// Attention's QKᵀ and PV: `2 · 2 · H · d` per (query, key) pair per layer:
    /// `4 · H · d · Σ_layers windowed_pairs(start, n, W_layer)` (`4 · L · H · d ·
    /// causal_pairs(start, n)` without sliding windows).
    pub attention: u64,
    /// The LM head over the rows whose logits are computed: `2 · rows · V · h`.
    pub lm_head: u64,
}

impl Flops {
    /// Sum of the three parts.
    pub fn total(&self) -> u64 {
        self.linear + self.attention + self.lm_head
    }
}

/// FLOPs of a forward pass over `n` positions starting at `start` (the cache holds `start`
/// positions already) that computes logits for `logit_rows` rows:
/// `2·n·L·layer_params + 4·L·H·d·causal_pairs(start, n) + 2·logit_rows·V·h`.
///
/// The LM head counts only the rows whose logits are computed: prefill and decode compute
/// the last row's only (a FLOP counter that charges `2 · n · params` for every row would add
/// `2 · (n − 1) · V · h` of work this engine never does).
pub fn forward_flops(c: &ModelConfig, start: u64, n: u64, logit_rows: u64) -> Flops {
    forward_flops_on(c, start, n, logit_rows, MlaPath::Auto)
}

/// [`forward_flops`] with MLA's rows on `path` (a one-row pass is a decode row, more rows
/// prompt rows; [`pair_flops`]).
pub fn forward_flops_on(
    c: &ModelConfig,
    start: u64,
    n: u64,
    logit_rows: u64,
    path: MlaPath,
) -> Flops {
    let pairs: u64 = c
        .layer_windows
        .iter()
        .map(|&w| windowed_pairs(start, n, w))
        .sum();
    Flops {
        linear: 2 * n * layers_params(c),
        attention: pair_flops(c, n == 1, path) * pairs,
        lm_head: 2 * logit_rows * lm_head_params(c),
    }
}

/// FLOPs of prefilling a `prompt`-token prompt from an empty cache, logits of the last row
/// only (as [`crate::model::Decoder::forward`] computes them): `forward_flops(c, 0, prompt, 1)`.
pub fn prefill_flops(c: &ModelConfig, prompt: u64) -> Flops {
    forward_flops(c, 0, prompt, 1)
}

/// FLOPs of one KV-cached decode step whose new token attends to `keys` positions (itself
/// included): `forward_flops(c, keys − 1, 1, 1)` = `2·L·layer_params + 4·L·H·d·keys + 2·V·h`.
pub fn decode_step_flops(c: &ModelConfig, keys: u64) -> Flops {
    forward_flops(c, keys.saturating_sub(1), 1, 1)
}

/// Bytes of a model's weight matrices as one kernel path stores (and reads) them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WeightBytes {
    /// Every layer's seven matrices, summed over the layers (bytes).
    pub layers: u64,
    /// The LM head (bytes): the token embedding's matrix when the embeddings are tied.
    pub lm_head: u64,
}

impl WeightBytes {
    /// `bytes_per_weight` bytes for every weight of `c`'s matrices (4 for f32 copies).
    pub fn uniform(c: &ModelConfig, bytes_per_weight: u64) -> WeightBytes {
        WeightBytes {
            layers: bytes_per_weight * layers_params(c),
            lm_head: bytes_per_weight * lm_head_params(c),
        }
    }

    /// Both parts (bytes).
    pub fn total(&self) -> u64 {
        self.layers + self.lm_head
    }
}

/// Bytes one phase moves, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Bytes {
    /// Weight bytes read (every matrix once, LM head included).
    pub weights: f64,
    /// K/V bytes: read by a decode step (every cached position, the new one included), or
    /// written by a prefill (every prompt position), in the stored KV dtype.
    pub kv: f64,
}

impl Bytes {
    /// Both parts (bytes).
    pub fn total(&self) -> f64 {
        self.weights + self.kv
    }
}

/// K and V bytes of one position over all layers in `dtype`: `2 · L · H_kv · d · bytes per
/// value` (q8_0: 34 bytes per 32 values, per head row).
pub fn kv_bytes_per_position(c: &ModelConfig, dtype: KvDtype) -> u64 {
    c.kv_shape(dtype).bytes_per_token()
}

/// Bytes one KV-cached decode step reads when its token attends to `keys` positions (may
/// be a mean, hence f64): every weight matrix once (`weights.total()`: the quantized
/// matrices the decode kernels stream, LM head included) `+ keys · kv_bytes_per_position`.
/// Activations (a few KiB) and the one embedding row are not counted.
pub fn decode_step_bytes(
    c: &ModelConfig,
    weights: WeightBytes,
    dtype: KvDtype,
    keys: f64,
) -> Bytes {
    // A sliding-window layer reads at most its window's keys.
    let per_layer = kv_bytes_per_position(c, dtype) as f64 / c.num_hidden_layers.max(1) as f64;
    let kv: f64 = c
        .layer_windows
        .iter()
        .map(|w| w.map_or(keys, |w| keys.min(w as f64)) * per_layer)
        .sum();
    Bytes {
        weights: weights.total() as f64,
        kv,
    }
}

/// The least bytes a prefill of `prompt` positions moves: every weight matrix read once, as
/// the prefill kernels store it (`weights`: the f32 copy for dense prefill), and the prompt's
/// K/V written once (`prompt · kv_bytes_per_position`). Activations are taken as
/// cache-resident, so this is a lower bound on traffic and its intensity an upper bound.
pub fn prefill_bytes(c: &ModelConfig, weights: WeightBytes, dtype: KvDtype, prompt: u64) -> Bytes {
    Bytes {
        weights: weights.total() as f64,
        kv: (prompt * kv_bytes_per_position(c, dtype)) as f64,
    }
}

/// Mean keys a KV-cached decode step attends to over a run of `generated` tokens after a
/// `prompt`-token prompt: the first token comes from prefill; step k = 1 .. generated − 1
/// feeds position prompt + k − 1 and attends to prompt + k keys, so the mean is
/// `prompt + generated / 2`. None with fewer than two tokens (no decode step).
pub fn mean_decode_keys(prompt: u64, generated: u64) -> Option<f64> {
    (generated >= 2).then(|| prompt as f64 + generated as f64 / 2.0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::config::Architecture;
    use crate::model::rope::RopeScaling;

    /// SmolLM2-135M (HF config.json of HuggingFaceTB/SmolLM2-135M-Instruct).
    pub(crate) fn smollm2() -> ModelConfig {
        ModelConfig {
            architecture: Architecture::Llama,
            vocab_size: 49152,
            hidden_size: 576,
            intermediate_size: 1536,
            num_hidden_layers: 30,
            num_attention_heads: 9,
            num_key_value_heads: 3,
            head_dim: 64,
            rms_norm_eps: 1e-5,
            rope_theta: 100000.0,
            rope_scaling: RopeScaling::Default,
            rope_freq_factors: None,
            max_position_embeddings: 8192,
            tie_word_embeddings: true,
            rope_interleaved: true,
            attention_bias: false,
            mlp_bias: false,
            qk_norm: false,
            layer_windows: vec![None; 30],
            rope_local_theta: None,
            hidden_act: crate::model::config::HiddenAct::Silu,
            scale_embeddings: false,
            post_norms: false,
            query_pre_attn_scalar: None,
            final_logit_softcapping: None,
            moe: None,
            attention_sinks: false,
            mla: None,
        }
    }

    /// A tiny config: 2 layers, h 8, 2 heads, 1 KV head, d 4, I 16, V 10.
    pub(crate) fn tiny() -> ModelConfig {
        ModelConfig {
            vocab_size: 10,
            hidden_size: 8,
            intermediate_size: 16,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            num_key_value_heads: 1,
            head_dim: 4,
            max_position_embeddings: 64,
            layer_windows: vec![None; 2],
            ..smollm2()
        }
    }

    #[test]
    fn windowed_pairs_count_each_positions_window() {
        for start in 0..40u64 {
            for n in 1..30u64 {
                for w in [1usize, 5, 16, 100] {
                    let want: u64 = (start..start + n).map(|p| (p + 1).min(w as u64)).sum();
                    assert_eq!(windowed_pairs(start, n, Some(w)), want, "{start} {n} {w}");
                }
                assert_eq!(windowed_pairs(start, n, None), causal_pairs(start, n));
            }
        }
    }

    #[test]
    fn smollm2_parameters_by_hand() {
        let c = smollm2();
        // Q 576·576 + K, V 576·192 each + O 576·576 + gate, up, down 576·1536 each
        // = 331,776 + 221,184 + 331,776 + 2,654,208 = 3,538,944 per layer.
        assert_eq!(layer_params(&c), 3_538_944);
        assert_eq!(30 * layer_params(&c), 106_168_320);
        assert_eq!(lm_head_params(&c), 28_311_552); // 49,152 · 576
    }

    #[test]
    fn smollm2_prefill_flops_by_hand() {
        let c = smollm2();
        let f = prefill_flops(&c, 128);
        // linear: 2 · 128 · 106,168,320
        assert_eq!(f.linear, 27_179_089_920);
        // attention: 4 · 30 · 9 · 64 · (128 · 129 / 2 = 8,256 pairs) = 69,120 · 8,256
        assert_eq!(f.attention, 570_654_720);
        // LM head, last row only: 2 · 49,152 · 576
        assert_eq!(f.lm_head, 56_623_104);
        assert_eq!(f.total(), 27_806_367_744);
    }

    #[test]
    fn smollm2_decode_counts_by_hand() {
        let c = smollm2();
        // A step at 129 keys (position 128 after a 128-token prompt).
        let f = decode_step_flops(&c, 129);
        assert_eq!(f.linear, 212_336_640); // 2 · 106,168,320
        assert_eq!(f.attention, 8_916_480); // 4 · 30 · 576 · 129
        assert_eq!(f.lm_head, 56_623_104);
        // f16 K/V: 2 · 30 · 3 · 64 · 2 = 23,040 bytes per position; q8_0: 2 · 30 · 3 · 68
        // (a 64-value row is two 34-byte blocks); f32: twice f16.
        assert_eq!(kv_bytes_per_position(&c, KvDtype::F16), 23_040);
        assert_eq!(kv_bytes_per_position(&c, KvDtype::Q8_0), 12_240);
        assert_eq!(kv_bytes_per_position(&c, KvDtype::F32), 46_080);
        let w = WeightBytes {
            layers: 66_355_200,
            lm_head: 30_081_024,
        };
        let b = decode_step_bytes(&c, w, KvDtype::F16, 129.0);
        assert_eq!(b.weights, 96_436_224.0);
        assert_eq!(b.kv, 2_972_160.0); // 129 · 23,040
                                       // Dense prefill reads the f32 copy: 4 · (106,168,320 + 28,311,552) bytes.
        let dense = WeightBytes::uniform(&c, 4);
        assert_eq!(dense.total(), 537_919_488);
        let p = prefill_bytes(&c, dense, KvDtype::F16, 128);
        assert_eq!(p.kv, 2_949_120.0); // 128 · 23,040
        assert_eq!(mean_decode_keys(128, 128), Some(192.0));
        assert_eq!(mean_decode_keys(5, 1), None);
    }

    #[test]
    fn tiny_config_by_hand() {
        let c = tiny();
        // Q 8·8 + K, V 8·4 each + O 8·8 + 3 · 8·16 = 64 + 64 + 64 + 384 = 576.
        assert_eq!(layer_params(&c), 576);
        assert_eq!(lm_head_params(&c), 80);
        // Prefill of 3 tokens: pairs 1 + 2 + 3 = 6.
        assert_eq!(causal_pairs(0, 3), 6);
        let f = prefill_flops(&c, 3);
        assert_eq!(f.linear, 2 * 3 * 2 * 576); // 6,912
        assert_eq!(f.attention, 4 * 2 * 8 * 6); // 384
        assert_eq!(f.lm_head, 160);
        assert_eq!(f.total(), 7_456);
        // Two more positions after 3 cached: pairs 4 + 5 = 9 = 2 · 3 + 2 · 3 / 2.
        assert_eq!(causal_pairs(3, 2), 9);
        let step = decode_step_flops(&c, 4);
        assert_eq!(step.total(), 2 * 2 * 576 + 4 * 2 * 8 * 4 + 160); // 2,720
                                                                     // f32 K/V: 2 · 2 layers · 1 head · 4 · 4 bytes = 64 bytes per position.
        assert_eq!(kv_bytes_per_position(&c, KvDtype::F32), 64);
        let b = decode_step_bytes(&c, WeightBytes::uniform(&c, 4), KvDtype::F32, 4.0);
        assert_eq!(b.total(), (4 * (2 * 576 + 80) + 4 * 64) as f64); // 5,184
    }
}
