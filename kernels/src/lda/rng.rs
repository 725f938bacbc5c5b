//! [`FastRng`]: the small, fast generator the LDA samplers draw their uniforms from.

/// A 64-bit "wyrand"-style generator: one add and one 64×64→128 multiply per draw.
/// Statistically good enough for Monte Carlo sampling (it passes the usual batteries),
/// not for cryptography. Deterministic for a given seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FastRng {
    state: u64,
}

impl FastRng {
    const INCREMENT: u64 = 0xa076_1d64_78bd_642f;
    const MIX: u64 = 0xe703_7ed1_a0b4_28db;

    /// A generator seeded with `seed` (every seed, including 0, is fine).
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 uniformly distributed bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::INCREMENT);
        let t = u128::from(self.state) * u128::from(self.state ^ Self::MIX);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// A uniform `f32` in `[0, 1)` with 24 random bits (every value is a multiple of 2⁻²⁴).
    #[inline]
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// A uniform `f64` in `[0, 1)` with 53 random bits.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `0..n` (`n > 0`; returns 0 for `n == 0`), by the
    /// multiply-shift method (bias below 2⁻³² for `n < 2³²`).
    #[inline]
    pub fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * u64::from(n)) >> 32) as u32
    }
}

/// SplitMix64's finalizer (as `harp_splitmix64` in `kernels/cuda/lda.cu`).
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The `i`-th counter-based uniform of `seed`: the top 24 bits of
/// `splitmix64(seed ^ splitmix64(i))` times `2⁻²⁴` (exact in `f32`), in `[0, 1)`. The
/// uniforms [`sample_parallel`](super::sample_parallel) takes, drawn the same way on the
/// host and by the CUDA version's generator (`DeviceUniforms::generate`), bit for bit.
pub fn counter_uniform(seed: u64, i: u64) -> f32 {
    let h = splitmix64(seed ^ splitmix64(i));
    (h >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
}
