//! A fast, deterministic hash for the runtime's maps keyed by [`ParamKey`] (and other small
//! integer ids).
//!
//! The standard library's default (SipHash with a random key) resists hash flooding by
//! untrusted input, at several times the cost of a multiply-and-mix. harp's keys are
//! (table, row) pairs of integers, the maps keyed by them sit on the hot path of every read,
//! update and checkpoint round (one lookup per row: with one weight per row, a node looks up
//! tens of thousands of keys per iteration), and a job's keys are chosen by its own app. So
//! these maps use [`KeyHasher`]: each integer written is folded in with a multiply, and
//! [`Hasher::finish`] applies the splitmix64 finalizer, so that every bit of the result
//! depends on every bit of the key (hashbrown takes its control bits from the top of the
//! hash and the bucket from the bottom; dashmap picks a shard from the bits below the top
//! seven). It is also deterministic: a map's iteration order no longer varies from run to
//! run.

use crate::ids::ParamKey;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher of [`KeyMap`]: see the module doc.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHasher {
    state: u64,
}

/// Builds [`KeyHasher`]s (for `HashMap::with_hasher`, `DashMap::with_hasher`).
pub type BuildKeyHasher = BuildHasherDefault<KeyHasher>;

/// A `HashMap` keyed by [`ParamKey`] with [`KeyHasher`].
pub type KeyMap<V> = HashMap<ParamKey, V, BuildKeyHasher>;

/// An odd constant with well-spread bits (2⁶⁴ / φ).
const FOLD: u64 = 0x9e37_79b9_7f4a_7c15;

impl KeyHasher {
    fn fold(&mut self, word: u64) {
        self.state = (self.state.rotate_left(23) ^ word).wrapping_mul(FOLD);
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.fold(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.fold(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.fold(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.fold(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.fold(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.fold(i as u64);
    }

    /// The splitmix64 finalizer of the folded state.
    fn finish(&self) -> u64 {
        mix64(self.state)
    }
}

/// The splitmix64 finalizer (Steele, Lea & Flood): every output bit depends on every input
/// bit. Shared by the core's hashes (this one, `shard_of`, random selection).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TableId;
    use std::collections::HashSet;
    use std::hash::{BuildHasher, Hash};

    fn hash(key: ParamKey) -> u64 {
        BuildKeyHasher::default().hash_one(key)
    }

    #[test]
    fn equal_keys_hash_equal_and_the_hash_is_the_same_in_every_run() {
        let key = ParamKey::new(TableId(3), 12_345);
        assert_eq!(hash(key), hash(ParamKey::new(TableId(3), 12_345)));
        // A fixed value, not one seeded per process (as `RandomState` would be): the fold
        // of 3 then 12,345, finalized, computed outside Rust.
        assert_eq!(hash(key), 0x894b_5100_77a5_30c0);
        let mut a = KeyHasher::default();
        key.hash(&mut a);
        let mut b = KeyHasher::default();
        key.hash(&mut b);
        assert_eq!(a.finish(), b.finish());
    }

    #[test]
    fn dense_and_strided_keys_spread_over_the_top_and_bottom_bits() {
        // Dense row ids of a few tables (what apps use). Every bucket of the low 10 bits and
        // of the 7 bits below the top 7 (dashmap's shard pick, hashbrown's control bits
        // sit above them) gets its share.
        // Strided ids too (a multiple of 1024, ids in the high half): a multiply alone
        // leaves their low bits equal, which the finalizer must fix.
        let keys: Vec<ParamKey> = (0..4u16)
            .flat_map(|t| (0..16_384u64).map(move |r| ParamKey::new(TableId(t), r)))
            .chain((0..16_384u64).map(|r| ParamKey::new(TableId(4), r << 10)))
            .chain((0..16_384u64).map(|r| ParamKey::new(TableId(5), r << 32)))
            .collect();
        let hashes: Vec<u64> = keys.iter().map(|k| hash(*k)).collect();
        assert_eq!(
            hashes.iter().collect::<HashSet<_>>().len(),
            keys.len(),
            "no two of these keys collide"
        );
        for (name, bucket) in [
            (
                "low 10 bits",
                Box::new(|h: u64| (h & 1023) as usize) as Box<dyn Fn(u64) -> usize>,
            ),
            ("bits 50..57", Box::new(|h: u64| ((h << 7) >> 57) as usize)),
            ("top 7 bits", Box::new(|h: u64| (h >> 57) as usize)),
        ] {
            let buckets = if name == "low 10 bits" { 1024 } else { 128 };
            let mut counts = vec![0usize; buckets];
            for h in &hashes {
                counts[bucket(*h)] += 1;
            }
            let expected = keys.len() / buckets;
            let (min, max) = (
                *counts.iter().min().unwrap_or(&0),
                *counts.iter().max().unwrap_or(&0),
            );
            assert!(
                min * 2 > expected && max < expected * 2,
                "{name}: buckets hold {min}..{max} keys, expected about {expected}"
            );
        }
    }

    #[test]
    fn byte_writes_fold_every_byte() {
        let mut a = KeyHasher::default();
        a.write(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let mut b = KeyHasher::default();
        b.write(&[1, 2, 3, 4, 5, 6, 7, 8, 10]);
        assert_ne!(a.finish(), b.finish());
    }

    #[test]
    fn a_key_map_works_as_a_map() {
        let mut map: KeyMap<u32> = KeyMap::default();
        for r in 0..1000u64 {
            map.insert(ParamKey::new(TableId(1), r), r as u32);
        }
        assert_eq!(map.len(), 1000);
        assert_eq!(map.get(&ParamKey::new(TableId(1), 777)), Some(&777));
        assert_eq!(map.get(&ParamKey::new(TableId(2), 777)), None);
    }
}
