//! One group of eight weight rows against several quantized inputs on this CPU's kernel
//! ([`Kernel`]): the dispatch from a layout ([`Packed`]) to its AVX2, VNNI or portable dot
//! product, inputs taken up to eight at a time.
#[cfg(target_arch = "x86_64")]
use super::split::next_inputs;
use super::split::scatter;
use super::{mxfp4, q2_k_q3_k, q4_k, q5, q6_k};
use super::{Kernel, Packed, QuantMatrix};
use crate::kernels::matmul::q4_1_q8_0::{self, ROWS};
use crate::kernels::matmul::q8_1::Q8_1Vector;

impl QuantMatrix {
    /// The eight results of group `g` against `x`.
    #[cfg(test)]
    pub(super) fn group_dot(&self, kernel: Kernel, g: usize, x: &Q8_1Vector) -> [f32; ROWS] {
        let mut out = [0f32; ROWS];
        self.group_dot_many(kernel, g, std::slice::from_ref(x), &mut |_, y: &[f32]| {
            out.copy_from_slice(y)
        });
        out
    }

    /// The eight results of group `g` against every input `v` of `xs`, handed to
    /// `out(v, results)`. Inputs go through the kernel several at a time (the weights
    /// unpacked once for them all); each input's arithmetic is the same in any grouping.
    #[inline]
    pub(super) fn group_dot_many(
        &self,
        kernel: Kernel,
        g: usize,
        xs: &[Q8_1Vector],
        out: &mut impl FnMut(usize, &[f32]),
    ) {
        let n = xs.len();
        let range = self.group_range(g);
        let sr = self.super_range(g);
        let mut put = |v0: usize, ys: &[[f32; ROWS]]| scatter(out, v0, ys);
        let mut v0 = 0;
        while v0 < n {
            let rest = &xs[v0..];
            // This CPU's kernel on the next inputs: the group's block columns, and for the
            // super-block layouts (Q4K, Q6K) its super-blocks, one per eight block columns.
            #[cfg(target_arch = "x86_64")]
            macro_rules! run {
                ($kernel:path, $eight:expr, $blocks:expr $(, $supers:expr)?) => {
                    // SAFETY: Kernel::detect chose Avx2 only when the CPU has AVX2, FMA and
                    // F16C, Vnni and Vnni512 only with AVX512-VNNI and AVX512-VL too; every
                    // input was quantized from a row of `cols` values, so it holds
                    // `cols / 32` blocks, the group's block columns.
                    unsafe {
                        next_inputs!(
                            $kernel,
                            (&$blocks[range.clone()] $(, &$supers[sr.clone()])?),
                            rest,
                            put,
                            v0,
                            $eight
                        )
                    }
                };
            }
            match (kernel, &self.packed) {
                #[cfg(target_arch = "x86_64")]
                (Kernel::Avx2, Packed::Q4_1(b)) => {
                    v0 += run!(crate::kernels::matmul::q4_1_q8_0_avx2::q4_1x8_dot, false, b)
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Avx2, Packed::Q8_0(b)) => {
                    v0 += run!(crate::kernels::matmul::q4_1_q8_0_avx2::q8_0x8_dot, false, b)
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Avx2, Packed::Q8H(b)) => {
                    v0 += run!(crate::kernels::matmul::q2_k_q3_k_avx2::q8hx8_dot, false, b)
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Avx2, Packed::Q4K { blocks, supers }) => {
                    v0 += run!(
                        crate::kernels::matmul::q4_k_avx2::q4kx8_dot,
                        false,
                        blocks,
                        supers
                    )
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Avx2, Packed::Q6K { blocks, supers }) => {
                    v0 += run!(
                        crate::kernels::matmul::q6_k_avx2::q6kx8_dot,
                        false,
                        blocks,
                        supers
                    )
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Avx2, Packed::Q5_1(b)) => {
                    v0 += run!(crate::kernels::matmul::q5_avx2::q5_1x8_dot, false, b)
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Avx2, Packed::Q5K { blocks, supers }) => {
                    v0 += run!(
                        crate::kernels::matmul::q5_avx2::q5kx8_dot,
                        false,
                        blocks,
                        supers
                    )
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Vnni | Kernel::Vnni512, Packed::Q5_1(b)) => {
                    v0 += run!(crate::kernels::matmul::q5_avx2::q5_1x8_dot_vnni, true, b)
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Vnni | Kernel::Vnni512, Packed::Q5K { blocks, supers }) => {
                    v0 += run!(
                        crate::kernels::matmul::q5_avx2::q5kx8_dot_vnni,
                        true,
                        blocks,
                        supers
                    )
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Vnni | Kernel::Vnni512, Packed::Q4_1(b)) => {
                    v0 += run!(
                        crate::kernels::matmul::q4_1_q8_0_avx2::q4_1x8_dot_vnni,
                        true,
                        b
                    )
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Vnni | Kernel::Vnni512, Packed::Q8_0(b)) => {
                    v0 += run!(
                        crate::kernels::matmul::q4_1_q8_0_avx2::q8_0x8_dot_vnni,
                        true,
                        b
                    )
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Vnni | Kernel::Vnni512, Packed::Q8H(b)) => {
                    v0 += run!(
                        crate::kernels::matmul::q2_k_q3_k_avx2::q8hx8_dot_vnni,
                        true,
                        b
                    )
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Vnni | Kernel::Vnni512, Packed::Q4K { blocks, supers }) => {
                    v0 += run!(
                        crate::kernels::matmul::q4_k_avx2::q4kx8_dot_vnni,
                        true,
                        blocks,
                        supers
                    )
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Vnni | Kernel::Vnni512, Packed::Q6K { blocks, supers }) => {
                    v0 += run!(
                        crate::kernels::matmul::q6_k_avx2::q6kx8_dot_vnni,
                        true,
                        blocks,
                        supers
                    )
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Avx2, Packed::Mxfp4(b)) => {
                    v0 += run!(crate::kernels::matmul::mxfp4_avx2::mxfp4x8_dot, false, b)
                }
                #[cfg(target_arch = "x86_64")]
                (Kernel::Vnni | Kernel::Vnni512, Packed::Mxfp4(b)) => {
                    v0 += run!(
                        crate::kernels::matmul::mxfp4_avx2::mxfp4x8_dot_vnni,
                        true,
                        b
                    )
                }
                (_, Packed::Mxfp4(b)) => {
                    put(v0, &[mxfp4::mxfp4x8_dot(&b[range.clone()], &rest[0])]);
                    v0 += 1;
                }
                (_, Packed::Q4K { blocks, supers }) => {
                    let (b, s) = (&blocks[range.clone()], &supers[sr.clone()]);
                    put(v0, &[q4_k::q4kx8_dot(b, s, &rest[0])]);
                    v0 += 1;
                }
                (_, Packed::Q6K { blocks, supers }) => {
                    let (b, s) = (&blocks[range.clone()], &supers[sr.clone()]);
                    put(v0, &[q6_k::q6kx8_dot(b, s, &rest[0])]);
                    v0 += 1;
                }
                (_, Packed::Q5_1(b)) => {
                    put(v0, &[q5::q5_1x8_dot(&b[range.clone()], &rest[0])]);
                    v0 += 1;
                }
                (_, Packed::Q5K { blocks, supers }) => {
                    let (b, s) = (&blocks[range.clone()], &supers[sr.clone()]);
                    put(v0, &[q5::q5kx8_dot(b, s, &rest[0])]);
                    v0 += 1;
                }
                (_, Packed::Q4_1(b)) => {
                    put(v0, &[q4_1_q8_0::q4_1x8_dot(&b[range.clone()], &rest[0])]);
                    v0 += 1;
                }
                (_, Packed::Q8_0(b)) => {
                    put(v0, &[q4_1_q8_0::q8_0x8_dot(&b[range.clone()], &rest[0])]);
                    v0 += 1;
                }
                (_, Packed::Q8H(b)) => {
                    put(v0, &[q2_k_q3_k::q8hx8_dot(&b[range.clone()], &rest[0])]);
                    v0 += 1;
                }
                (_, Packed::F16(_) | Packed::BF16(_) | Packed::F32(_)) => {
                    unreachable!("float matrices take f32 inputs (float_group_dot_many)")
                }
            }
        }
    }
}
