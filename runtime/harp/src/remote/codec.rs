//! App payloads on the wire: task arguments and outputs are serialized with postcard (the
//! app's types are serde types), and rows convert between the runtime's and the wire's
//! mirrors.

use crate::app::Payload;
use crate::error::HarpError;
use crate::server::{AppliedPart, PartId};
use harp_core::{ParamKey, RowData};
use harp_wire::{AppliedPartWire, ParamKeyWire, RowWire};

/// Serializes an app payload (task arguments or output).
pub(crate) fn to_bytes<T: Payload>(value: &T) -> Result<Vec<u8>, HarpError> {
    postcard::to_allocvec(value)
        .map_err(|e| HarpError::Remote(format!("cannot serialize a payload: {e}")))
}

/// Deserializes an app payload; a malformed one is a typed error, not a panic.
pub(crate) fn from_bytes<T: Payload>(bytes: &[u8]) -> Result<T, HarpError> {
    postcard::from_bytes(bytes)
        .map_err(|e| HarpError::Remote(format!("malformed payload from a peer: {e}")))
}

pub(crate) fn rows_to_wire(rows: Vec<(ParamKey, RowData)>) -> Vec<(ParamKeyWire, RowWire)> {
    rows.into_iter()
        .map(|(k, r)| (k.into(), r.into()))
        .collect()
}

pub(crate) fn rows_from_wire(rows: Vec<(ParamKeyWire, RowWire)>) -> Vec<(ParamKey, RowData)> {
    rows.into_iter()
        .map(|(k, r)| (k.into(), r.into()))
        .collect()
}

/// A flush part id on the wire: `Message::Apply`'s `flush_id` of a part that is not staged,
/// or [`NO_PART_ID`] for a part that carries none.
pub(crate) const NO_PART_ID: u64 = u64::MAX;

/// Applied flush parts as the wire carries them.
pub(crate) fn applied_to_wire(applied: &[AppliedPart]) -> Vec<AppliedPartWire> {
    applied
        .iter()
        .map(|p| AppliedPartWire {
            node: p.part.node,
            seq: p.part.seq,
            epoch: p.epoch,
        })
        .collect()
}

/// Applied flush parts from the wire.
pub(crate) fn applied_from_wire(applied: &[AppliedPartWire]) -> Vec<AppliedPart> {
    applied
        .iter()
        .map(|p| AppliedPart {
            part: PartId {
                node: p.node,
                seq: p.seq,
            },
            epoch: p.epoch,
        })
        .collect()
}
