//! How a product over a [`super::QuantMatrix`] is split: tasks of [`GROUPS_PER_TASK`] groups
//! of eight rows, kernel calls on up to eight inputs at a time ([`next_inputs!`]), and each
//! call's results scattered to the output ([`scatter`]).

/// Groups of eight rows handed to one thread at a time (32 rows: small enough to balance
/// two threads on a 576-row matrix, large enough to amortize the task; measured best of 16/32/64).
pub(super) const GROUPS_PER_TASK: usize = 4;

/// Hands the results `ys[k]` (one value per weight row) of inputs `v0 + k` to `put`.
#[inline]
pub(super) fn scatter<const R: usize>(
    put: &mut impl FnMut(usize, &[f32]),
    v0: usize,
    ys: &[[f32; R]],
) {
    for (k, y) in ys.iter().enumerate() {
        put(v0 + k, y);
    }
}

/// Run `$kernel` (generic over its number of inputs) on the next inputs of `$rest` —
/// eight (when `$eight`: the VNNI kernels have the registers for it), four, three, two or
/// one at a time — handing the results to `$put` from input `$v0` on; evaluates to how many
/// inputs it took. Each input's arithmetic is the same in any grouping.
#[cfg(target_arch = "x86_64")]
macro_rules! next_inputs {
    ($kernel:path, ($($blocks:expr),+), $rest:expr, $put:expr, $v0:expr, $eight:expr) => {
        match $rest {
            [a, b, c, d, e, f, g, h, ..] if $eight => {
                $put($v0, &$kernel($($blocks),+, [a, b, c, d, e, f, g, h]));
                8
            }
            [a, b, c, d, ..] => {
                $put($v0, &$kernel($($blocks),+, [a, b, c, d]));
                4
            }
            [a, b, c] => {
                $put($v0, &$kernel($($blocks),+, [a, b, c]));
                3
            }
            [a, b] => {
                $put($v0, &$kernel($($blocks),+, [a, b]));
                2
            }
            [a, ..] => {
                $put($v0, &$kernel($($blocks),+, [a]));
                1
            }
            [] => 1,
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(super) use next_inputs;
