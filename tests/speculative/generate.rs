//! The one-request loop (`generate --spec`): greedy speculative == plain bit for bit for
//! k = 1 ..= 8 on the default model (Q4_1) and the real Gemma 3 270M (Q4_K_M, sliding
//! layers whose blocks leave the window), forced and with the turn-down rule, and seeded
//! sampling; the verify rows' K/V rolled back (every block back at the end).
use crate::common;
use crate::{requests, PASSAGE, PROMPTS};
use nanollm::engine::spec::{SpecChoice, Speculative};
use nanollm::engine::{CacheConfig, Generation, Request, SamplingParams};
use nanollm::kv::KvDtype;
use nanollm::model::Loaded;
use std::sync::atomic::AtomicBool;

fn generate(m: &Loaded, r: &Request) -> Generation {
    let stop = AtomicBool::new(false);
    nanollm::engine::generate(&m.decoder, &m.tokenizer, r, &stop, |_| Ok(())).expect("generate")
}

/// Every request of `reqs`, plain then speculative for k = 1 ..= 8 (odd k forced, even k
/// under the turn-down rule): the same tokens, text and finish reason, every block back.
fn same_as_plain(m: &Loaded, reqs: &[Request]) -> (u64, u64) {
    let (mut accepted, mut drafted) = (0, 0);
    for (i, r) in reqs.iter().enumerate() {
        let plain = generate(m, r);
        for k in 1..=8 {
            let mut spec = Speculative::ngram(k, 1, 3).expect("spec");
            spec.force = k % 2 == 1;
            let s = Request {
                speculative: SpecChoice::On(spec),
                ..r.clone()
            };
            let g = generate(m, &s);
            assert_eq!(g.tokens, plain.tokens, "k {k}, prompt {i}");
            assert_eq!(g.text, plain.text, "k {k}, prompt {i}");
            assert_eq!(g.finish_reason, plain.finish_reason, "k {k}, prompt {i}");
            assert_eq!(g.stats.kv_cache.blocks_leaked, 0);
            assert_eq!(
                g.stats.kv_cache.tokens, plain.stats.kv_cache.tokens,
                "rolled back"
            );
            let report = g.stats.spec.expect("a spec report");
            assert!(report.counts.num_draft_tokens_per_pos.len() <= k);
            accepted += report.counts.num_accepted_tokens;
            drafted += report.counts.num_draft_tokens;
        }
        assert!(plain.stats.spec.is_none());
    }
    (accepted, drafted)
}

#[test]
fn greedy_generate_spec_equals_plain_on_the_default_model() {
    let m = common::model();
    let cache = CacheConfig {
        dtype: KvDtype::F16,
        block_size: 5,
        swa_full: false,
        evict: None,
    };
    let reqs = requests(m, 40, SamplingParams::greedy(), cache);
    let (accepted, drafted) = same_as_plain(m, &reqs);
    // Not vacuous: drafts were kept and rolled back.
    assert!(
        accepted > 0 && accepted < drafted,
        "{accepted} of {drafted}"
    );
}

#[test]
fn greedy_generate_spec_equals_plain_on_gemma3() {
    let m = common::gemma3();
    // Gemma 3's sliding layers hold 512 tokens: a long passage pushes blocks out of the
    // window while drafts are verified and rolled back.
    let long: String = (0..12).map(|_| PASSAGE).collect::<Vec<_>>().join(" ");
    let cache = CacheConfig {
        dtype: KvDtype::F16,
        block_size: 16,
        swa_full: false,
        evict: None,
    };
    let mut reqs: Vec<Request> = PROMPTS[..2]
        .iter()
        .map(|p| common::greedy_request(m, &p.replace("{P}", PASSAGE), 32, cache))
        .collect();
    reqs.push(common::greedy_request(
        m,
        &format!("Repeat this text: {long}\nRepeat:"),
        48,
        cache,
    ));
    assert!(
        reqs[2].prompt_ids.len() > 520,
        "{}",
        reqs[2].prompt_ids.len()
    );
    let (accepted, drafted) = same_as_plain(m, &reqs);
    assert!(
        accepted > 0 && accepted < drafted,
        "{accepted} of {drafted}"
    );
}

#[test]
fn seeded_sampling_and_stops_equal_plain() {
    let m = common::model();
    let sampling = SamplingParams {
        temperature: 0.8,
        top_k: Some(40),
        top_p: Some(0.95),
        seed: 59,
        repeat_penalty: 1.1,
        repeat_last_n: 64,
    };
    let mut reqs = requests(m, 60, sampling, CacheConfig::default());
    for (i, r) in reqs.iter_mut().enumerate() {
        r.ignore_eos = false;
        if i == 2 {
            r.stop_strings = vec!["library".into()];
        }
    }
    same_as_plain(m, &reqs);
}

#[test]
fn naive_decode_refuses_spec() {
    let m = common::model();
    let mut r = common::greedy_request(m, "hi", 4, CacheConfig::default());
    r.mode = nanollm::engine::DecodeMode::Naive;
    r.speculative = SpecChoice::On(Speculative::ngram(4, 1, 3).expect("spec"));
    let stop = AtomicBool::new(false);
    let e = nanollm::engine::generate(&m.decoder, &m.tokenizer, &r, &stop, |_| Ok(()))
        .expect_err("refused");
    assert!(e.to_string().contains("--decode naive"), "{e}");
}
