//! harp's transport between node processes: QUIC (quinn) with mutual TLS under a per-job
//! certificate authority.
//!
//! | module | owns |
//! |---|---|
//! | [`credentials`] | the job's certificate authority (generated or user-provided), node identities, PEM files |
//! | [`tls`] | rustls client and server configurations that accept only peers holding the job's credentials |
//! | [`link`] | framed harp-wire messages over a connection: one ordered control stream, one stream per bulk message |
//! | [`state_link`] | the bulk streams of a link that fetches an executor state: one state chunk each, its data not copied |
//! | [`endpoint`] | the QUIC endpoint: bind, connect and accept with deadlines, idle timeout and keep-alive |
//!
//! Only nodes holding a certificate issued by the job's authority can connect, and a node
//! accepts only servers with such a certificate: a process from another job, or without
//! credentials, is refused during the handshake.

pub mod credentials;
pub mod endpoint;
pub mod error;
pub mod link;
pub mod state_link;
pub mod tls;

pub use credentials::{JobCredentials, NodeIdentity};
pub use endpoint::{bind_udp, Handshaking, NetEndpoint, PeerConnection, TransportConfig};
pub use error::NetError;
pub use link::{Incoming, Link};
pub use state_link::IncomingChunk;
