//! What the LDA driver knows of each word–topic block between its owners: the checksum
//! its last owner reported, or that an owner found it stale since the last resync (see
//! [`BlockExpectation`]).

use super::BlockExpectation;

/// The driver's record of the blocks, one entry per block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Blocks {
    /// Each block's checksum as its last owner left it (`None`: not sampled yet).
    checksums: Vec<Option<u64>>,
    /// An owner found the block stale since the last resync.
    stale: Vec<bool>,
}

impl Blocks {
    pub(super) fn new(blocks: usize) -> Self {
        Self {
            checksums: vec![None; blocks],
            stale: vec![false; blocks],
        }
    }

    /// Rebuilds the record from a saved driver (`stale` is empty in drivers saved before
    /// it was kept); `None` when the lengths do not agree.
    pub(super) fn from_saved(checksums: Vec<Option<u64>>, stale: Vec<bool>) -> Option<Self> {
        let stale = if stale.is_empty() {
            vec![false; checksums.len()]
        } else {
            stale
        };
        (stale.len() == checksums.len()).then_some(Self { checksums, stale })
    }

    pub(super) fn checksums(&self) -> &[Option<u64>] {
        &self.checksums
    }

    pub(super) fn stale(&self) -> &[bool] {
        &self.stale
    }

    /// What the next owner of `block` is told.
    pub(super) fn expectation(&self, block: usize) -> BlockExpectation {
        if self.stale.get(block).copied().unwrap_or(false) {
            return BlockExpectation::Stale;
        }
        match self.checksums.get(block).copied().flatten() {
            Some(checksum) => BlockExpectation::Checksum(checksum),
            None => BlockExpectation::Unknown,
        }
    }

    /// An owner sampled `block` and left it with `checksum`; `stale`: it found counts that
    /// differ from what was expected. A stale block stays stale until [`Self::checked`].
    /// `None` when there is no such block.
    pub(super) fn sampled(&mut self, block: usize, checksum: u64, stale: bool) -> Option<()> {
        *self.checksums.get_mut(block)? = Some(checksum);
        *self.stale.get_mut(block)? |= stale;
        Some(())
    }

    /// A resync's check read `block` with `checksum`: the tables were rebuilt from the
    /// assignments, so the block is stale again only if the check found it so.
    pub(super) fn checked(&mut self, block: usize, checksum: u64, stale: bool) -> Option<()> {
        *self.checksums.get_mut(block)? = Some(checksum);
        *self.stale.get_mut(block)? = stale;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_starts_unknown_and_then_carries_its_last_checksum() {
        let mut blocks = Blocks::new(2);
        assert_eq!(blocks.expectation(0), BlockExpectation::Unknown);
        blocks.sampled(0, 7, false).unwrap();
        assert_eq!(blocks.expectation(0), BlockExpectation::Checksum(7));
        blocks.sampled(0, 9, false).unwrap();
        assert_eq!(blocks.expectation(0), BlockExpectation::Checksum(9));
        assert_eq!(blocks.expectation(1), BlockExpectation::Unknown);
        assert_eq!(blocks.sampled(2, 1, false), None);
    }

    #[test]
    fn a_stale_block_stays_stale_for_later_owners_until_a_resync_checks_it() {
        let mut blocks = Blocks::new(2);
        blocks.sampled(1, 3, true).unwrap();
        assert_eq!(blocks.expectation(1), BlockExpectation::Stale);
        // The next owner's checksum matches the server (its raise changed nothing), but
        // the counts may still miss a third owner's tokens.
        blocks.sampled(1, 4, false).unwrap();
        assert_eq!(blocks.expectation(1), BlockExpectation::Stale);
        assert_eq!(blocks.expectation(0), BlockExpectation::Unknown);
        blocks.checked(1, 5, false).unwrap();
        assert_eq!(blocks.expectation(1), BlockExpectation::Checksum(5));
        blocks.checked(1, 6, true).unwrap();
        assert_eq!(blocks.expectation(1), BlockExpectation::Stale);
    }

    #[test]
    fn saved_records_without_stale_flags_load_and_mismatched_lengths_do_not() {
        let blocks = Blocks::from_saved(vec![Some(1), None], Vec::new()).unwrap();
        assert_eq!(blocks.stale(), [false, false]);
        assert_eq!(blocks.expectation(0), BlockExpectation::Checksum(1));
        let stale = Blocks::from_saved(vec![Some(1), None], vec![true, false]).unwrap();
        assert_eq!(stale.expectation(0), BlockExpectation::Stale);
        assert_eq!(Blocks::from_saved(vec![Some(1)], vec![true, false]), None);
    }
}
