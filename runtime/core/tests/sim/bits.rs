//! A small dense bit set of contribution ids.
//!
//! The simulator names every single `update(key, delta)` call with a dense `u32`
//! contribution id. Server rows, cached rows and consistency floors carry the set of
//! contributions they contain, so the checker can compare them exactly (set inclusion)
//! instead of only comparing sums.

/// A set of contribution ids, one bit each.
#[derive(Clone, Debug, Default)]
pub struct Bits {
    words: Vec<u64>,
}

impl Bits {
    pub fn insert(&mut self, id: u32) {
        let (word, bit) = (id as usize / 64, id % 64);
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << bit;
    }

    pub fn contains(&self, id: u32) -> bool {
        let (word, bit) = (id as usize / 64, id % 64);
        self.words.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }

    /// Every id of `self` is in `other`.
    pub fn is_subset(&self, other: &Bits) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| w & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    pub fn is_disjoint(&self, other: &Bits) -> bool {
        self.words.iter().zip(&other.words).all(|(a, b)| a & b == 0)
    }

    pub fn union_with(&mut self, other: &Bits) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    /// Same ids (trailing empty words do not matter).
    pub fn same_as(&self, other: &Bits) -> bool {
        self.is_subset(other) && other.is_subset(self)
    }

    /// The ids of `self` missing from `other`, in increasing order.
    pub fn minus(&self, other: &Bits) -> Vec<u32> {
        self.iter().filter(|id| !other.contains(*id)).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            (0..64u32)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| i as u32 * 64 + b)
        })
    }
}
