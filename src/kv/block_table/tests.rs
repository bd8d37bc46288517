//! [`BlockTable`]'s tests: block edges, failed reservations, sliding groups' windows.
use super::*;
use crate::kv::{KvDtype, KvShape};

fn pool(block_size: usize, max_blocks: usize) -> KvPool {
    let shape = KvShape {
        num_layers: 1,
        num_key_value_heads: 1,
        head_dim: 8,
        dtype: KvDtype::F16,
        latent: false,
    };
    match KvPool::new(shape, block_size, max_blocks) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// k·block_size tokens need k blocks; one more token needs k + 1.
#[test]
fn block_edges() -> Result<()> {
    for bs in [1usize, 7, 16, 256] {
        let mut p = pool(bs, 1000);
        for k in 1..4 {
            let mut t = BlockTable::new();
            t.reserve(&mut p, k * bs)?;
            assert_eq!(t.blocks().len(), k, "bs {bs}");
            t.commit(k * bs, bs);
            assert_eq!(t.last_block_fill(bs), bs);
            t.reserve(&mut p, k * bs + 1)?;
            assert_eq!(t.blocks().len(), k + 1, "bs {bs}");
            t.commit(k * bs + 1, bs);
            assert_eq!(t.last_block_fill(bs), 1);
            t.release(&mut p);
            assert_eq!(p.num_used_blocks(), 0);
        }
    }
    Ok(())
}

/// A reservation the pool cannot satisfy takes nothing.
#[test]
fn failed_reserve_leaves_the_table_and_pool_as_they_were() -> Result<()> {
    let mut p = pool(4, 3);
    let mut t = BlockTable::new();
    t.reserve(&mut p, 5)?;
    t.commit(5, 4);
    assert!(t.reserve(&mut p, 13).is_err());
    assert_eq!((t.blocks().len(), t.len()), (2, 5));
    assert_eq!(p.num_used_blocks(), 2);
    t.release(&mut p);
    assert_eq!(p.num_free_blocks(), 3);
    Ok(())
}

/// A hybrid pool (one full layer, one sliding layer of window W): for every block size,
/// window, length and chunk, the sliding group holds at most ⌈(W − 1 + C)/B⌉ + 1 blocks
/// while a chunk of C tokens runs and ⌈W/B⌉ + 1 between steps (exactly the blocks that
/// intersect positions len + 1 − W ..), the full group every block, and releasing gives
/// every block back.
#[test]
fn a_sliding_group_holds_only_its_window() -> Result<()> {
    use crate::kv::KvGroups;
    let shape = KvShape {
        num_layers: 2,
        num_key_value_heads: 1,
        head_dim: 8,
        dtype: KvDtype::F16,
        latent: false,
    };
    for bs in [1usize, 3, 16] {
        for w in [1usize, 5, 16, 40] {
            let groups = KvGroups::of(&[None, Some(w)]);
            let mut p = KvPool::with_groups(shape, groups, bs, 10_000)?;
            let sliding = 1;
            for chunk in [1usize, 4, 23] {
                let mut t = BlockTable::new();
                let mut len = 0;
                while len < 120 {
                    let end = len + chunk;
                    t.reserve(&mut p, end)?;
                    let during = t.num_blocks_in(sliding);
                    assert!(
                        during <= (w - 1 + chunk).div_ceil(bs) + 1,
                        "bs {bs} W {w} C {chunk} at {len}: {during}"
                    );
                    t.commit(end, bs);
                    t.drop_out_of_window(&mut p);
                    len = end;
                    let held: Vec<usize> = (0..t.num_logical_blocks())
                        .filter(|&b| t.group(sliding)[b] != DROPPED)
                        .collect();
                    let first = (len + 1).saturating_sub(w) / bs;
                    assert_eq!(
                        held,
                        (first..len.div_ceil(bs)).collect::<Vec<_>>(),
                        "bs {bs} W {w} at {len}"
                    );
                    assert!(held.len() <= w.div_ceil(bs) + 1);
                    assert_eq!(t.num_blocks_in(0), len.div_ceil(bs));
                }
                t.release(&mut p);
                assert_eq!(p.num_used_blocks(), 0);
            }
        }
    }
    Ok(())
}
