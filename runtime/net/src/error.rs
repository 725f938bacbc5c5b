//! The transport's error type.

/// Errors of the transport layer, one variant per condition.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot generate certificates: {0}")]
    CertificateGeneration(String),
    #[error("cannot read credentials from {path}: {message}")]
    CredentialsUnreadable { path: String, message: String },
    #[error("cannot write credentials to {path}: {message}")]
    CredentialsUnwritable { path: String, message: String },
    #[error("invalid TLS configuration: {0}")]
    Tls(String),
    #[error("cannot listen on {addr}: {message}")]
    Bind {
        addr: std::net::SocketAddr,
        message: String,
    },
    #[error("cannot connect to {addr}: {message}")]
    Connect {
        addr: std::net::SocketAddr,
        message: String,
    },
    #[error("handshake with {addr} refused: {message}")]
    Handshake {
        addr: std::net::SocketAddr,
        message: String,
    },
    #[error("{what} timed out after {after_ms} ms")]
    Timeout { what: String, after_ms: u64 },
    #[error("protocol error from {addr}: {message}")]
    Protocol {
        addr: std::net::SocketAddr,
        message: String,
    },
    #[error("connection to {addr} lost: {message}")]
    ConnectionLost {
        addr: std::net::SocketAddr,
        message: String,
    },
}
