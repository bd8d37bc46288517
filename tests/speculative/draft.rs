//! Draft-model speculation (`--spec draft`): greedy tokens equal plain decoding's bit for
//! bit with a draft that is always right (the model itself) and one that is nearly always
//! wrong (a tiny random Llama with the same vocabulary), in `generate` and in the batched
//! engine (alone and batched, both pools' blocks exact); with sampling, the token at a
//! drafted position judged by rejection sampling follows the target's distribution
//! (chi-square, both loops); a draft with another vocabulary is refused in one line.
use crate::common;
use crate::requests;
use nanollm::engine::llm_engine::{EngineConfig, SchedulerConfig};
use nanollm::engine::spec::{SpecChoice, Speculative};
use nanollm::engine::{CacheConfig, DecodeMode, Request, SamplingParams};
use nanollm::kv::KvDtype;
use nanollm::model::{Decoder, Loaded};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

/// A tiny random Llama of `seed`'s weights; with `eps`, its RMS norms' epsilon set to it:
/// a large one shrinks every normalized activation, so the model is the seed's with a
/// flatter, related distribution (a draft that agrees sometimes).
fn tiny(seed: u64, eps: Option<f32>) -> (tempfile::TempDir, Loaded) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("tiny-{seed}.gguf"));
    common::tiny::write_tiny_llama_seeded(&path, false, seed, |md| {
        if let Some(eps) = eps {
            md.insert(
                "llama.attention.layer_norm_rms_epsilon".into(),
                candle_core::quantized::gguf_file::Value::F32(eps),
            );
        }
    });
    let m = nanollm::model::source::load(&path, &candle_core::Device::Cpu, false).expect("load");
    (dir, m)
}

fn engine_config(cache: CacheConfig, spec: Speculative) -> EngineConfig {
    EngineConfig {
        cache,
        num_blocks: 1024,
        max_model_len: 2048,
        offload: None,
        speculative: Some(spec),
        scheduler: SchedulerConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: 24,
            enable_prefix_caching: true,
        },
    }
}

/// [`crate::engine::run_with`] with `draft`: each request's tokens (all of its
/// `max_new_tokens`), blocks exact after every step, both pools empty at the end; and the
/// drafts (proposed, accepted).
fn run_engine(
    m: &Loaded,
    draft: &Decoder,
    reqs: &[Request],
    arrive: &[usize],
    config: EngineConfig,
) -> (BTreeMap<usize, Vec<u32>>, (u64, u64)) {
    let (done, s) = crate::engine::run_with(m, Some(draft), reqs, arrive, config);
    (done, (s.num_draft_tokens, s.num_accepted_tokens))
}

#[test]
fn greedy_with_a_draft_model_equals_plain() {
    let m = common::model();
    let (_dir, wrong) = tiny(7, None);
    // Blocks of 5: verify steps of up to 9 rows cross block edges in both pools.
    let cache = CacheConfig {
        dtype: KvDtype::F16,
        block_size: 5,
        swa_full: false,
        evict: None,
    };
    let reqs = requests(m, 24, SamplingParams::greedy(), cache);
    let want: Vec<Vec<u32>> = reqs.iter().map(|r| common::alone(m, r)).collect();
    for (label, draft) in [
        ("itself", &m.decoder),
        ("a tiny random Llama", &wrong.decoder),
    ] {
        let mut totals = (0u64, 0u64);
        for k in [1, 3, 4, 8] {
            let mut spec = Speculative::draft(k).expect("spec");
            spec.force = k % 2 == 1;
            for (i, r) in reqs.iter().enumerate() {
                let r = Request {
                    speculative: SpecChoice::On(spec),
                    ..r.clone()
                };
                let stop = AtomicBool::new(false);
                let g = nanollm::engine::generate_with_draft(
                    &m.decoder,
                    Some(draft),
                    &m.tokenizer,
                    &r,
                    &stop,
                    |_| Ok(()),
                )
                .expect("generate");
                assert_eq!(g.tokens, want[i], "{label}, k {k}, prompt {i}, generate");
                assert_eq!(g.stats.kv_cache.blocks_leaked, 0);
                let c = g.stats.spec.expect("report").counts;
                totals.0 += c.num_draft_tokens;
                totals.1 += c.num_accepted_tokens;
            }
            let (got, (d, a)) =
                run_engine(m, draft, &reqs, &[0, 0, 2, 5], engine_config(cache, spec));
            for (i, w) in want.iter().enumerate() {
                assert_eq!(&got[&i], w, "{label}, k {k}, prompt {i}, batched");
            }
            totals.0 += d;
            totals.1 += a;
        }
        assert!(totals.0 > 0, "{label}: no draft verified");
        if std::ptr::eq(draft, &m.decoder) {
            assert_eq!(
                totals.1, totals.0,
                "{label}: a draft by the model itself was rejected"
            );
        } else {
            assert!(totals.1 < totals.0 / 2, "{label}: {totals:?}");
        }
    }
}

