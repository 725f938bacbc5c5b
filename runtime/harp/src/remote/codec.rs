//! App payloads on the wire: task arguments and outputs are serialized with postcard (the
//! app's types are serde types), and rows convert between the runtime's and the wire's
//! mirrors.

use crate::app::Payload;
use crate::error::HarpError;
use harp_core::{ParamKey, RowData};
use harp_wire::{ParamKeyWire, RowWire};

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
