//! The block pool under random workloads (property test): sequences arrive with prompts that
//! often share prefixes, take cached prefix blocks, grow, file their full prompt blocks in
//! the prefix cache, get preempted or finish, in any order. At every point each block's
//! reference count equals the number of block tables naming it, no block is both free and in
//! use, and once every sequence is gone the pool is back to full.
use nanollm::kv::{BlockKey, BlockTable, KernelClass, KvDtype, KvPool, KvShape, ROOT_HASH};
use proptest::prelude::*;
use std::collections::HashMap;

const BS: usize = 4;
const MAX_BLOCKS: usize = 24;

struct Seq {
    prompt: Vec<u32>,
    table: BlockTable,
    hashes: Vec<u128>,
    len: usize,
}

fn key(parent: u128, tokens: &[u32]) -> BlockKey {
    BlockKey {
        parent,
        group: 0,
        class: KernelClass::Prompt,
        tokens: tokens.to_vec(),
    }
}

/// Take the cached blocks of the prompt's leading full blocks (at most len − 1 tokens).
fn admit(pool: &mut KvPool, s: &mut Seq) {
    let limit = s.prompt.len() - 1;
    let mut parent = ROOT_HASH;
    while (s.table.blocks().len() + 1) * BS <= limit {
        let b = s.table.blocks().len();
        let k = key(parent, &s.prompt[b * BS..(b + 1) * BS]);
        let Some(block) = pool.share_cached(&k) else {
            break;
        };
        parent = k.hash();
        s.table.push_cached(block, BS);
        s.hashes.push(parent);
    }
    s.len = s.table.len();
}

/// Compute `n` more tokens (reserve + commit), then file newly full prompt blocks.
fn grow(pool: &mut KvPool, s: &mut Seq, n: usize) -> bool {
    let want = s.len + n;
    if s.table.reserve(pool, want).is_err() {
        return false;
    }
    s.table.commit(want, BS);
    s.len = want;
    let full = s.prompt.len().min(s.len) / BS;
    while s.hashes.len() < full {
        let b = s.hashes.len();
        let k = key(
            s.hashes.last().copied().unwrap_or(ROOT_HASH),
            &s.prompt[b * BS..(b + 1) * BS],
        );
        let h = k.hash();
        pool.cache_block(s.table.blocks()[b], k);
        s.hashes.push(h);
    }
    true
}

fn check(pool: &KvPool, seqs: &[Seq]) {
    let mut refs: HashMap<u32, u32> = HashMap::new();
    for s in seqs {
        for &b in s.table.blocks() {
            *refs.entry(b).or_default() += 1;
        }
    }
    for (&b, &n) in &refs {
        assert_eq!(pool.ref_count(b), n, "block {b}");
    }
    assert_eq!(pool.num_used_blocks(), refs.len());
    assert_eq!(pool.num_used_blocks() + pool.num_free_blocks(), MAX_BLOCKS);
}

#[derive(Debug, Clone)]
enum Op {
    /// A new sequence: a prompt drawn from a few shared openings plus a tail.
    Add { opening: usize, tail: Vec<u32> },
    /// Sequence i (mod count) computes n tokens.
    Grow { i: usize, n: usize },
    /// Sequence i finishes (or is preempted): its blocks go back.
    Finish { i: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..3, prop::collection::vec(0u32..3, 1..10))
            .prop_map(|(opening, tail)| Op::Add { opening, tail }),
        (0usize..8, 1usize..9).prop_map(|(i, n)| Op::Grow { i, n }),
        (0usize..8).prop_map(|i| Op::Finish { i }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn random_workloads_never_leak_or_double_free(ops in prop::collection::vec(op(), 1..80)) {
        let shape = KvShape { num_layers: 1, num_key_value_heads: 1, head_dim: 8, dtype: KvDtype::F16, latent: false };
        let mut pool = KvPool::new(shape, BS, MAX_BLOCKS).expect("pool");
        let openings: [Vec<u32>; 3] = [vec![1; 8], (0..9).collect(), vec![7, 7, 7, 7, 1, 2, 3, 4, 5, 6, 7, 8]];
        let mut seqs: Vec<Seq> = Vec::new();
        for op in ops {
            match op {
                Op::Add { opening, tail } => {
                    let mut prompt = openings[opening].clone();
                    prompt.extend(tail);
                    let mut s = Seq { prompt, table: BlockTable::new(), hashes: Vec::new(), len: 0 };
                    admit(&mut pool, &mut s);
                    // Shared blocks are exactly whole blocks, never the last prompt token.
                    prop_assert!(s.len.is_multiple_of(BS) && s.len < s.prompt.len());
                    seqs.push(s);
                }
                Op::Grow { i, n } if !seqs.is_empty() => {
                    let i = i % seqs.len();
                    let before = (seqs[i].table.blocks().len(), seqs[i].len);
                    if !grow(&mut pool, &mut seqs[i], n) {
                        // A failed reservation takes nothing.
                        prop_assert_eq!((seqs[i].table.blocks().len(), seqs[i].len), before);
                    }
                }
                Op::Finish { i } if !seqs.is_empty() => {
                    let i = i % seqs.len();
                    let mut s = seqs.swap_remove(i);
                    s.table.release(&mut pool);
                }
                _ => {}
            }
            check(&pool, &seqs);
        }
        for mut s in seqs.drain(..) {
            s.table.release(&mut pool);
        }
        prop_assert_eq!(pool.num_used_blocks(), 0);
        prop_assert_eq!(pool.num_free_blocks(), MAX_BLOCKS);
    }
}

/// A block in the prefix cache survives its sequence, is shared by the next sequence with
/// the same prefix, and is evicted least recently used first when the pool needs blocks.
#[test]
fn released_cached_blocks_are_reused_then_evicted_lru() {
    let shape = KvShape {
        num_layers: 1,
        num_key_value_heads: 1,
        head_dim: 8,
        dtype: KvDtype::F16,
        latent: false,
    };
    let mut pool = KvPool::new(shape, BS, 3).expect("pool");
    let mut a = Seq {
        prompt: vec![1, 2, 3, 4, 5],
        table: BlockTable::new(),
        hashes: Vec::new(),
        len: 0,
    };
    assert!(grow(&mut pool, &mut a, 5));
    let first = a.table.blocks()[0];
    a.table.release(&mut pool);
    assert_eq!(
        (pool.num_used_blocks(), pool.num_cached_free_blocks()),
        (0, 1)
    );
    // Same opening: the cached block is shared again.
    let mut b = Seq {
        prompt: vec![1, 2, 3, 4, 9],
        table: BlockTable::new(),
        hashes: Vec::new(),
        len: 0,
    };
    admit(&mut pool, &mut b);
    assert_eq!((b.len, b.table.blocks()[0]), (4, first));
    // A prompt of exactly one block: its only block is not looked up (the last token runs).
    let mut c = Seq {
        prompt: vec![1, 2, 3, 4],
        table: BlockTable::new(),
        hashes: Vec::new(),
        len: 0,
    };
    admit(&mut pool, &mut c);
    assert_eq!(c.len, 0);
    b.table.release(&mut pool);
    // Three fresh blocks needed: the cached one is evicted last, after the free ones.
    let mut d = Seq {
        prompt: vec![9; 12],
        table: BlockTable::new(),
        hashes: Vec::new(),
        len: 0,
    };
    assert!(grow(&mut pool, &mut d, 12));
    assert!(d.table.blocks().contains(&first));
    assert!(!pool.is_cached(&key(ROOT_HASH, &[1, 2, 3, 4])));
}