/// Under the turn-down rule a draft as dear as the target (the model itself, whose every
/// draft would be kept) is never run — not even drafts that are all accepted pay for a
/// round that costs a whole step, nor catching it up over each prompt — while a tiny draft
/// (a fraction of the bytes) is, and the tokens are plain decoding's either way. Mutation:
/// with the catch-up and best-case checks removed, the model as its own draft proposed
/// drafts here.
#[test]
fn the_rule_runs_no_draft_that_cannot_pay() {
    let m = common::model();
    let (_dir, small) = tiny(7, None);
    let cache = CacheConfig {
        dtype: KvDtype::F16,
        block_size: 16,
        swa_full: false,
        evict: None,
    };
    let reqs = requests(m, 24, SamplingParams::greedy(), cache);
    let want: Vec<Vec<u32>> = reqs.iter().map(|r| common::alone(m, r)).collect();
    let spec = Speculative::draft(4).expect("spec");
    let arrive = vec![0; reqs.len()];
    let (got, (drafted, _)) = run_engine(m, &m.decoder, &reqs, &arrive, engine_config(cache, spec));
    assert_eq!(
        drafted, 0,
        "the model as its own draft was run under the rule"
    );
    let (got_small, (drafted_small, _)) = run_engine(
        m,
        &small.decoder,
        &reqs,
        &arrive,
        engine_config(cache, spec),
    );
    assert!(drafted_small > 0, "a tiny draft was never run");
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&got[&i], w, "prompt {i}");
        assert_eq!(&got_small[&i], w, "prompt {i}, tiny draft");
    }
}

/// Seeds per loop in the chi-square test.
const SEEDS: u64 = 2_500;

