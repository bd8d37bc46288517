//! Kernels over one row at a time: RMSNorm ([`rms_norm`]), rotary position embedding
//! ([`rope`]) and the gated MLP's activations, SwiGLU and GeGLU ([`glu`]). AVX2 + FMA where
//! the CPU has them, plain loops otherwise.
pub mod glu;
pub mod rms_norm;
pub mod rope;
