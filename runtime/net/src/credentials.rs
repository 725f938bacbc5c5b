//! A job's certificate authority and the identities it issues to nodes.
//!
//! `harp run` generates an authority per job (or loads one the user provides from a
//! directory of PEM files) and issues every node it starts a certificate for the name
//! [`NODE_NAME`]; nodes started by hand are given the authority's files. Certificates are
//! issued for a year and carry no IP addresses: identity is "holds a certificate of this
//! job's authority", which both ends check.

use crate::error::NetError;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::path::Path;

/// The server name every node certificate carries and every client asks for.
pub const NODE_NAME: &str = "harp-node";

const CA_CERT_FILE: &str = "ca.pem";
const CA_KEY_FILE: &str = "ca.key";

/// The job's authority: its certificate (trusted by every node) and its key (to issue more).
pub struct JobCredentials {
    ca_cert_der: CertificateDer<'static>,
    ca_cert_pem: String,
    ca_key: KeyPair,
}

/// A node's certificate chain and private key.
pub struct NodeIdentity {
    pub cert_chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Clone for NodeIdentity {
    fn clone(&self) -> Self {
        Self {
            cert_chain: self.cert_chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

/// Writes `bytes` to a new or truncated file at `path` that only its owner can read, from
/// its creation on (a key written first and restricted after could be read in between).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    // A file that existed keeps its mode through `open`: restrict it too.
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    file.write_all(bytes)
}

fn gen_err(e: impl std::fmt::Display) -> NetError {
    NetError::CertificateGeneration(e.to_string())
}

fn ca_params(job: &str) -> Result<CertificateParams, NetError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("harp job {job} authority"));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

impl JobCredentials {
    /// A fresh authority for job `job` (the name goes into the certificate's subject).
    pub fn generate(job: &str) -> Result<Self, NetError> {
        let ca_key = KeyPair::generate().map_err(gen_err)?;
        let cert = ca_params(job)?.self_signed(&ca_key).map_err(gen_err)?;
        Ok(Self {
            ca_cert_der: cert.der().clone(),
            ca_cert_pem: cert.pem(),
            ca_key,
        })
    }

    /// Loads an authority from `dir/ca.pem` and `dir/ca.key` (PEM).
    pub fn load(dir: &Path) -> Result<Self, NetError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| NetError::CredentialsUnreadable {
                path: path.display().to_string(),
                message: e.to_string(),
            })
        };
        let (cert_pem, key_pem) = (read(CA_CERT_FILE)?, read(CA_KEY_FILE)?);
        let unreadable = |what: &str, e: String| NetError::CredentialsUnreadable {
            path: dir.join(what).display().to_string(),
            message: e,
        };
        let ca_key =
            KeyPair::from_pem(&key_pem).map_err(|e| unreadable(CA_KEY_FILE, e.to_string()))?;
        let ca_cert_der = rustls::pki_types::pem::PemObject::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| unreadable(CA_CERT_FILE, e.to_string()))?;
        // Check that the key and the certificate belong together by issuing with them.
        let creds = Self {
            ca_cert_der,
            ca_cert_pem: cert_pem,
            ca_key,
        };
        creds
            .issue_node()
            .map_err(|e| unreadable(CA_CERT_FILE, format!("not a usable authority: {e}")))?;
        Ok(creds)
    }

    /// Writes `ca.pem` and `ca.key` into `dir` (created if missing; the key is private to the
    /// user on Unix).
    pub fn save(&self, dir: &Path) -> Result<(), NetError> {
        let unwritable = |path: &Path, e: std::io::Error| NetError::CredentialsUnwritable {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(|e| unwritable(dir, e))?;
        let cert_path = dir.join(CA_CERT_FILE);
        std::fs::write(&cert_path, &self.ca_cert_pem).map_err(|e| unwritable(&cert_path, e))?;
        let key_path = dir.join(CA_KEY_FILE);
        write_private(&key_path, self.ca_key.serialize_pem().as_bytes())
            .map_err(|e| unwritable(&key_path, e))?;
        Ok(())
    }

    /// The authority in `dir`, or, when `dir` holds neither `ca.pem` nor `ca.key` (e.g. it
    /// does not exist yet), a fresh one for job `job` saved there; `true` when it was made
    /// now. One file without the other is an error, as in [`load`](Self::load).
    pub fn load_or_generate(dir: &Path, job: &str) -> Result<(Self, bool), NetError> {
        let absent = |name: &str| !dir.join(name).exists();
        if absent(CA_CERT_FILE) && absent(CA_KEY_FILE) {
            let creds = Self::generate(job)?;
            creds.save(dir)?;
            return Ok((creds, true));
        }
        Ok((Self::load(dir)?, false))
    }

    /// The authority's certificate, which every node trusts.
    pub fn ca_cert(&self) -> &CertificateDer<'static> {
        &self.ca_cert_der
    }

    /// Issues a node certificate for [`NODE_NAME`], valid for client and server use.
    pub fn issue_node(&self) -> Result<NodeIdentity, NetError> {
        let issuer = Issuer::from_ca_cert_der(&self.ca_cert_der, &self.ca_key).map_err(gen_err)?;
        let mut params = CertificateParams::new(vec![NODE_NAME.to_string()]).map_err(gen_err)?;
        params
            .distinguished_name
            .push(DnType::CommonName, NODE_NAME);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().map_err(gen_err)?;
        let cert = params.signed_by(&key, &issuer).map_err(gen_err)?;
        Ok(NodeIdentity {
            cert_chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        })
    }
}
