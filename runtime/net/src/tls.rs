//! rustls configurations for QUIC between nodes of one job: mutual TLS, both ends trusting
//! only the job's authority.

use crate::credentials::{JobCredentials, NodeIdentity};
use crate::error::NetError;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use std::sync::Arc;

/// The ALPN protocol id of harp's transport.
pub const ALPN: &[u8] = b"harp/1";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(creds: &JobCredentials) -> Result<Arc<RootCertStore>, NetError> {
    let mut roots = RootCertStore::empty();
    roots
        .add(creds.ca_cert().clone())
        .map_err(|e| NetError::Tls(format!("job authority not usable as a root: {e}")))?;
    Ok(Arc::new(roots))
}

/// A server config that requires a client certificate issued by the job's authority.
pub fn server_config(
    creds: &JobCredentials,
    identity: &NodeIdentity,
) -> Result<rustls::ServerConfig, NetError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(creds)?, provider())
        .build()
        .map_err(|e| NetError::Tls(e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| NetError::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.cert_chain.clone(), identity.key.clone_key())
        .map_err(|e| NetError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// A client config that trusts only the job's authority and presents the node's certificate.
pub fn client_config(
    creds: &JobCredentials,
    identity: &NodeIdentity,
) -> Result<rustls::ClientConfig, NetError> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| NetError::Tls(e.to_string()))?
        .with_root_certificates(roots(creds)?)
        .with_client_auth_cert(identity.cert_chain.clone(), identity.key.clone_key())
        .map_err(|e| NetError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}