#[test]
fn a_judged_draft_follows_the_targets_distribution() {
    let (_d0, target) = tiny(0, None);
    let (_d1, draft) = tiny(0, Some(0.001));
    let prompt: Vec<u32> = vec![1, 504, 2212, 314, 253, 1345, 28, 339];
    let (t, k, p) = (1.3, 8, 0.9);
    let sampling = |seed| SamplingParams {
        temperature: t,
        top_k: Some(k),
        top_p: Some(p),
        seed,
        repeat_penalty: 1.0,
        repeat_last_n: 64,
    };
    // The joint distribution of the first two tokens: the first sampled from the prompt's
    // logits, the second (the drafted position) from the logits after it.
    let first = crate::sampling::reference(
        &crate::sampling::next_logits_prompt(&target, &prompt),
        t,
        k,
        p,
    );
    let mut joint: Vec<((u32, u32), f64)> = Vec::new();
    for &(a, pa) in &first {
        let mut ids = prompt.clone();
        ids.push(a);
        let second = crate::sampling::reference(
            &crate::sampling::next_logits(&target, &ids, prompt.len()),
            t,
            k,
            p,
        );
        joint.extend(second.into_iter().map(|(b, pb)| ((a, b), pa * pb)));
    }
    assert!(joint.len() >= 9, "a degenerate distribution: {joint:?}");
    let mut spec = Speculative::draft(1).expect("spec");
    spec.force = true;
    let request = |seed| Request {
        prompt_ids: prompt.clone(),
        max_new_tokens: 3,
        sampling: sampling(seed),
        mode: DecodeMode::KvCache,
        cache: CacheConfig::default(),
        stop_token_ids: Vec::new(),
        stop_strings: Vec::new(),
        ignore_eos: true,
        speculative: SpecChoice::On(spec),
    };
    // The one-request loop.
    let mut gen_tokens = Vec::new();
    let (mut drafted, mut accepted) = (0, 0);
    for seed in 0..SEEDS {
        let stop = AtomicBool::new(false);
        let g = nanollm::engine::generate_with_draft(
            &target.decoder,
            Some(&draft.decoder),
            &target.tokenizer,
            &request(seed),
            &stop,
            |_| Ok(()),
        )
        .expect("generate");
        let c = g.stats.spec.expect("report").counts;
        drafted += c.num_draft_tokens;
        accepted += c.num_accepted_tokens;
        gen_tokens.push(g.tokens);
    }
    // The batched engine, every request in one engine.
    let config = EngineConfig {
        max_model_len: 64,
        scheduler: SchedulerConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: 64,
            enable_prefix_caching: false,
        },
        ..engine_config(CacheConfig::default(), spec)
    };
    let reqs: Vec<Request> = (SEEDS..2 * SEEDS).map(request).collect();
    let (got, (d, acc)) = run_engine(&target, &draft.decoder, &reqs, &vec![0; reqs.len()], config);
    for (label, runs, drafted, accepted) in [
        ("generate", gen_tokens, drafted, accepted),
        ("engine", got.into_values().collect(), d, acc),
    ] {
        // Both outcomes of the judgement happened: drafts kept and drafts replaced.
        assert!(
            accepted > 0 && accepted < drafted,
            "{label}: {accepted} of {drafted}"
        );
        let mut counts = vec![0u64; joint.len()];
        for tokens in &runs {
            let i = joint
                .iter()
                .position(|w| w.0 == (tokens[0], tokens[1]))
                .unwrap_or_else(|| panic!("{label}: tokens {tokens:?} outside the support"));
            counts[i] += 1;
        }
        let n = runs.len() as u64;
        let expected: Vec<f64> = joint.iter().map(|w| w.1).collect();
        let (stat, df) = crate::sampling::chi_square(&counts, &expected, n);
        let bound = chi2_999(df);
        eprintln!("{label}: chi-square {stat:.2} on {df} df (bound {bound:.2}), {n} runs, {accepted} of {drafted} drafts kept");
        assert!(
            stat < bound,
            "{label}: chi-square {stat:.2} on {df} df ≥ {bound}: {counts:?} vs {expected:?}"
        );
    }
}

/// Chi-square's 99.9% quantile for `df` degrees of freedom (Wilson–Hilferty: within 1% of
/// the table from 10 df on; the table below that).
fn chi2_999(df: usize) -> f64 {
    if (1..=10).contains(&df) {
        return crate::sampling::CHI2_999[df - 1];
    }
    let d = df.max(1) as f64;
    let h = 2.0 / (9.0 * d);
    d * (1.0 - h + 3.0902 * h.sqrt()).powi(3)
}

#[test]
fn a_draft_with_another_vocabulary_is_refused() {
    let m = common::model();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("renamed.gguf");
    common::tiny::write_tiny_llama_seeded(&path, false, 1, |md| {
        if let Some(candle_core::quantized::gguf_file::Value::Array(tokens)) =
            md.get_mut("tokenizer.ggml.tokens")
        {
            tokens.swap(300, 301);
        }
    });
    let other =
        nanollm::model::source::load(&path, &candle_core::Device::Cpu, false).expect("load");
    let e = nanollm::engine::spec::draft::check_compatible(
        (&m.decoder, &m.tokenizer),
        (&other.decoder, &other.tokenizer),
        "renamed.gguf",
    )
    .expect_err("refused");
    let line = format!("{e:#}");
    assert!(
        line.starts_with("--draft-model renamed.gguf: token 300 is "),
        "{line}"
    );
    assert!(!line.contains('\n'));
    // And from the command line: one line, a non-zero exit.
    let out = common::nanollm()
        .args(["generate", "-n", "4", "--spec", "draft", "--draft-model"])
        .arg(&path)
        .arg("hello")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("token 300 is"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
